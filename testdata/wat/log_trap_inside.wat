;; log_trap_inside.wat - a valid pointer whose length runs off the end.
;; Attacks: the host's reading of guest memory: ptr 65530, len 100 on a
;;          1-page (65536-byte) memory: the first 6 bytes are valid, the
;;          remaining 94 are not.
;; Fence: host::log checks ptr+len <= memory size before reading.
;; Expected: kind trap raised by the host (bad log range); no partial line
;;           is kept; the sidecar does not crash.
(module
  (import "host" "log" (func $log (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 65530) "tail!!")
  (func (export "run")
    (call $log (i32.const 65530) (i32.const 100))))
