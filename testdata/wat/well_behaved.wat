;; well_behaved.wat - a guest that does only legitimate work.
;; Attacks: nothing. Used for exact fuel accounting, value passing and as a
;; CPU-bound benchmark guest.
;; Fence: none should fire under default limits.
;; Expected: ok.
;;   add(2, 40)  = 42      fuel 4
;;   fib(10)     = 55      fuel 182
;;   fib(20)     = 6765    fuel 352
;;   fib(30)     = 832040  fuel 522   (17 fuel per loop iteration + 12)
;;   fib_loop(n, reps) calls fib(n) reps times and returns the last result.
;;   echo_i32/echo_i64/echo_f32/echo_f64 return their argument unchanged.
;;   multi(i32 a, i64 b, f32 c, f64 d) returns (d, c, b, a).
;; Note: fuel figures are wasmtime's (block/loop/end/nop/drop cost 0); the
;; shape of $fib below is what makes them exact - do not "tidy" it.
(module
  (func $add (export "add") (param i32 i32) (result i32)
    local.get 0
    local.get 1
    i32.add)

  (func $fib (export "fib") (param $n i32) (result i32)
    (local $a i32) (local $b i32) (local $i i32) (local $tmp i32)
    i32.const 0
    local.set $a
    i32.const 1
    local.set $b
    i32.const 0
    local.set $i
    block $done
      loop $top
        ;; if i >= n: done
        local.get $i
        local.get $n
        i32.ge_s
        br_if $done
        ;; tmp = a + b; a = b; b = tmp
        local.get $a
        local.get $b
        i32.add
        local.set $tmp
        local.get $b
        local.set $a
        local.get $tmp
        local.set $b
        ;; i++
        local.get $i
        i32.const 1
        i32.add
        local.set $i
        br $top
      end
    end
    local.get $a)

  (func (export "fib_loop") (param $n i32) (param $reps i32) (result i32)
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

  (func (export "echo_i32") (param i32) (result i32) local.get 0)
  (func (export "echo_i64") (param i64) (result i64) local.get 0)
  (func (export "echo_f32") (param f32) (result f32) local.get 0)
  (func (export "echo_f64") (param f64) (result f64) local.get 0)

  (func (export "multi") (param i32 i64 f32 f64) (result f64 f32 i64 i32)
    local.get 3
    local.get 2
    local.get 1
    local.get 0)
)
