package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/sandbox/internal/wasmbin"
)

// The bulk-operation helpers the rewriter injects must behave exactly like
// the instructions they replace. bulkProgram turns fuzz bytes into a module
// running a sequence of bulk operations with operands near every boundary
// (chunk sizes, memory and table ends, 2^32); the original runs directly in
// wasmtime, the rewritten module next to it, and the results, trap codes
// and the full contents of every memory and table must match.

const (
	bulkMem0Bytes  = 2 << 16 // memory $m0: 2 pages
	bulkMem1Bytes  = 1 << 16 // memory $m1: 1 page
	bulkTab0       = 300     // elements of table $t0
	bulkTab1       = 150     // elements of table $t1
	bulkDataLen    = 3000    // passive data segment $d0
	bulkElemLen    = 290     // passive element segment $e0
	bulkNumTargets = 8       // functions $f0..$f7 return their index
)

// bulkGen reads operands from fuzz bytes, then zeros.
type bulkGen struct {
	data []byte
	pos  int
}

func (g *bulkGen) next() byte {
	if g.pos >= len(g.data) {
		g.pos++
		return 0
	}
	b := g.data[g.pos]
	g.pos++
	return b
}

func (g *bulkGen) done() bool { return g.pos >= len(g.data) }

// operand picks a boundary-ish value for a range of size size.
func (g *bulkGen) operand(size uint32) uint32 {
	cands := []uint32{0, 1, 7, 127, 128, 129, 1023, 1024, 1025, 3000,
		size / 2, size - 1025, size - 1024, size - 129, size - 1, size, size + 1,
		0x7fffffff, 0xffffffff}
	b := g.next()
	if int(b) < len(cands) {
		return cands[b]
	}
	return uint32(g.next())<<8 | uint32(b)
}

// bulkProgram builds the module. Every operation is one statement of run.
func bulkProgram(data []byte) (wat, run string) {
	g := &bulkGen{data: data}
	var body strings.Builder
	for n := 0; n < 24 && !g.done(); n++ {
		op := g.next() % 15
		switch op {
		case 0, 1:
			mem, size := "$m0", uint32(bulkMem0Bytes)
			if op == 1 {
				mem, size = "$m1", bulkMem1Bytes
			}
			fmt.Fprintf(&body, "(memory.fill %s (i32.const %d) (i32.const %d) (i32.const %d))\n", mem, g.operand(size), g.next(), g.operand(size))
		case 2, 3, 4:
			dst, src := [...]string{"$m0", "$m0", "$m1"}[op-2], [...]string{"$m0", "$m1", "$m0"}[op-2]
			d := g.operand(bulkMem0Bytes)
			s := d + uint32(int8(g.next())) // often overlapping, either direction
			if g.next()&1 == 0 {
				s = g.operand(bulkMem0Bytes)
			}
			fmt.Fprintf(&body, "(memory.copy %s %s (i32.const %d) (i32.const %d) (i32.const %d))\n", dst, src, d, s, g.operand(bulkMem1Bytes))
		case 5, 6:
			mem, size := "$m0", uint32(bulkMem0Bytes)
			if op == 6 {
				mem, size = "$m1", bulkMem1Bytes
			}
			fmt.Fprintf(&body, "(memory.init %s $d0 (i32.const %d) (i32.const %d) (i32.const %d))\n", mem, g.operand(size), g.operand(bulkDataLen), g.operand(bulkDataLen))
		case 7:
			body.WriteString("(data.drop $d0)\n")
		case 8:
			ref := "(ref.null func)"
			if v := g.next(); v%4 != 0 {
				ref = fmt.Sprintf("(ref.func $f%d)", v%bulkNumTargets)
			}
			fmt.Fprintf(&body, "(table.fill $t0 (i32.const %d) %s (i32.const %d))\n", g.operand(bulkTab0), ref, g.operand(bulkTab0))
		case 9, 10:
			dst, src := "$t0", "$t0"
			if op == 10 {
				src = "$t1"
			}
			d := g.operand(bulkTab0)
			s := d + uint32(int8(g.next()))
			if g.next()&1 == 0 {
				s = g.operand(bulkTab1)
			}
			fmt.Fprintf(&body, "(table.copy %s %s (i32.const %d) (i32.const %d) (i32.const %d))\n", dst, src, d, s, g.operand(bulkTab1))
		case 11:
			fmt.Fprintf(&body, "(table.init $t0 $e0 (i32.const %d) (i32.const %d) (i32.const %d))\n", g.operand(bulkTab0), g.operand(bulkElemLen), g.operand(bulkElemLen))
		case 12:
			body.WriteString("(elem.drop $e0)\n")
		case 13: // the active segment was dropped at instantiation
			fmt.Fprintf(&body, "(memory.init $m1 $dact (i32.const %d) (i32.const %d) (i32.const %d))\n", g.operand(bulkMem1Bytes), g.next()%2, g.next()%2)
		case 14:
			fmt.Fprintf(&body, "(table.init $t1 $eact (i32.const %d) (i32.const %d) (i32.const %d))\n", g.operand(bulkTab1), g.next()%2, g.next()%2)
		}
	}
	var funcs, elems strings.Builder
	for i := range bulkNumTargets {
		fmt.Fprintf(&funcs, "(func $f%d (type $r) (i32.const %d))\n", i, i)
	}
	for i := range bulkElemLen {
		if i%7 == 3 {
			elems.WriteString("(ref.null func) ")
		} else {
			fmt.Fprintf(&elems, "(ref.func $f%d) ", i%bulkNumTargets)
		}
	}
	pattern := make([]byte, bulkDataLen)
	for i := range pattern {
		pattern[i] = byte(i*7 + i/256)
	}
	return fmt.Sprintf(`(module
  (type $r (func (result i32)))
  (memory $m0 (export "m0") 2)
  (memory $m1 (export "m1") 1)
  (table $t0 %d funcref)
  (table $t1 %d funcref)
  %s
  (elem $e0 funcref %s)
  (elem $eact (table $t1) (i32.const 5) func $f1 $f2 $f3)
  (data $d0 "%s")
  (data $dact (memory $m0) (i32.const 100) "active segment")
  (func (export "tab") (param $t i32) (param $i i32) (result i32)
    (if (result i32) (local.get $t)
      (then (if (result i32) (ref.is_null (table.get $t1 (local.get $i)))
        (then (i32.const -1)) (else (call_indirect $t1 (type $r) (local.get $i)))))
      (else (if (result i32) (ref.is_null (table.get $t0 (local.get $i)))
        (then (i32.const -1)) (else (call_indirect $t0 (type $r) (local.get $i)))))))
  (func (export "run")
    %s))`, bulkTab0, bulkTab1, funcs.String(), elems.String(), watBytes(pattern), body.String()), body.String()
}

