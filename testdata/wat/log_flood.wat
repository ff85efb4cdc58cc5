;; log_flood.wat - floods host::log.
;; Attacks: host memory and output size: 1,000,000 calls of host::log with
;;          the same 1000-byte line (1e9 bytes in total).
;; Fence: the log budget (logBytes, default 1 MiB): lines beyond the budget
;;        are dropped, not stored. Fuel/timeout bound the call count.
;; Expected: log bytes kept <= logBytes, each line costing its wire size
;;           (1 MiB default: 927 lines of 1000 + 2 + 128 = 1130 bytes);
;;           the excess is dropped, never OOM.
;;           The whole run costs 11000011 fuel (11 per call); it takes ~3.5 s
;;           with wasmtime-go host calls, so under the 1 s default timeout
;;           the kind is timeout, with timeout >= 10 s it is ok.
;;           For a deterministic kind, set fuel (e.g. 1e6 -> fuel_exhausted)
;;           or call flood(count) with a small count (-> ok).
(module
  (import "host" "log" (func $log (param i32 i32)))
  (memory (export "memory") 1)
  (func $flood (export "flood") (param $count i32)
    ;; a 1000-byte line of 'x' at address 0
    (memory.fill (i32.const 0) (i32.const 0x78) (i32.const 1000))
    (block $done
      (loop $again
        (br_if $done (i32.eqz (local.get $count)))
        (call $log (i32.const 0) (i32.const 1000))
        (local.set $count (i32.sub (local.get $count) (i32.const 1)))
        (br $again))))
  (func (export "run")
    (call $flood (i32.const 1000000))))
