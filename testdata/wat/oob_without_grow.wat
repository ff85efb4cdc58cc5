;; oob_without_grow.wat - an out-of-bounds load with no grow at all.
;; Attacks: memory safety: loads at 65536 * 2 from a 1-page memory.
;; Fence: wasm bounds checking; no grow was denied.
;; Expected: kind trap, code memory_out_of_bounds (NOT memory);
;;           peak memory 65536 bytes.
(module
  (memory (export "memory") 1)
  (func (export "run") (result i32)
    (i32.load (i32.const 131072))))
