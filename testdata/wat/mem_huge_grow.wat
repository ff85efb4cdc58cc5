;; mem_huge_grow.wat - a single enormous grow.
;; Attacks: host memory: one memory.grow of 60000 pages (~3.66 GiB) from 1 page.
;; Fence: the memory cap (4 MiB = 64 pages in tests): memory.grow returns -1
;;        without the host reserving or committing the memory.
;; Expected: kind memory; peak memory 65536 bytes.
(module
  (memory (export "memory") 1)
  (func (export "run")
    (if (i32.eq (memory.grow (i32.const 60000)) (i32.const -1))
      (then unreachable))))
