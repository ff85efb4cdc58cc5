;; start_spin.wat - an endless loop in the start function.
;; Attacks: instantiation itself; the loop runs before any export is called.
;; Fence: the wall-clock deadline, which covers instantiation (with a small
;;        fuel budget, fuel stops it first).
;; Expected: with huge fuel, kind timeout at ~timeoutMs; "run" never runs.
(module
  (func $spin
    (loop $l
      (br $l)))
  (start $spin)
  (func (export "run")))
