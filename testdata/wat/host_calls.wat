;; Host functions served by the parent (docs/protocol.md, "Host functions
;; served by the parent"): a guest that calls back into the program that
;; spawned the sidecar. Declare env::lookup (i64) -> (i32) and env::wait
;; () -> () in hostFunctions, else the module is refused (disallowed_import).
;; The fences hold across the call: the deadline ends a wait for the parent
;; at once (timeout), the parent gets $/cancelRequest for its host call.
;;   lookup(k)     -> the parent's lookup(k)                 (ok)
;;   lookup_sum(k) -> lookup(k) + lookup(k + 1)              (two host calls)
;;   wait()        -> the parent's wait(), then 1            (timeout if it never answers)
(module
  (import "env" "lookup" (func $lookup (param i64) (result i32)))
  (import "env" "wait" (func $wait))
  (func (export "lookup") (param $k i64) (result i32)
    (call $lookup (local.get $k)))
  (func (export "lookup_sum") (param $k i64) (result i32)
    (i32.add (call $lookup (local.get $k))
             (call $lookup (i64.add (local.get $k) (i64.const 1)))))
  (func (export "wait") (result i32)
    (call $wait)
    (i32.const 1)))
