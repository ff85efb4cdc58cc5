;; mem_deny_oob_store.wat - ignores a denied grow and writes where the
;; memory would have been.
;; Attacks: host memory: grows by 100 pages, drops the -1, then stores to
;;          address 100 * 65536 = 6553600, outside the 1-page memory.
;; Fence: the memory cap (4 MiB = 64 pages in tests).
;; Expected: kind memory (the memory_out_of_bounds trap follows a denied
;;           grow, so it is attributed to memory); peak memory 65536 bytes.
(module
  (memory (export "memory") 1)
  (func (export "run")
    (drop (memory.grow (i32.const 100)))
    (i32.store (i32.const 6553600) (i32.const 42))))
