;; An Extism plugin calling a host function of Extism's default namespace
;; for them, extism:host/user::transform (bytes) -> (bytes): a memory handle
;; in, a memory handle out (an i64 each, Extism's PTR). Declare
;; {"module": "extism:host/user", "name": "transform", "params": ["bytes"],
;; "results": ["bytes"]}; the parent sees the bytes behind the handle and
;; answers bytes, which become a new block whose handle the guest gets.
;;   run: output = transform(input)
(module
  (import "extism:host/env" "input_offset" (func $input_offset (result i64)))
  (import "extism:host/env" "length" (func $length (param i64) (result i64)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/user" "transform" (func $transform (param i64) (result i64)))
  (memory (export "memory") 1)
  (func (export "run") (result i32) (local $h i64)
    (local.set $h (call $transform (call $input_offset)))
    (call $output_set (local.get $h) (call $length (local.get $h)))
    (i32.const 0)))
