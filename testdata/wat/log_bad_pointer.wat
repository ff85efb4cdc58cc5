;; log_bad_pointer.wat - hands host::log a pointer far outside guest memory.
;; Attacks: the host's reading of guest memory: ptr 0xFFFFFFF0, len 100
;;          (ptr+len also overflows 32 bits), on a 1-page memory.
;; Fence: host::log bounds-checks (ptr, len) against the exported "memory"
;;        using 64-bit arithmetic before reading.
;; Expected: kind trap raised by the host (bad log range); no log line kept;
;;           the sidecar neither crashes nor reads host memory.
(module
  (import "host" "log" (func $log (param i32 i32)))
  (memory (export "memory") 1)
  (func (export "run")
    (call $log (i32.const 0xFFFFFFF0) (i32.const 100))))
