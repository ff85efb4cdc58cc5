package sandbox

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// kernelHarness is the kernel alone in a store, its growth capped at
// maxPages, for testing the allocator directly.
type kernelHarness struct {
	t     *testing.T
	store *wasmtime.Store
	inst  *wasmtime.Instance
	mem   *wasmtime.Memory
}

func newKernelHarness(t *testing.T, maxPages uint64) *kernelHarness {
	t.Helper()
	e, err := NewEngine(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if _, err := e.kernel(); err != nil {
		t.Fatal(err)
	}
	mod := e.kernelMod.mod
	h := &kernelHarness{t: t, store: wasmtime.NewStore(e.wt)}
	t.Cleanup(h.store.Close)
	h.store.SetEpochDeadline(1 << 40) // no ticker runs here
	if err := h.store.SetFuel(1 << 40); err != nil {
		t.Fatal(err)
	}
	i32 := wasmtime.NewValType(wasmtime.KindI32)
	grow := wasmtime.NewFunc(h.store, wasmtime.NewFuncType([]*wasmtime.ValType{i32}, []*wasmtime.ValType{i32}),
		func(c *wasmtime.Caller, args []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
			delta := uint64(uint32(args[0].I32()))
			if h.mem.Size(c)+delta > maxPages {
				return []wasmtime.Val{wasmtime.ValI32(-1)}, nil
			}
			old, err := h.mem.Grow(c, delta)
			if err != nil {
				return []wasmtime.Val{wasmtime.ValI32(-1)}, nil
			}
			return []wasmtime.Val{wasmtime.ValI32(int32(old))}, nil
		})
	h.inst, err = wasmtime.NewInstance(h.store, mod, []wasmtime.AsExtern{grow})
	if err != nil {
		t.Fatal(err)
	}
	h.mem = h.inst.GetExport(h.store, "memory").Memory()
	return h
}

func (h *kernelHarness) call(name string, args ...any) int64 {
	h.t.Helper()
	out, err := h.inst.GetFunc(h.store, name).Call(h.store, args...)
	if err != nil {
		h.t.Fatalf("%s%v: %v", name, args, err)
	}
	switch v := out.(type) {
	case int64:
		return v
	case int32:
		return int64(v)
	}
	return 0
}

// TestKernelAllocator drives alloc, free, length, the loads and stores
// with a random sequence and checks the allocator's promises: every live
// block has its length, blocks never overlap, freed space is reused, data
// written to a block stays until it is freed, and nothing traps on a bad
// handle or pointer.
func TestKernelAllocator(t *testing.T) {
	h := newKernelHarness(t, 64) // 4 MiB
	rng := rand.New(rand.NewPCG(1, 2))
	type block struct {
		h    int64
		data []byte
	}
	var live []block
	check := func() {
		t.Helper()
		mem := h.mem.UnsafeData(h.store)
		for i, b := range live {
			if n := h.call("length", b.h); n != int64(len(b.data)) {
				t.Fatalf("length(%d) = %d, want %d", b.h, n, len(b.data))
			}
			if !bytes.Equal(mem[b.h:b.h+int64(len(b.data))], b.data) {
				t.Fatalf("block %d at %d lost its bytes", i, b.h)
			}
			for _, o := range live[i+1:] {
				if b.h < o.h+int64(len(o.data)) && o.h < b.h+int64(len(b.data)) {
					t.Fatalf("blocks at %d (+%d) and %d (+%d) overlap", b.h, len(b.data), o.h, len(o.data))
				}
			}
		}
	}
	for step := 0; step < 2000; step++ {
		switch op := rng.IntN(10); {
		case op < 5 || len(live) == 0:
			n := 1 + rng.IntN(3000)
			ptr := h.call("alloc", int64(n))
			if ptr == 0 {
				continue // full: the cap refused
			}
			data := make([]byte, n)
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			copy(h.mem.UnsafeData(h.store)[ptr+1:], data[1:])
			h.call("store_u8", ptr, int32(data[0])) // and one byte through the ABI, as a PDK does
			if got := h.call("load_u8", ptr); got != int64(data[0]) {
				t.Fatalf("load_u8 after store_u8 = %d, want %d", got, data[0])
			}
			live = append(live, block{ptr, data})
		case op < 9:
			i := rng.IntN(len(live))
			h.call("free", live[i].h)
			if n := h.call("length", live[i].h); n != 0 {
				t.Fatalf("length of a freed block = %d", n)
			}
			live = append(live[:i], live[i+1:]...)
		default: // hostile handles and pointers: never a trap
			for _, bad := range []int64{0, 1, 7, 63, 64, 79, 81, 1 << 40, -1, -8} {
				h.call("free", bad)
				h.call("length", bad)
				h.call("load_u64", bad)
				h.call("store_u64", bad, int64(-1))
				h.call("store_u8", bad, int32(1))
				h.call("error_set", bad)
				h.call("output_set", bad, int64(1<<40))
				h.call("input_set", bad, int64(-1))
			}
		}
		if step%250 == 0 {
			check()
		}
	}
	check()
	// Freed space is reused: with everything freed, allocations of the
	// sizes seen so far do not grow memory.
	for _, b := range live {
		h.call("free", b.h)
	}
	before := h.mem.Size(h.store)
	for i := 0; i < 200; i++ {
		p := h.call("alloc", 1000)
		h.call("free", p)
	}
	if after := h.mem.Size(h.store); after != before {
		t.Fatalf("alloc/free of 1000 bytes grew memory from %d to %d pages", before, after)
	}
	// reset forgets every block.
	p := h.call("alloc", 16)
	h.call("reset")
	if n := h.call("length", p); n != 0 {
		t.Fatalf("length after reset = %d", n)
	}
}

// TestKernelRespectsItsGrowLimit: when the host refuses growth, alloc
// returns 0 and the kernel stays usable.
func TestKernelRespectsItsGrowLimit(t *testing.T) {
	h := newKernelHarness(t, 2)
	if p := h.call("alloc", 200_000); p != 0 {
		t.Fatalf("alloc past the limit = %d, want 0", p)
	}
	if p := h.call("alloc", 100); p == 0 || h.call("length", p) != 100 {
		t.Fatal("the kernel did not recover from a refused growth")
	}
	if size := h.mem.Size(h.store); size > 2 {
		t.Fatalf("memory is %d pages past the limit of 2", size)
	}
}

// TestKernelInputAndOutput: input_set bounds input_load_*, output_set and
// error_set keep what the host reads.
func TestKernelInputAndOutput(t *testing.T) {
	h := newKernelHarness(t, 4)
	p := h.call("alloc", 12)
	copy(h.mem.UnsafeData(h.store)[p:], "hello, world")
	h.call("input_set", p, int64(12))
	if n := h.call("input_length"); n != 12 {
		t.Fatalf("input_length %d", n)
	}
	if c := h.call("input_load_u8", int64(4)); c != 'o' {
		t.Fatalf("input_load_u8(4) = %d", c)
	}
	if v := h.call("input_load_u64", int64(4)); uint64(v) != binary.LittleEndian.Uint64([]byte("o, world")) {
		t.Fatalf("input_load_u64(4) = %#x", v)
	}
	if v := h.call("input_load_u64", int64(5)); v != 0 {
		t.Fatalf("input_load_u64 past the input = %#x, want 0", v)
	}
	if c := h.call("input_load_u8", int64(12)); c != 0 {
		t.Fatalf("input_load_u8 past the input = %d", c)
	}
	h.call("output_set", p, int64(5))
	if off, n := h.call("output_offset"), h.call("output_length"); off != p || n != 5 {
		t.Fatalf("output %d+%d", off, n)
	}
	h.call("error_set", p)
	if e := h.call("error_get"); e != p {
		t.Fatalf("error_get %d", e)
	}
	h.call("free", p)
	if n := h.call("input_length"); n != 0 {
		t.Fatalf("input_length after freeing the input = %d", n)
	}
}
