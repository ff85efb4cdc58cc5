;; A WASI guest that prints "printed\n" to stdout, then ends one way per
;; export: returns (ok, _start), traps (trap), exits with status 3 (exit)
;; or loops for ever (spin, for fuel and deadlines). The tests of a run's
;; store freed after its answer (sandbox/afteranswer_test.go,
;; cmd/sandboxd/afteranswer_test.go) check that the output comes before
;; the answer, whichever way the run ends.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "printed\n")
  (func $print
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 8))
    (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
  (func (export "_start") (call $print))
  (func (export "ok") (call $print))
  (func (export "trap") (call $print) unreachable)
  (func (export "exit") (call $print) (call $exit (i32.const 3)))
  (func (export "spin") (call $print) (loop $l (br $l))))
