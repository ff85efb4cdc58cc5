;; logger.wat - the well-behaved use of host::log.
;; Attacks: nothing; exercises the granted log import.
;; Fence: none (the line is 20 bytes, far below logBytes).
;; Expected: ok; exactly one log line "hello from the guest" (20 bytes).
(module
  (import "host" "log" (func $log (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "hello from the guest")
  (func (export "run")
    (call $log (i32.const 0) (i32.const 20))))
