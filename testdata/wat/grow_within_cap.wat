;; grow_within_cap.wat - grows memory, but stays inside the cap.
;; Attacks: nothing; checks that legitimate growth is allowed and measured.
;; Fence: the memory cap must NOT fire (32 pages = 2 MiB < 4 MiB / 16 MiB).
;; Expected: ok; run() returns 32 (memory.size in pages);
;;           peak memory 2097152 bytes.
(module
  (memory (export "memory") 1)
  (func (export "run") (result i32)
    ;; 1 -> 16 -> 32 pages; a denied grow (-1) would leave the size short.
    (drop (memory.grow (i32.const 15)))
    (drop (memory.grow (i32.const 16)))
    (memory.size)))