func watBytes(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		fmt.Fprintf(&s, "\\%02x", c)
	}
	return s.String()
}

// bulkOutcome is everything observable after run.
type bulkOutcome struct {
	trap string // "" or the trap code
	mem0 []byte
	mem1 []byte
	tab0 []int64
	tab1 []int64
}

func bulkEngine() *wasmtime.Engine {
	c := wasmtime.NewConfig()
	c.SetWasmMultiMemory(true)
	c.SetWasmBulkMemory(true)
	c.SetWasmReferenceTypes(true)
	return wasmtime.NewEngineWithConfig(c)
}

func runBulk(t *testing.T, engine *wasmtime.Engine, wasm []byte, mem0, mem1 string) bulkOutcome {
	t.Helper()
	mod, err := wasmtime.NewModule(engine, wasm)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	store := wasmtime.NewStore(engine)
	defer store.Close()
	inst, err := wasmtime.NewInstance(store, mod, nil)
	if err != nil {
		t.Fatalf("instantiate: %v", err)
	}
	var out bulkOutcome
	if _, err := inst.GetFunc(store, "run").Call(store); err != nil {
		var trap *wasmtime.Trap
		if !errors.As(err, &trap) || trap.Code() == nil {
			t.Fatalf("run: not a trap with a code: %v", err)
		}
		out.trap = trapCodes[int(*trap.Code())]
	}
	out.mem0 = append([]byte(nil), inst.GetExport(store, mem0).Memory().UnsafeData(store)...)
	out.mem1 = append([]byte(nil), inst.GetExport(store, mem1).Memory().UnsafeData(store)...)
	tab := inst.GetFunc(store, "tab")
	read := func(table int32, n int) []int64 {
		vals := make([]int64, n)
		for i := range n {
			v, err := tab.Call(store, table, int32(i))
			if err != nil {
				t.Fatalf("tab(%d, %d): %v", table, i, err)
			}
			vals[i] = int64(v.(int32))
		}
		return vals
	}
	out.tab0, out.tab1 = read(0, bulkTab0), read(1, bulkTab1)
	return out
}

