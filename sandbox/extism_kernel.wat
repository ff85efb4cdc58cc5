;; sandboxd's Extism kernel: the memory a plugin and its host exchange bytes
;; through, and the functions of extism:host/env that manage it. Written for
;; sandboxd against the ABI as Extism documents it (alloc/free/length,
;; load/store, input, output, error, reset); the layout is ours.
;;
;; It is instantiated in the plugin's own store, so its instructions burn
;; the call's fuel and its loops meet the call's deadline. It never runs
;; memory.grow: it asks the host (sandboxd.grow), which counts the kernel's
;; memory and the plugin's together against the instance's memory cap. No
;; function traps on a bad pointer: loads outside the data area read 0,
;; stores there are dropped, and a handle that is not a live block is
;; ignored (free, error_set) or has length 0. output_set's range is checked
;; by the host when it reads the output.
;;
;; Layout (addresses in the kernel's memory; all fields little-endian):
;;    8  i64  position: end of the block area (next new block)
;;   16  i64  input offset        24  i64  input length
;;   32  i64  output offset       40  i64  output length
;;   48  i64  error handle (0: none)
;;   56  i64  number of free blocks (0: alloc skips the search)
;;   64       first block
;; A block is a 16-byte header, then its data; a handle is the data's
;; address. Header: i64 capacity (a multiple of 8), i32 used (what length
;; returns), i32 status (1 active, 2 free).
(module
  (import "sandboxd" "grow" (func $grow (param i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 8) "\40\00\00\00\00\00\00\00")

  (func $memsize (result i64)
    (i64.shl (i64.extend_i32_u (memory.size)) (i64.const 16)))

  ;; $live: h is the handle of an active block wholly inside the block area.
  (func $live (param $h i64) (result i32)
    (local $b i32)
    (if (i64.lt_u (local.get $h) (i64.const 80)) (then (return (i32.const 0))))
    (if (i64.ne (i64.and (local.get $h) (i64.const 7)) (i64.const 0)) (then (return (i32.const 0))))
    (if (i64.gt_u (local.get $h) (i64.load (i32.const 8))) (then (return (i32.const 0))))
    (local.set $b (i32.wrap_i64 (i64.sub (local.get $h) (i64.const 16))))
    (if (i32.ne (i32.load offset=12 (local.get $b)) (i32.const 1)) (then (return (i32.const 0))))
    (i64.le_u
      (i64.add (local.get $h) (i64.load (local.get $b)))
      (i64.load (i32.const 8))))

  (func (export "alloc") (param $n i64) (result i64)
    (local $size i64) (local $b i64) (local $pos i64) (local $cap i64) (local $nb i32) (local $end i64)
    (if (i64.eqz (local.get $n)) (then (return (i64.const 0))))
    (if (i64.gt_u (local.get $n) (i64.const 0xFFFF0000)) (then (return (i64.const 0))))
    (local.set $size (i64.and (i64.add (local.get $n) (i64.const 7)) (i64.const -8)))
    (local.set $pos (i64.load (i32.const 8)))
    ;; first fit among freed blocks
    (if (i64.ne (i64.load (i32.const 56)) (i64.const 0))
      (then
        (local.set $b (i64.const 64))
        (block $none
          (loop $walk
            ;; The plugin can write headers (store_u64): a header not wholly
            ;; inside the block area, or a capacity reaching past it, ends
            ;; the search (the walk read past the memory before).
            (br_if $none (i64.gt_u (i64.add (local.get $b) (i64.const 16)) (local.get $pos)))
            (local.set $cap (i64.load (i32.wrap_i64 (local.get $b))))
            (br_if $none (i64.gt_u (local.get $cap) (i64.sub (local.get $pos) (i64.add (local.get $b) (i64.const 16)))))
            (if (i32.and
                  (i32.eq (i32.load offset=12 (i32.wrap_i64 (local.get $b))) (i32.const 2))
                  (i64.ge_u (local.get $cap) (local.get $size)))
              (then
                (if (i64.ge_u (i64.sub (local.get $cap) (local.get $size)) (i64.const 80))
                  (then ;; split: the rest becomes a free block of its own
                    (local.set $nb (i32.wrap_i64 (i64.add (local.get $b) (i64.add (local.get $size) (i64.const 16)))))
                    (i64.store (local.get $nb) (i64.sub (local.get $cap) (i64.add (local.get $size) (i64.const 16))))
                    (i32.store offset=8 (local.get $nb) (i32.const 0))
                    (i32.store offset=12 (local.get $nb) (i32.const 2))
                    (i64.store (i32.wrap_i64 (local.get $b)) (local.get $size)))
                  (else
                    (i64.store (i32.const 56) (i64.sub (i64.load (i32.const 56)) (i64.const 1)))))
                (i32.store offset=8 (i32.wrap_i64 (local.get $b)) (i32.wrap_i64 (local.get $n)))
                (i32.store offset=12 (i32.wrap_i64 (local.get $b)) (i32.const 1))
                (return (i64.add (local.get $b) (i64.const 16)))))
            (local.set $b (i64.add (local.get $b) (i64.add (local.get $cap) (i64.const 16))))
            (br $walk)))))
    ;; a new block at the end, growing memory through the host if needed
    (local.set $end (i64.add (local.get $pos) (i64.add (local.get $size) (i64.const 16))))
    (if (i64.gt_u (local.get $end) (call $memsize))
      (then
        (if (i32.lt_s
              (call $grow (i32.wrap_i64
                (i64.shr_u (i64.add (i64.sub (local.get $end) (call $memsize)) (i64.const 0xFFFF)) (i64.const 16))))
              (i32.const 0))
          (then (return (i64.const 0))))))
    (i64.store (i32.wrap_i64 (local.get $pos)) (local.get $size))
    (i32.store offset=8 (i32.wrap_i64 (local.get $pos)) (i32.wrap_i64 (local.get $n)))
    (i32.store offset=12 (i32.wrap_i64 (local.get $pos)) (i32.const 1))
    (i64.store (i32.const 8) (local.get $end))
    (i64.add (local.get $pos) (i64.const 16)))

  (func (export "free") (param $h i64)
    (local $b i32)
    (if (i32.eqz (call $live (local.get $h))) (then (return)))
    (local.set $b (i32.wrap_i64 (i64.sub (local.get $h) (i64.const 16))))
    (if (i64.eq (i64.add (local.get $h) (i64.load (local.get $b))) (i64.load (i32.const 8)))
      (then ;; the last block: give its space back to the end
        (i32.store offset=12 (local.get $b) (i32.const 0))
        (i64.store (i32.const 8) (i64.extend_i32_u (local.get $b))))
      (else
        (i32.store offset=12 (local.get $b) (i32.const 2))
        (i64.store (i32.const 56) (i64.add (i64.load (i32.const 56)) (i64.const 1)))))
    (if (i64.eq (local.get $h) (i64.load (i32.const 16)))
      (then (i64.store (i32.const 24) (i64.const 0)))))

  (func $length (export "length") (param $h i64) (result i64)
    (if (i32.eqz (call $live (local.get $h))) (then (return (i64.const 0))))
    (i64.extend_i32_u (i32.load offset=8 (i32.wrap_i64 (i64.sub (local.get $h) (i64.const 16))))))

  (func (export "length_unsafe") (param $h i64) (result i64)
    (call $length (local.get $h)))

  ;; $inData: [p, p+n) lies in the data area (past the root). n is checked
  ;; against the size first: memsize - n must not wrap (input_set of a
  ;; length past the memory let input_load read out of bounds).
  (func $inData (param $p i64) (param $n i64) (result i32)
    (i32.and
      (i32.and
        (i64.ge_u (local.get $p) (i64.const 64))
        (i64.le_u (local.get $n) (call $memsize)))
      (i64.le_u (local.get $p) (i64.sub (call $memsize) (local.get $n)))))

  (func (export "load_u8") (param $p i64) (result i32)
    (if (result i32) (call $inData (local.get $p) (i64.const 1))
      (then (i32.load8_u (i32.wrap_i64 (local.get $p))))
      (else (i32.const 0))))

  (func (export "load_u64") (param $p i64) (result i64)
    (if (result i64) (call $inData (local.get $p) (i64.const 8))
      (then (i64.load (i32.wrap_i64 (local.get $p))))
      (else (i64.const 0))))

  (func (export "store_u8") (param $p i64) (param $v i32)
    (if (call $inData (local.get $p) (i64.const 1))
      (then (i32.store8 (i32.wrap_i64 (local.get $p)) (local.get $v)))))

  (func (export "store_u64") (param $p i64) (param $v i64)
    (if (call $inData (local.get $p) (i64.const 8))
      (then (i64.store (i32.wrap_i64 (local.get $p)) (local.get $v)))))

  (func (export "input_set") (param $h i64) (param $n i64)
    (if (i32.or (i64.eqz (local.get $n)) (call $inData (local.get $h) (local.get $n)))
      (then
        (i64.store (i32.const 16) (local.get $h))
        (i64.store (i32.const 24) (local.get $n)))))

  (func (export "input_length") (result i64) (i64.load (i32.const 24)))
  (func (export "input_offset") (result i64) (i64.load (i32.const 16)))

  (func (export "input_load_u8") (param $off i64) (result i32)
    (if (result i32) (i64.lt_u (local.get $off) (i64.load (i32.const 24)))
      (then (i32.load8_u (i32.wrap_i64 (i64.add (i64.load (i32.const 16)) (local.get $off)))))
      (else (i32.const 0))))

  (func (export "input_load_u64") (param $off i64) (result i64)
    (if (result i64)
        (i32.and
          (i64.ge_u (i64.load (i32.const 24)) (i64.const 8))
          (i64.le_u (local.get $off) (i64.sub (i64.load (i32.const 24)) (i64.const 8))))
      (then (i64.load (i32.wrap_i64 (i64.add (i64.load (i32.const 16)) (local.get $off)))))
      (else (i64.const 0))))

  ;; output_set keeps the range as given: the host checks it against the
  ;; blocks when it reads the output (one that is not inside a live block
  ;; is the call's trap there, as a host function's bad handle is).
  (func (export "output_set") (param $p i64) (param $n i64)
    (i64.store (i32.const 32) (local.get $p))
    (i64.store (i32.const 40) (local.get $n)))

  (func (export "output_length") (result i64) (i64.load (i32.const 40)))
  (func (export "output_offset") (result i64) (i64.load (i32.const 32)))

  (func (export "error_set") (param $h i64)
    (if (i32.or (i64.eqz (local.get $h)) (call $live (local.get $h)))
      (then (i64.store (i32.const 48) (local.get $h)))))

  (func (export "error_get") (result i64) (i64.load (i32.const 48)))

  ;; reset forgets every block and the input, output and error: the host
  ;; calls it before each call.
  (func (export "reset")
    (i64.store (i32.const 8) (i64.const 64))
    (i64.store (i32.const 16) (i64.const 0))
    (i64.store (i32.const 24) (i64.const 0))
    (i64.store (i32.const 32) (i64.const 0))
    (i64.store (i32.const 40) (i64.const 0))
    (i64.store (i32.const 48) (i64.const 0))
    (i64.store (i32.const 56) (i64.const 0)))

  (func (export "memory_bytes") (result i64)
    (i64.sub (call $memsize) (i64.const 64))))
