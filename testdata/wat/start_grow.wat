;; start_grow.wat - a memory bomb in the start function.
;; Attacks: host memory during instantiation: grows by 1000 pages (62.5 MiB).
;; Fence: the memory cap (default 16 MiB): memory.grow returns -1.
;; Expected: kind memory (the `unreachable` after the denied grow is
;;           attributed to memory); peak memory 65536 bytes (1 page);
;;           "run" never runs.
(module
  (memory (export "memory") 1)
  (func $grow
    (if (i32.eq (memory.grow (i32.const 1000)) (i32.const -1))
      (then unreachable)))
  (start $grow)
  (func (export "run")))
