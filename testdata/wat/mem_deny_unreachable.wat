;; mem_deny_unreachable.wat - denied grow followed by a deliberate trap.
;; Attacks: host memory: grows by 100 pages (1 + 100 pages = 6.3 MiB).
;; Fence: the memory cap (4 MiB = 64 pages in tests): memory.grow returns -1.
;; Expected: kind memory (not trap unreachable: the trap is a consequence of
;;           the denied grow); peak memory 65536 bytes.
(module
  (memory (export "memory") 1)
  (func (export "run")
    (if (i32.eq (memory.grow (i32.const 100)) (i32.const -1))
      (then unreachable))))
