;; infinite_loop.wat - burns CPU forever.
;; Attacks: the CPU (an endless loop with no calls and no memory traffic).
;; Fence: fuel (with a huge fuel budget, the wall-clock deadline instead).
;; Expected: kind fuel_exhausted, fuel consumed == the fuel limit;
;;           with fuel >> timeout, kind timeout at ~timeoutMs.
(module
  (func (export "run")
    (loop $spin
      (br $spin))))
