package wasmbin

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// preinitReactor's _initialize grows its memory by one page, writes a
// secret at the start of the new page and one in the old, and sets a
// global of each numeric type; its start function sets one more.
const preinitReactor = `(module
  (memory (export "memory") 1 4)
  (global $i32 (mut i32) (i32.const 0))
  (global $i64 (mut i64) (i64.const 0))
  (global $f32 (mut f32) (f32.const 0))
  (global $f64 (mut f64) (f64.const 0))
  (global $started (mut i32) (i32.const 0))
  (global $k i32 (i32.const 7))
  (data (i32.const 16) "static")
  (table 1 funcref)
  (elem (i32.const 0) $get)
  (func $start (global.set $started (i32.const 1)))
  (start $start)
  (func (export "_initialize")
    (drop (memory.grow (i32.const 1)))
    (i64.store (i32.const 65536) (i64.const 0x5ec2e7))
    (i32.store (i32.const 40000) (i32.const -2))
    (global.set $i32 (i32.const -5))
    (global.set $i64 (i64.const 0x123456789abc))
    (global.set $f32 (f32.const 1.5))
    (global.set $f64 (f64.const -2.25)))
  (func $get (export "get") (result i32 i64 f32 f64 i32 i64)
    (global.get $i32) (global.get $i64) (global.get $f32) (global.get $f64)
    (global.get $started) (i64.load (i32.const 65536))))`

