;; mem_deny_spin.wat - ignores a denied grow and then spins forever.
;; Attacks: host memory (grow by 100 pages), then the CPU.
;; Fence: the memory cap denies the grow (4 MiB = 64 pages in tests); the run
;;        then ends on fuel, but the denial explains the failure.
;; Expected: kind memory_limit_exceeded (requested 101 pages = 6619136 bytes),
;;           however the guest reacts to the -1; peak memory 65536 bytes.
(module
  (memory (export "memory") 1)
  (func (export "run")
    (drop (memory.grow (i32.const 100)))
    (loop $spin
      (br $spin))))