// checkBulkPreserved runs one program both ways.
func checkBulkPreserved(t *testing.T, engine *wasmtime.Engine, data []byte) {
	wat, ops := bulkProgram(data)
	wasm, err := wasmtime.Wat2Wasm(wat)
	if err != nil {
		t.Fatalf("generated WAT does not convert: %v\n%s", err, ops)
	}
	rewritten, _, err := wasmbin.Instrument(wasm)
	if err != nil {
		t.Fatalf("Instrument: %v", err)
	}
	want := runBulk(t, engine, wasm, "m0", "m1")
	got := runBulk(t, engine, rewritten, wasmbin.MemoryExportName(0), wasmbin.MemoryExportName(1))
	if got.trap != want.trap {
		t.Fatalf("trap %q, the original %q\n%s", got.trap, want.trap, ops)
	}
	for _, m := range []struct {
		name      string
		got, want []byte
	}{{"memory 0", got.mem0, want.mem0}, {"memory 1", got.mem1, want.mem1}} {
		if !bytes.Equal(m.got, m.want) {
			i := 0
			for i < len(m.got) && i < len(m.want) && m.got[i] == m.want[i] {
				i++
			}
			t.Fatalf("%s differs from the original's at byte %d (len %d vs %d)\n%s", m.name, i, len(m.got), len(m.want), ops)
		}
	}
	for _, tb := range []struct {
		name      string
		got, want []int64
	}{{"table 0", got.tab0, want.tab0}, {"table 1", got.tab1, want.tab1}} {
		for i := range tb.want {
			if tb.got[i] != tb.want[i] {
				t.Fatalf("%s element %d = %d, the original's %d\n%s", tb.name, i, tb.got[i], tb.want[i], ops)
			}
		}
	}
}

// bulkSeeds cover each operation in and out of bounds, overlap in both
// directions, chunk boundaries and dropped segments.
var bulkSeeds = [][]byte{
	{0, 0, 0x41, 18},                  // fill all of m0 (a multiple of the chunk)
	{0, 5, 0x41, 16},                  // fill past the end: traps, writes nothing
	{0, 1, 0x42, 8},                   // 1025 bytes: one chunk and one byte
	{1, 13, 9, 3},                     // fill m1 up to its end exactly
	{0, 9, 7, 9, 2, 8, 20, 1, 9},      // copy within m0, destination above (backward)
	{0, 9, 7, 2, 8, 0xf0, 1, 9},       // copy within m0, destination below (forward)
	{3, 10, 1, 1, 5},                  // copy m1 into m0
	{4, 14, 2, 1, 15},                 // copy m0 into m1 past m1's end: traps
	{5, 1, 9, 0, 9},                   // init 3000 bytes of the segment at 1
	{5, 0, 1, 9, 9},                   // init past the segment's end: traps
	{7, 5, 0, 0, 0},                   // drop, then init of length 0 at 0: fine
	{7, 5, 0, 1, 0},                   // drop, then init of length 0 at 1: traps
	{8, 0, 1, 0, 15},                  // table.fill all of t0
	{8, 2, 3, 20, 15},                 // table.fill past the end: traps
	{11, 0, 0, 0, 9, 3, 9},            // table.init 3000? (clamped by operand picks)
	{11, 4, 0, 5, 200, 0},             // table.init 200 elements at 127
	{8, 3, 1, 0, 14, 9, 4, 20, 1, 15}, // fill, then copy t0 within itself upwards
	{10, 3, 0, 1, 15},                 // copy t1 into t0
	{12, 11, 0, 0, 0, 0, 0},           // elem.drop, then table.init of length 0
	{13, 0, 0, 0, 13, 0, 0, 1},        // init of the dropped active data segment
	{14, 0, 0, 0, 14, 0, 1, 1},        // init of the dropped active element segment
	{0, 17, 0, 18, 0, 18},             // fill at 0x7fffffff: traps
	{2, 18, 5, 1, 1, 0},               // copy at 0xffffffff with length 1: traps (no wrap)
	{6, 16, 0, 1, 1, 0},               // init m1 at its end, length 0
}

func FuzzBulkPreserved(f *testing.F) {
	for _, s := range bulkSeeds {
		f.Add(s)
	}
	engine := bulkEngine()
	f.Fuzz(func(t *testing.T, data []byte) {
		checkBulkPreserved(t, engine, data)
	})
}

// TestBulkPreservedRandom runs a fixed set of random programs (the same
// every run), more than the seed corpus covers.
func TestBulkPreservedRandom(t *testing.T) {
	engine := bulkEngine()
	rng := rand.New(rand.NewPCG(1, 2))
	n := 60
	if testing.Short() {
		n = 10
	}
	for range n {
		data := make([]byte, 8+rng.IntN(56))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		checkBulkPreserved(t, engine, data)
	}
}
