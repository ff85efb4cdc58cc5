;; log_invalid_utf8.wat - logs bytes that are not UTF-8.
;; Attacks: the log pipeline / JSON output: "ok \ff\fe bad" (9 bytes;
;;          0xFF and 0xFE can never appear in UTF-8).
;; Fence: host::log sanitises the line before storing it.
;; Expected: kind ok; one log line in which each invalid byte is replaced
;;           by U+FFFD ("ok \uFFFD\uFFFD bad"); no invalid UTF-8 escapes
;;           into the output.
(module
  (import "host" "log" (func $log (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "ok \ff\fe bad")
  (func (export "run")
    (call $log (i32.const 0) (i32.const 9))))
