;; random_roller.wat - uses the granted host::random (splitmix64).
;; Attacks: nothing; checks determinism of the seeded generator.
;; Fence: none.
;; Expected: ok; with seed 42 the first roll() returns 803958421
;;           (the first splitmix64 output wrapped to i32).
(module
  (import "host" "random" (func $random (result i64)))
  (func (export "roll") (result i32)
    (i32.wrap_i64 (call $random))))
