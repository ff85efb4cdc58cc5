;; Host functions served by the parent (hostFunctions, host/call): imports
;; env::lookup (i64) -> (i32), which the run must declare with exactly that
;; signature. `lookup(key)` returns the parent's answer; `sum(n)` calls
;; lookup(0) … lookup(n-1) and adds the answers. Undeclared, or declared
;; with another signature → disallowed_import; the parent's error answer or
;; wrong values → host_function_error; the parent never answering →
;; timeout at the run's deadline.
(module
  (import "env" "lookup" (func $lookup (param i64) (result i32)))
  (func (export "lookup") (param i64) (result i32)
    (call $lookup (local.get 0)))
  (func (export "sum") (param $n i64) (result i32)
    (local $i i64) (local $s i32)
    (block $done
      (loop $next
        (br_if $done (i64.ge_u (local.get $i) (local.get $n)))
        (local.set $s (i32.add (local.get $s) (call $lookup (local.get $i))))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $next)))
    (local.get $s)))
