;; log_wrong_signature.wat - imports host::log with the wrong type.
;; Attacks: the host ABI: host::log declared as (param i64) instead of
;;          (param i32 i32), hoping the host reads garbage arguments.
;; Fence: import type checking at link time.
;; Expected: refused at instantiation with an import type mismatch for
;;           host::log (kind import / link error), before any guest code runs.
(module
  (import "host" "log" (func $log (param i64)))
  (memory (export "memory") 1)
  (func (export "run")
    (call $log (i64.const 0x0000001400000000))))
