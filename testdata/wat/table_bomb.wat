;; table_bomb.wat - grows a table instead of memory.
;; Attacks: host memory through table elements: table.grow by 100000.
;; Fence: the table cap (tableElements, default 100000; 1 + 100000 is past it): table.grow returns -1.
;; Expected: kind table (the `unreachable` after the denied grow is attributed
;;           to the table cap); the table stays at 1 element.
(module
  (table $t 1 funcref)
  (func (export "run")
    (if (i32.eq (table.grow $t (ref.null func) (i32.const 100000)) (i32.const -1))
      (then unreachable))))
