;; mem_hidden_grow.wat - grows a memory the host cannot see by export.
;; Attacks: host memory through an UNEXPORTED memory (the cap must be enforced
;;          by the store's resource limiter, not by inspecting exports).
;; Fence: the memory cap (4 MiB = 64 pages in tests): grow by 100 returns -1.
;; Expected: kind memory; peak memory 65536 bytes.
(module
  (memory 1)
  (func (export "run")
    (if (i32.eq (memory.grow (i32.const 100)) (i32.const -1))
      (then unreachable))))
