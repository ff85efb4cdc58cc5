;; trap_near_cap.wat - reaches the cap exactly, then traps for another reason.
;; Attacks: the attribution logic: memory is at 64 pages = 4 MiB, exactly the
;;          4 MiB cap (allowed: the cap is inclusive), then i32.div_s by zero.
;; Fence: none of the memory fences; a plain trap.
;; Expected: kind trap, code integer_divide_by_zero (NOT memory);
;;           peak memory 4194304 bytes.
(module
  (memory (export "memory") 1)
  (func (export "run") (result i32)
    (if (i32.eq (memory.grow (i32.const 63)) (i32.const -1))
      (then unreachable))
    (i32.div_s (memory.size) (i32.const 0))))
