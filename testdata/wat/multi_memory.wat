;; multi_memory.wat - two linear memories (multi-memory proposal).
;; Attacks: the memory cap's accounting across memories: the second memory
;;          is not exported and is the one that grows.
;; Fence: the memories count limit (default 1: refused at instantiation) and
;;        the memory cap, which must sum all memories.
;; Expected with memories >= 2 and multi-memory enabled: kind ok, run()
;;           returns 4 (memory 0: 1 page + memory 1: 1+2 pages);
;;           peak memory 262144 bytes (4 pages in total).
;;           With memories = 1: refused at instantiation.
(module
  (memory $m0 (export "memory") 1)
  (memory $m1 1)
  (func (export "run") (result i32)
    (drop (memory.grow $m1 (i32.const 2)))
    (i32.add (memory.size $m0) (memory.size $m1))))
