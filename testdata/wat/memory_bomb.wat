;; memory_bomb.wat - grows linear memory until the host says no.
;; Attacks: host memory, 16 pages (1 MiB) per memory.grow, in a loop.
;; Fence: the memory cap (memoryBytes): the grow that would pass it returns -1.
;; Expected: kind memory; peak memory <= the cap. With the default 16 MiB
;;           cap (256 pages): 1, 17, ..., 241 pages, the grow to 257 is
;;           denied, so peak 241 pages = 15794176 bytes. The guest then hits
;;           `unreachable`, which must be attributed to memory, not trap.
(module
  (memory (export "memory") 1)
  (func (export "run")
    (loop $grow
      (if (i32.eq (memory.grow (i32.const 16)) (i32.const -1))
        (then unreachable))
      (br $grow))))