func TestSnapshotRoundTrip(t *testing.T) {
	engine := newTestEngine()
	wasm := wat2wasm(t, preinitReactor)
	cp, plan, err := PrepareSnapshot(wasm)
	if err != nil {
		t.Fatal(err)
	}
	if err := wasmtime.ModuleValidate(engine, cp); err != nil {
		t.Fatalf("the copy does not validate: %v", err)
	}
	if !plan.Initialize || !plan.HasStart || !plan.HasMemory || len(plan.Globals) != 5 {
		t.Fatalf("plan = %+v", plan)
	}
	// The host's part: instantiate the copy, initialise, read the state.
	store := wasmtime.NewStore(engine)
	mod, err := wasmtime.NewModule(engine, cp)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := wasmtime.NewInstance(store, mod, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inst.GetFunc(store, InitializeExport).Call(store); err != nil {
		t.Fatal(err)
	}
	img := SnapshotImage{Memory: bytes.Clone(inst.GetExport(store, "memory").Memory().UnsafeData(store))}
	for _, g := range plan.Globals {
		v := inst.GetExport(store, g.Export).Global().Get(store)
		var bits uint64
		switch g.Type {
		case valI32:
			bits = uint64(uint32(v.I32()))
		case valI64:
			bits = uint64(v.I64())
		case valF32:
			bits = uint64(math.Float32bits(v.F32()))
		case valF64:
			bits = math.Float64bits(v.F64())
		}
		img.Globals = append(img.Globals, bits)
	}
	out, err := ApplySnapshot(wasm, plan, img, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := wasmtime.ModuleValidate(engine, out); err != nil {
		t.Fatalf("the snapshot does not validate: %v", err)
	}
	snap, err := wasmtime.NewModule(engine, out)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range snap.Exports() {
		if e.Name() == InitializeExport || strings.HasPrefix(e.Name(), SnapshotGlobalPrefix) {
			t.Errorf("the snapshot exports %q", e.Name())
		}
	}
	// A fresh instance starts where the initialiser left off, without
	// running anything.
	store2 := wasmtime.NewStore(engine)
	inst2, err := wasmtime.NewInstance(store2, snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	mem := inst2.GetExport(store2, "memory").Memory()
	if !bytes.Equal(mem.UnsafeData(store2), img.Memory) {
		t.Fatalf("memory differs: %d bytes against %d captured", mem.DataSize(store2), len(img.Memory))
	}
	if mt := mem.Type(store2); mt.Minimum() != 2 {
		t.Errorf("memory minimum = %d pages, want 2", mt.Minimum())
	}
	if ok, max := mem.Type(store2).Maximum(); !ok || max != 4 {
		t.Errorf("memory maximum = %v %d, want 4", ok, max)
	}
	got, err := inst2.GetFunc(store2, "get").Call(store2)
	if err != nil {
		t.Fatal(err)
	}
	vals := got.([]wasmtime.Val)
	if vals[0].I32() != -5 || vals[1].I64() != 0x123456789abc || vals[2].F32() != 1.5 || vals[3].F64() != -2.25 ||
		vals[4].I32() != 1 || vals[5].I64() != 0x5ec2e7 {
		t.Fatalf("globals after the snapshot: %v %v %v %v %v %v", vals[0].I32(), vals[1].I64(), vals[2].F32(), vals[3].F64(), vals[4].I32(), vals[5].I64())
	}
}

func TestSnapshotDataSegmentsCoverImage(t *testing.T) {
	engine := newTestEngine()
	for _, mem := range []func() []byte{
		func() []byte { return make([]byte, 1<<16) }, // all zero: no segment
		func() []byte { // sparse: many short runs, far apart
			b := make([]byte, 64<<16)
			for i := 0; i < len(b); i += 4099 {
				b[i] = byte(i)
			}
			return b
		},
		func() []byte { // dense with short zero gaps
			b := make([]byte, 2<<16)
			for i := range b {
				if i%7 != 0 {
					b[i] = 0xaa
				}
			}
			return b
		},
	} {
		img := mem()
		wat := `(module (memory 1) (func (export "_initialize")))`
		wasm := wat2wasm(t, wat)
		_, plan, err := PrepareSnapshot(wasm)
		if err != nil {
			t.Fatal(err)
		}
		out, err := ApplySnapshot(wasm, plan, SnapshotImage{Memory: img}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := wasmtime.ModuleValidate(engine, out); err != nil {
			t.Fatalf("the snapshot does not validate: %v", err)
		}
		got := make([]byte, len(img))
		for _, seg := range readActiveData(t, out) {
			copy(got[seg.offset:], seg.data)
		}
		if !bytes.Equal(got, img) {
			t.Fatalf("the data segments do not reproduce the image of %d bytes", len(img))
		}
	}
}

type dataSeg struct {
	offset int
	data   []byte
}

// readActiveData decodes the data section of a module of flags-0
// segments with i32.const offsets (what ApplySnapshot emits).
func readActiveData(t *testing.T, wasm []byte) []dataSeg {
	t.Helper()
	m, err := parseModule(wasm)
	if err != nil {
		t.Fatal(err)
	}
	var segs []dataSeg
	for _, s := range m.sections {
		if s.id != secData {
			continue
		}
		r := newReader(s.payload, 0)
		n, _ := r.u32()
		for range n {
			flags, _ := r.u32()
			op, _ := r.readByte()
			off, _ := r.sleb(32)
			end, _ := r.readByte()
			size, _ := r.u32()
			b, err := r.bytes(uint64(size))
			if flags != 0 || op != opI32Const || end != opEnd || err != nil {
				t.Fatalf("unexpected segment encoding")
			}
			segs = append(segs, dataSeg{int(uint32(off)), b})
		}
	}
	return segs
}

func TestSnapshotRefusals(t *testing.T) {
	for _, tc := range []struct{ name, wat, want string }{
		{"table.set", `(module (table 1 funcref) (func (export "_initialize") (table.set (i32.const 0) (ref.null func))))`, "table.set"},
		{"table.grow", `(module (table 1 funcref) (func (export "_initialize") (drop (table.grow (ref.null func) (i32.const 1)))))`, "table.grow"},
		{"table.fill", `(module (table 1 funcref) (func (export "_initialize") (table.fill (i32.const 0) (ref.null func) (i32.const 1))))`, "table.fill"},
		{"table.copy", `(module (table 2 funcref) (func (export "_initialize") (table.copy (i32.const 0) (i32.const 1) (i32.const 1))))`, "table.copy"},
		{"table.init", `(module (table 1 funcref) (elem func $f) (func $f) (func (export "_initialize") (table.init 0 (i32.const 0) (i32.const 0) (i32.const 1))))`, "table.init"},
		{"elem.drop", `(module (elem func $f) (func $f) (func (export "_initialize") (elem.drop 0)))`, "elem.drop"},
		{"memory.init", `(module (memory 1) (data "x") (func (export "_initialize") (memory.init 0 (i32.const 0) (i32.const 0) (i32.const 1))))`, "passive"},
		{"data.drop", `(module (memory 1) (func (export "_initialize") (data.drop 0)) (data (i32.const 0) "x"))`, "data.drop"},
		{"imported memory", `(module (import "env" "m" (memory 1)) (func (export "_initialize")))`, "imports a memory"},
		{"imported table", `(module (import "env" "t" (table 1 funcref)) (func (export "_initialize")))`, "imports a table"},
		{"imported global", `(module (import "env" "g" (global i32)) (func (export "_initialize")))`, "imports a global"},
		{"two memories", `(module (memory 1) (memory 1) (func (export "_initialize")))`, "2 memories"},
		{"shared memory", `(module (memory 1 1 shared) (func (export "_initialize")))`, "shared"},
		{"ref global", `(module (global (mut funcref) (ref.null func)) (func (export "_initialize")))`, "mutable global"},
		{"no initialiser", `(module (memory 1) (func (export "run")))`, "no initialiser"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := PrepareSnapshot(wat2wasm(t, tc.wat))
			var se *SnapshotError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want a *SnapshotError", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// FuzzSnapshot: PrepareSnapshot reads a parent's bytes before wasmtime
// has validated them, so no input may panic it; whenever it accepts a
// module wasmtime validates, the copy and the snapshot of an image of the
// right shape validate too.
func FuzzSnapshot(f *testing.F) {
	f.Add(wat2wasm(f, preinitReactor))
	for _, wat := range fuzzSeedWATs {
		f.Add(wat2wasm(f, wat))
	}
	engine := newTestEngine()
	f.Fuzz(func(t *testing.T, wasm []byte) {
		cp, plan, err := PrepareSnapshot(wasm)
		if err != nil || wasmtime.ModuleValidate(engine, wasm) != nil {
			return
		}
		if err := wasmtime.ModuleValidate(engine, cp); err != nil {
			t.Fatalf("the copy of a valid module does not validate: %v", err)
		}
		img := SnapshotImage{Globals: make([]uint64, len(plan.Globals))}
		if plan.HasMemory {
			pages := max(plan.Memory.MinPages, 1)
			if plan.Memory.HasMax && pages > plan.Memory.MaxPages {
				pages = plan.Memory.MaxPages
			}
			if pages > 16 {
				return
			}
			img.Memory = make([]byte, pages<<16)
			for i := range img.Memory {
				if i%5 == 0 {
					img.Memory[i] = byte(i)
				}
			}
		}
		out, err := ApplySnapshot(wasm, plan, img, 0)
		if err != nil {
			if plan.HasMemory && plan.Memory.MinPages == 0 && plan.Memory.HasMax && plan.Memory.MaxPages == 0 {
				return // an image of one page does not fit a memory of at most 0
			}
			t.Fatalf("ApplySnapshot: %v", err)
		}
		if err := wasmtime.ModuleValidate(engine, out); err != nil {
			t.Fatalf("the snapshot of a valid module does not validate: %v", err)
		}
	})
}

// TestSnapshotBoundedByMaxBytes: an initialiser that leaves its memory
// full of data is refused by the bound, whatever the data's shape, and
// the data section is exactly what fits.
func TestSnapshotBoundedByMaxBytes(t *testing.T) {
	wasm := wat2wasm(t, `(module (memory 1) (func (export "_initialize")))`)
	_, plan, err := PrepareSnapshot(wasm)
	if err != nil {
		t.Fatal(err)
	}
	const pages = 64
	full := bytes.Repeat([]byte{0xaa}, pages<<16)
	sparse := make([]byte, pages<<16) // one byte in 33: a run per byte until the gap widens
	for i := 0; i < len(sparse); i += 33 {
		sparse[i] = 1
	}
	for name, img := range map[string][]byte{"full": full, "sparse": sparse} {
		_, err := ApplySnapshot(wasm, plan, SnapshotImage{Memory: img}, 1<<20)
		var se *SnapshotError
		if !errors.As(err, &se) || !strings.Contains(se.Error(), "more data than a module may") {
			t.Fatalf("%s: err = %v, want a *SnapshotError naming the bound", name, err)
		}
		out, err := ApplySnapshot(wasm, plan, SnapshotImage{Memory: img}, 0)
		if err != nil {
			t.Fatalf("%s: unbounded: %v", name, err)
		}
		if out2, err := ApplySnapshot(wasm, plan, SnapshotImage{Memory: img}, len(out)); err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("%s: a bound of exactly the module's size (%d bytes) refused it: %v", name, len(out), err)
		}
		if _, err := ApplySnapshot(wasm, plan, SnapshotImage{Memory: img}, len(out)-1); err == nil {
			t.Fatalf("%s: a bound one byte under the module's size (%d bytes) let it through", name, len(out))
		}
	}
}

// TestSnapshotDataSegmentsRandomImages: images of random runs and gaps
// (the zero gaps skipped a chunk or a word at a time, runs ending at the
// memory's end) are reproduced exactly by the segments.
func TestSnapshotDataSegmentsRandomImages(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 40 {
		img := make([]byte, (1+rng.IntN(8))<<16)
		for i := 0; i < len(img); {
			i += rng.IntN([]int{8, 40, 300, 5000, 70000}[n%5])
			for k := rng.IntN(64); k > 0 && i < len(img); k-- {
				img[i] = byte(rng.IntN(3)) // zeros inside runs too
				i++
			}
		}
		if n%3 == 0 {
			img[len(img)-1] = 9
		}
		data, ok := dataSegments(img, math.MaxInt)
		if !ok {
			t.Fatal("refused without a bound")
		}
		got := make([]byte, len(img))
		memory := appendULEB([]byte{1, 0}, uint64(len(img)>>16))
		wasm := append([]byte("\x00asm\x01\x00\x00\x00"), secMemory)
		wasm = append(append(appendULEB(wasm, uint64(len(memory))), memory...), secData)
		wasm = appendULEB(wasm, uint64(len(data)))
		for _, seg := range readActiveData(t, append(wasm, data...)) {
			copy(got[seg.offset:], seg.data)
		}
		if !bytes.Equal(got, img) {
			t.Fatalf("image %d (%d bytes): the segments do not reproduce it", n, len(img))
		}
	}
}
