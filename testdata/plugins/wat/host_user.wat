;; An Extism plugin calling a host function of its host's, the way the
;; PDKs do: extism:host/user::transform takes a memory handle and returns
;; one (declared {"params": ["bytes"], "results": ["bytes"]}). `run`
;; logs "hi" (log_info: linked with or without the log grant), passes its
;; input block to transform and outputs the block it gets back.
(module
  (import "extism:host/env" "input_offset" (func $input_offset (result i64)))
  (import "extism:host/env" "length" (func $length (param i64) (result i64)))
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/env" "log_info" (func $log_info (param i64)))
  (import "extism:host/user" "transform" (func $transform (param i64) (result i64)))
  (memory (export "memory") 1)
  (func (export "run") (result i32)
    (local $h i64) (local $l i64)
    (local.set $l (call $alloc (i64.const 2)))
    (call $store_u8 (local.get $l) (i32.const 104))
    (call $store_u8 (i64.add (local.get $l) (i64.const 1)) (i32.const 105))
    (call $log_info (local.get $l))
    (local.set $h (call $transform (call $input_offset)))
    (call $output_set (local.get $h) (call $length (local.get $h)))
    (i32.const 0)))
