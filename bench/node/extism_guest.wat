;; extism_guest.wat - the benchmark guest (add, fib_loop) built to the
;; Extism plugin ABI, so @extism/extism can call it: exports take no wasm
;; parameters and return 0; they read their input (two little-endian i32s,
;; 8 bytes) with input_load_u64 and write 8 bytes of output through an
;; Extism-allocated block. fib/fib_loop are copied from
;; testdata/wat/well_behaved.wat so both runtimes execute the same loop.
(module
  (import "extism:host/env" "input_load_u64" (func $input_load_u64 (param i64) (result i64)))
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u64" (func $store_u64 (param i64 i64)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (memory (export "memory") 1)

  (func $emit (param $v i32)
    (local $p i64)
    (local.set $p (call $alloc (i64.const 8)))
    (call $store_u64 (local.get $p) (i64.extend_i32_s (local.get $v)))
    (call $output_set (local.get $p) (i64.const 8)))

  (func $lo (param $x i64) (result i32) (i32.wrap_i64 (local.get $x)))
  (func $hi (param $x i64) (result i32) (i32.wrap_i64 (i64.shr_u (local.get $x) (i64.const 32))))

  (func (export "add") (result i32)
    (local $x i64)
    (local.set $x (call $input_load_u64 (i64.const 0)))
    (call $emit (i32.add (call $lo (local.get $x)) (call $hi (local.get $x))))
    (i32.const 0))

  (func (export "fib_loop") (result i32)
    (local $x i64)
    (local.set $x (call $input_load_u64 (i64.const 0)))
    (call $emit (call $fib_loop (call $lo (local.get $x)) (call $hi (local.get $x))))
    (i32.const 0))

  (func $fib (param $n i32) (result i32)
    (local $a i32) (local $b i32) (local $i i32) (local $tmp i32)
    i32.const 0
    local.set $a
    i32.const 1
    local.set $b
    i32.const 0
    local.set $i
    block $done
      loop $top
        local.get $i
        local.get $n
        i32.ge_s
        br_if $done
        local.get $a
        local.get $b
        i32.add
        local.set $tmp
        local.get $b
        local.set $a
        local.get $tmp
        local.set $b
        local.get $i
        i32.const 1
        i32.add
        local.set $i
        br $top
      end
    end
    local.get $a)

  (func $fib_loop (param $n i32) (param $reps i32) (result i32)
    (local $r i32) (local $k i32)
    block $done
      loop $top
        local.get $k
        local.get $reps
        i32.ge_s
        br_if $done
        local.get $n
        call $fib
        local.set $r
        local.get $k
        i32.const 1
        i32.add
        local.set $k
        br $top
      end
    end
    local.get $r)
)
