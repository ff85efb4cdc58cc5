;; traps.wat - one export per wasm trap reachable from WAT.
;; Attacks: nothing in particular; checks every trap code is reported as
;;          kind trap with the right code (and never as memory/fuel/timeout).
;; Fence: the wasm semantics themselves.
;; Expected (export -> kind trap, code):
;;   unreachable     -> unreachable
;;   div_by_zero     -> integer_divide_by_zero
;;   int_overflow    -> integer_overflow          (INT_MIN / -1)
;;   bad_conversion  -> invalid_conversion_to_integer (i32.trunc_f32_s NaN)
;;   oob             -> memory_out_of_bounds
;;   table_oob       -> table_out_of_bounds       (call_indirect index 5 of 2)
;;   null_call       -> indirect_call_to_null     (table slot 1 is null)
;;   bad_sig         -> bad_signature             (slot 0 is ()->i32, called as ()->i64)
;;   stack_overflow  -> stack_overflow
(module
  (type $ret_i32 (func (result i32)))
  (type $ret_i64 (func (result i64)))
  (memory (export "memory") 1)
  (table $t 2 funcref)
  (elem (table $t) (i32.const 0) func $seven)   ;; slot 1 stays null
  (func $seven (type $ret_i32) (i32.const 7))
  (func $down (param i32) (result i32)
    (i32.add (call $down (local.get 0)) (i32.const 1)))

  (func (export "unreachable") unreachable)
  (func (export "div_by_zero") (result i32)
    (i32.div_s (i32.const 1) (i32.const 0)))
  (func (export "int_overflow") (result i32)
    (i32.div_s (i32.const 0x80000000) (i32.const -1)))
  (func (export "bad_conversion") (result i32)
    (i32.trunc_f32_s (f32.const nan)))
  (func (export "oob") (result i32)
    (i32.load (i32.const 65536)))
  (func (export "table_oob") (result i32)
    (call_indirect $t (type $ret_i32) (i32.const 5)))
  (func (export "null_call") (result i32)
    (call_indirect $t (type $ret_i32) (i32.const 1)))
  (func (export "bad_sig") (result i64)
    (call_indirect $t (type $ret_i64) (i32.const 0)))
  (func (export "stack_overflow") (result i32)
    (call $down (i32.const 0))))
