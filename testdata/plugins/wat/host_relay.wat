;; The host-call benchmark's plugin (bench/hostcalls.go, `make bench -only
;; hostcalls`): bytes relayed through extism:host/user::relay (bytes) ->
;; (bytes), which the run or instance declares and the parent serves.
;;   echo   output = input, no host call             (the plain call it is judged against)
;;   relay  x = input; loop { r = relay(x); stop when r is empty; free x (not the input); x = r }; output = x
;;          (the parent decides how many host calls: it answers empty to stop)
;;   fetch  one relay(input), its answer dropped: the parent's bytes into the plugin
;;   sink   nothing: the call's input into the plugin, and no output
(module
  (import "extism:host/env" "input_offset" (func $input_offset (result i64)))
  (import "extism:host/env" "length" (func $length (param i64) (result i64)))
  (import "extism:host/env" "free" (func $free (param i64)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/user" "relay" (func $relay (param i64) (result i64)))
  (memory (export "memory") 1)
  (func (export "echo") (result i32)
    (local $h i64)
    (local.set $h (call $input_offset))
    (call $output_set (local.get $h) (call $length (local.get $h)))
    (i32.const 0))
  (func (export "relay") (result i32)
    (local $in i64) (local $x i64) (local $r i64)
    (local.set $in (call $input_offset))
    (local.set $x (local.get $in))
    (block $done
      (loop $next
        (local.set $r (call $relay (local.get $x)))
        (br_if $done (i64.eqz (call $length (local.get $r))))
        (if (i64.ne (local.get $x) (local.get $in)) (then (call $free (local.get $x))))
        (local.set $x (local.get $r))
        (br $next)))
    (call $output_set (local.get $x) (call $length (local.get $x)))
    (i32.const 0))
  (func (export "fetch") (result i32)
    (call $free (call $relay (call $input_offset)))
    (i32.const 0))
  (func (export "sink") (result i32)
    (i32.const 0)))
