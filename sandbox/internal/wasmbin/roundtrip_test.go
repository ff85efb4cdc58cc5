package wasmbin

import (
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

func validate(wasm []byte) error {
	return wasmtime.ModuleValidate(newTestEngine(), wasm)
}

// TestRoundTripFeatures instruments modules that use every supported
// instruction family and checks that the output validates and that the
// exported "run" computes the same value as in the original module.
func TestRoundTripFeatures(t *testing.T) {
	tests := []struct {
		name string
		wat  string
		want int64
	}{
		{
			name: "simd",
			wat: `(module (memory 1)
			  (func (export "run") (result i32)
			    (v128.store (i32.const 0) (v128.const i32x4 1 2 3 4))
			    (v128.store offset=16 (i32.const 0)
			      (i8x16.shuffle 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15
			        (v128.load (i32.const 0)) (v128.load32_zero (i32.const 4))))
			    (drop (v128.load8_lane 3 (i32.const 0) (v128.const i64x2 0 0)))
			    (v128.store32_lane 1 (i32.const 32) (i32x4.splat (memory.grow (i32.const 1))))
			    (i32.add
			      (i32x4.extract_lane 2 (i32x4.replace_lane 1 (v128.load (i32.const 0)) (i32.const 9)))
			      (i32.add (i32.load (i32.const 32))
			        (i32x4.extract_lane 0 (i32x4.relaxed_laneselect
			          (v128.const i32x4 5 5 5 5) (v128.const i32x4 6 6 6 6) (v128.const i32x4 -1 -1 -1 -1)))))))`,
			want: 3 + 1 + 5,
		},
		{
			name: "bulk memory and tables",
			wat: `(module (memory 1) (table 2 funcref)
			  (data $d "abcd") (elem $e func $f)
			  (func $f (result i32) (i32.const 42))
			  (func (export "run") (result i32)
			    (memory.init $d (i32.const 0) (i32.const 0) (i32.const 4))
			    (data.drop $d)
			    (memory.copy (i32.const 8) (i32.const 0) (i32.const 4))
			    (memory.fill (i32.const 4) (i32.const 0) (i32.const 4))
			    (table.init $e (i32.const 1) (i32.const 0) (i32.const 1))
			    (elem.drop $e)
			    (table.copy (i32.const 0) (i32.const 1) (i32.const 1))
			    (table.fill (i32.const 1) (ref.null func) (i32.const 1))
			    (drop (table.grow (ref.func $f) (i32.const 1)))
			    (table.set (i32.const 1) (table.get (i32.const 0)))
			    (i32.add (i32.add (i32.load8_u (i32.const 9)) (table.size))
			      (i32.add (call_indirect (result i32) (i32.const 1))
			        (i32.trunc_sat_f32_s (f32.const 1.5))))))`,
			want: 'b' + 3 + 42 + 1,
		},
		{
			name: "typed select, block type index, multi-value, ref.is_null",
			wat: `(module (type $pair (func (param i32) (result i32 i32)))
			  (func $two (type $pair) (local.get 0) (i32.const 3))
			  (func (export "run") (result i32) (local $r externref)
			    (i32.const 4)
			    (block (type $pair) (call $two))
			    (i32.add)
			    (select (result i32) (i32.const 100) (i32.const 200) (ref.is_null (local.get $r)))
			    (i32.add)
			    (i32.extend8_s (i32.const 0xff))
			    (i32.add)))`,
			want: 4 + 3 + 100 - 1,
		},
		{
			name: "tail calls and br_table",
			wat: `(module (type $t (func (param i32) (result i32))) (table funcref (elem $k))
			  (func $k (param i32) (result i32)
			    (block $a (block $b (block $c (br_table $a $b $c (local.get 0)))
			      (return (i32.const 30))) (return (i32.const 20)))
			    (i32.const 10))
			  (func (export "run") (result i32)
			    (return_call_indirect (type $t) (i32.const 1) (i32.const 0))))`,
			want: 20,
		},
		{
			name: "atomics on shared memory",
			wat: `(module (memory 1 1 shared)
			  (func (export "run") (result i32)
			    (i32.atomic.store (i32.const 0) (i32.const 5))
			    (drop (i32.atomic.rmw.add (i32.const 0) (i32.const 2)))
			    (atomic.fence)
			    (drop (memory.atomic.notify (i32.const 0) (i32.const 0)))
			    (i32.add (i32.atomic.load (i32.const 0)) (memory.grow (i32.const 0)))))`,
			want: 7 + 1,
		},
		{
			name: "multi-memory memargs",
			wat: `(module (memory 1) (memory $b 1)
			  (func (export "run") (result i32)
			    (i64.store $b offset=40000 (i32.const 0) (i64.const 77))
			    (memory.copy 0 $b (i32.const 0) (i32.const 40000) (i32.const 8))
			    (i32.add (i32.load 0 (i32.const 0)) (memory.grow $b (i32.const 0)))))`,
			want: 77 + 1,
		},
		{
			name: "globals with constant initializers",
			wat: `(module (global $a i64 (i64.const -1)) (global $b f64 (f64.const 2.5))
			  (global $c (mut funcref) (ref.func $run)) (global $d v128 (v128.const i64x2 1 2))
			  (func $run (export "run") (result i32) (i32.wrap_i64 (global.get $a))))`,
			want: -1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			engine := newTestEngine()
			out, _ := instrumentWAT(t, engine, tc.wat)
			for _, wasm := range [][]byte{wat2wasm(t, tc.wat), out} {
				module, err := wasmtime.NewModule(engine, wasm)
				if err != nil {
					t.Fatal(err)
				}
				store := wasmtime.NewStore(engine)
				inst, err := wasmtime.NewInstance(store, module, nil)
				if err != nil {
					t.Fatal(err)
				}
				s := &sandbox{t: t, store: store, inst: inst}
				if got := s.call("run"); got != tc.want {
					t.Errorf("run = %d, want %d", got, tc.want)
				}
			}
		})
	}
}

// TestExceptionHandlingDecoded checks that try_table, throw and throw_ref
// are walked correctly. wasmtime-go offers no switch for exceptions, so
// the output is checked structurally rather than executed.
func TestExceptionHandlingDecoded(t *testing.T) {
	wasm := wat2wasm(t, `(module (tag $e (param i32)) (memory 1)
	  (func (export "run") (param i32) (result i32)
	    (block $h (result i32)
	      (try_table (result i32) (catch $e $h) (catch_all $h)
	        (if (local.get 0) (then (throw $e (memory.grow (i32.const 1)))))
	        (memory.grow (i32.const 2)))))
	  (func (param exnref) (throw_ref (local.get 0))))`)
	out, _, err := Instrument(wasm)
	if err != nil {
		t.Fatal(err)
	}
	checkGrowsOnlyInHelpers(t, wasm, out)
	if sites := growSites(t, out); len(sites) != 1 {
		t.Errorf("grow sites = %v, want one helper", sites)
	}
}
