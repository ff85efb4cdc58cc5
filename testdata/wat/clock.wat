;; clock.wat - uses the granted host::now_ns (monotonic nanoseconds).
;; Attacks: nothing; checks the clock is monotonic.
;; Fence: none.
;; Expected: ok; run() returns second reading - first reading, >= 0;
;;           now() returns a single reading.
(module
  (import "host" "now_ns" (func $now (result i64)))
  (func (export "run") (result i64)
    (local $t0 i64)
    (local.set $t0 (call $now))
    (i64.sub (call $now) (local.get $t0)))
  (func (export "now") (result i64)
    (call $now)))
