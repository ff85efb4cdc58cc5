;; A plugin written directly against the Extism ABI (extism:host/env), so
;; the tests do not depend on one PDK. Every function is a plugin function:
;; no parameters, an i32 return code.
(module
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (import "extism:host/env" "input_load_u8" (func $input_load_u8 (param i64) (result i32)))
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "free" (func $free (param i64)))
  (import "extism:host/env" "length" (func $length (param i64) (result i64)))
  (import "extism:host/env" "load_u8" (func $load_u8 (param i64) (result i32)))
  (import "extism:host/env" "load_u64" (func $load_u64 (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "store_u64" (func $store_u64 (param i64 i64)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/env" "error_set" (func $error_set (param i64)))
  (import "extism:host/env" "config_get" (func $config_get (param i64) (result i64)))
  (import "extism:host/env" "var_get" (func $var_get (param i64) (result i64)))
  (import "extism:host/env" "var_set" (func $var_set (param i64 i64)))
  (import "extism:host/env" "log_info" (func $log_info (param i64)))
  (import "extism:host/env" "log_warn" (func $log_warn (param i64)))
  (memory (export "memory") 1)
  (data (i32.const 0) "Hello, ")            ;; 0, 7
  (data (i32.const 16) "greeting")          ;; 16, 8
  (data (i32.const 32) "it failed on purpose") ;; 32, 20
  (data (i32.const 64) "n")                 ;; 64, 1
  (data (i32.const 80) "hello from info")   ;; 80, 15
  (data (i32.const 96) "careful: warn")     ;; 96, 13
  (data (i32.const 112) "(none)")           ;; 112, 6

  ;; $put copies [ptr, ptr+len) of this memory into a new kernel block.
  (func $put (param $ptr i32) (param $len i32) (result i64)
    (local $h i64) (local $i i32)
    (local.set $h (call $alloc (i64.extend_i32_u (local.get $len))))
    (block $done
      (loop $copy
        (br_if $done (i32.ge_u (local.get $i) (local.get $len)))
        (call $store_u8 (i64.add (local.get $h) (i64.extend_i32_u (local.get $i)))
                        (i32.load8_u (i32.add (local.get $ptr) (local.get $i))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $copy)))
    (local.get $h))

  ;; greet: "Hello, " + input
  (func (export "greet") (result i32)
    (local $n i64) (local $h i64) (local $i i64)
    (local.set $n (call $input_length))
    (local.set $h (call $alloc (i64.add (local.get $n) (i64.const 7))))
    (block $done
      (loop $prefix
        (br_if $done (i64.ge_u (local.get $i) (i64.const 7)))
        (call $store_u8 (i64.add (local.get $h) (local.get $i)) (i32.load8_u (i32.wrap_i64 (local.get $i))))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $prefix)))
    (local.set $i (i64.const 0))
    (block $done
      (loop $body
        (br_if $done (i64.ge_u (local.get $i) (local.get $n)))
        (call $store_u8 (i64.add (local.get $h) (i64.add (local.get $i) (i64.const 7)))
                        (call $input_load_u8 (local.get $i)))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $body)))
    (call $output_set (local.get $h) (i64.add (local.get $n) (i64.const 7)))
    (i32.const 0))

  ;; echo: the input, byte for byte
  (func (export "echo") (result i32)
    (local $n i64) (local $h i64) (local $i i64)
    (local.set $n (call $input_length))
    (local.set $h (call $alloc (local.get $n)))
    (block $done
      (loop $body
        (br_if $done (i64.ge_u (local.get $i) (local.get $n)))
        (call $store_u8 (i64.add (local.get $h) (local.get $i)) (call $input_load_u8 (local.get $i)))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $body)))
    (call $output_set (local.get $h) (local.get $n))
    (i32.const 0))

  ;; count: the var "n" (u64, little-endian) plus one, kept and output
  (func (export "count") (result i32)
    (local $v i64) (local $c i64) (local $h i64)
    (local.set $v (call $var_get (call $put (i32.const 64) (i32.const 1))))
    (if (i64.eq (call $length (local.get $v)) (i64.const 8))
      (then (local.set $c (call $load_u64 (local.get $v)))))
    (local.set $c (i64.add (local.get $c) (i64.const 1)))
    (local.set $h (call $alloc (i64.const 8)))
    (call $store_u64 (local.get $h) (local.get $c))
    (call $var_set (call $put (i32.const 64) (i32.const 1)) (local.get $h))
    (local.set $h (call $alloc (i64.const 8)))
    (call $store_u64 (local.get $h) (local.get $c))
    (call $output_set (local.get $h) (i64.const 8))
    (i32.const 0))

  ;; config: the config value "greeting", or "(none)"
  (func (export "config") (result i32)
    (local $v i64)
    (local.set $v (call $config_get (call $put (i32.const 16) (i32.const 8))))
    (if (i64.eqz (local.get $v))
      (then (local.set $v (call $put (i32.const 112) (i32.const 6)))))
    (call $output_set (local.get $v) (call $length (local.get $v)))
    (i32.const 0))

  ;; logs: one info and one warn line
  (func (export "logs") (result i32)
    (call $log_info (call $put (i32.const 80) (i32.const 15)))
    (call $log_warn (call $put (i32.const 96) (i32.const 13)))
    (i32.const 0))

  ;; fail: a plugin error with a message
  (func (export "fail") (result i32)
    (call $error_set (call $put (i32.const 32) (i32.const 20)))
    (i32.const 1))

  ;; rc: a non-zero return without a message
  (func (export "rc") (result i32) (i32.const 3))

  ;; spin: never returns
  (func (export "spin") (result i32)
    (loop $forever (br $forever))
    (i32.const 0))

  ;; hog: kernel blocks of 1 MiB until the kernel refuses, then traps
  (func (export "hog") (result i32)
    (loop $more
      (br_if $more (i64.ne (call $alloc (i64.const 1048576)) (i64.const 0))))
    unreachable)

  ;; grow: this module's own memory, a page at a time, until refused
  (func (export "grow") (result i32)
    (loop $more
      (br_if $more (i32.ne (memory.grow (i32.const 1)) (i32.const -1))))
    unreachable))
