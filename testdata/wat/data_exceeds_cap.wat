;; data_exceeds_cap.wat - asks for too much memory up front.
;; Attacks: host memory at instantiation: initial memory of 100 pages
;;          (6553600 bytes = 6.25 MiB) with a data segment near its end,
;;          so the memory must really exist before any code runs.
;; Fence: the memory cap (4 MiB = 64 pages in tests) applied by the store's
;;        resource limiter when the memory is created.
;; Expected: kind memory at instantiation; no guest code runs; fuel 0.
(module
  (memory (export "memory") 100)
  (data (i32.const 6553584) "end of the 100th")   ;; last 16 bytes
  (func (export "run") (result i32)
    (i32.load8_u (i32.const 6553599))))
