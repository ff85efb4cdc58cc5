;; recursion.wat - unbounded recursion.
;; Attacks: the native stack of the host thread.
;; Fence: wasmtime's wasm stack limit (max_wasm_stack), then the guard page.
;; Expected: kind trap, code stack_overflow; the sidecar survives.
(module
  (func $down (param $n i32) (result i32)
    (i32.add
      (call $down (i32.add (local.get $n) (i32.const 1)))
      (i32.const 1)))
  (func (export "run") (result i32)
    (call $down (i32.const 0))))
