package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox/internal/wasmbin"
)

// TestPoolHelperModuleCounts: needOf counts the Extism kernel's memories
// and tables as kernelMemories and kernelTables, and nothing for the WASI
// shim; both are checked against the modules themselves.
func TestPoolHelperModuleCounts(t *testing.T) {
	shimWAT, err := wasiShimWAT()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		name             string
		wat              string
		memories, tables int
	}{{"kernel", kernelWAT, kernelMemories, kernelTables}, {"WASI shim", shimWAT, 0, 0}} {
		wasm, err := wasmtime.Wat2Wasm(m.wat)
		if err != nil {
			t.Fatal(err)
		}
		info, err := wasmbin.Parse(wasm)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Memories) != m.memories || len(info.Tables) != m.tables {
			t.Errorf("the %s defines %d memories and %d tables; needOf counts %d and %d", m.name, len(info.Memories), len(info.Tables), m.memories, m.tables)
		}
	}
	if n := needOf(&wasmbin.Info{Memories: make([]wasmbin.MemoryInfo, 2), Tables: make([]wasmbin.TableInfo, 1)}, true, true); n != (storeNeed{3, 4, 1, 1}) {
		t.Errorf("a WASI plugin with 2 memories and a table needs %+v", n)
	}
}

// TestPoolShareOrder: a share hands out what it has in arrival order (a
// large need is not overtaken by small ones), a waiter that gives up
// leaves the queue, and a need larger than the share is refused at once.
func TestPoolShareOrder(t *testing.T) {
	s := &poolShare{name: "runs", size: storeNeed{instances: 10, memories: 10, tables: 10, gcHeaps: 10}}
	ctx := context.Background()
	take := func(ctx context.Context, need storeNeed, wait bool) error {
		_, err := s.take(ctx, need, wait, time.Hour)
		return err
	}
	small, large := storeNeed{1, 1, 1, 1}, storeNeed{1, 8, 1, 1}
	for range 3 {
		if err := take(ctx, small, true); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan string, 3)
	go func() { take(ctx, large, true); got <- "large" }()
	waitQueued(t, s, 1)
	go func() { take(ctx, small, true); got <- "small" }()
	waitQueued(t, s, 2)
	quit, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- take(quit, small, true) }()
	waitQueued(t, s, 3)
	cancel()
	if err := <-gaveUp; KindOf(err) != KindCancelled {
		t.Fatalf("a waiter whose context ended: %v", err)
	}
	select {
	case w := <-got:
		t.Fatalf("%s went ahead with 7 of 10 free and the large need first", w)
	default:
	}
	s.give(small) // 8 free: the large need first, then the small one does not fit
	if w := <-got; w != "large" {
		t.Fatalf("%s first", w)
	}
	s.give(small)
	if w := <-got; w != "small" {
		t.Fatalf("%s second", w)
	}
	if err := take(ctx, storeNeed{memories: 11}, true); err == nil || KindOf(err) != KindHost {
		t.Fatalf("a need larger than the share: %v", err)
	}
	if err := take(ctx, large, false); !errors.Is(err, ErrTooManyInstances) {
		t.Fatalf("without waiting, a short share: %v", err)
	}
}

// TestPoolShareWaitYieldsAndMeetsDeadline: a take that must wait does
// so through the SlotYield its context carries (a sidecar job gives its
// run slot back meanwhile), and never past its deadline: it ends as a
// timeout saying it waited for the pool, leaving the queue. One that
// need not wait yields nothing.
func TestPoolShareWaitYieldsAndMeetsDeadline(t *testing.T) {
	s := &poolShare{name: "instances", holders: "held by instances", size: storeNeed{1, 1, 1, 1}}
	yields := 0
	ctx := protocol.WithSlotYield(context.Background(), func(ctx context.Context, wait func()) error {
		yields++
		wait()
		return ctx.Err()
	})
	one := storeNeed{1, 1, 1, 1}
	if _, err := s.take(ctx, one, true, time.Hour); err != nil || yields != 0 {
		t.Fatalf("a take with room: %v, %d yields", err, yields)
	}
	waited, err := s.take(ctx, one, true, 20*time.Millisecond)
	if KindOf(err) != KindTimeout || !strings.Contains(err.Error(), "waiting for room in the engine's pool") || yields != 1 || waited <= 0 {
		t.Fatalf("a take that waited past its deadline: %v (waited %v, %d yields)", err, waited, yields)
	}
	if e := err.(*Error); e.TimeoutMs != 20 {
		t.Errorf("its timeoutMs: %d", e.TimeoutMs)
	}
	waitQueued(t, s, 0)
	s.give(one)
	if _, err := s.take(ctx, one, true, time.Hour); err != nil {
		t.Fatalf("after the give: %v", err)
	}
}

func waitQueued(t *testing.T, s *poolShare, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		q := len(s.waiting)
		s.mu.Unlock()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting after a minute, want %d", q, n)
		}
	}
}

// TestPoolOneSlotIsWiped: wasmtime's allocator with the settings setPooling
// gives it and a pool of one memory and one table slot: a store writes a
// secret over 40 pages of memory and 5,000 table elements, and the next
// store, of another module, gets the same slot (its memory at the same
// address) and reads zeros.
func TestPoolOneSlotIsWiped(t *testing.T) {
	cfg := wasmtimeConfig()
	s := newEnginePool(Config{MaxRuns: 1, MaxInstances: 1, Maximums: limits.DefaultMaximums(), KeepResident: DefaultKeepResident}).settings
	s.instances, s.memories, s.tables, s.gcHeaps = 1, 1, 1, 1
	if err := setPooling(cfg, s); err != nil {
		t.Fatal(err)
	}
	eng := wasmtime.NewEngineWithConfig(cfg)
	compile := func(tag string) *wasmtime.Module {
		wasm, err := wasmtime.Wat2Wasm(`(module (memory (export "memory") 1) (table (export "table") 1 funcref)
		  (elem declare func $f) (func $f) (func (export "tag") (result i32) i32.const ` + tag + `)
		  (func (export "write")
		    (drop (memory.grow (i32.const 39)))
		    (memory.fill (i32.const 0) (i32.const 0xa5) (i32.const 2621440))
		    (drop (table.grow (ref.func $f) (i32.const 4999)))
		    (table.fill (i32.const 0) (ref.func $f) (i32.const 5000))))`)
		if err != nil {
			t.Fatal(err)
		}
		m, err := wasmtime.NewModule(eng, wasm)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	writer, reader := compile("1"), compile("2")
	var base uintptr
	for i, m := range []*wasmtime.Module{writer, reader, writer, reader} {
		store := wasmtime.NewStore(eng)
		store.SetEpochDeadline(1 << 40)
		if err := store.SetFuel(1 << 40); err != nil {
			t.Fatal(err)
		}
		inst, err := wasmtime.NewInstance(store, m, nil)
		if err != nil {
			t.Fatalf("store %d: %v", i, err)
		}
		mem := inst.GetExport(store, "memory").Memory()
		if p := uintptr(mem.Data(store)); i == 0 {
			base = p
		} else if p != base {
			t.Fatalf("store %d got its memory at %#x, the first at %#x: not the one slot", i, p, base)
		}
		if m == writer {
			if _, err := inst.GetFunc(store, "write").Call(store); err != nil {
				t.Fatal(err)
			}
		} else { // read what the writer's store left, after growing as far
			if _, err := mem.Grow(store, 39); err != nil {
				t.Fatal(err)
			}
			data := unsafe.Slice((*byte)(mem.Data(store)), mem.DataSize(store))
			for off, b := range data {
				if b != 0 {
					t.Fatalf("store %d: byte %d is %#x, left by the store before", i, off, b)
				}
			}
			table := inst.GetExport(store, "table").Table()
			if _, err := table.Grow(store, 4999, wasmtime.ValFuncref(nil)); err != nil {
				t.Fatal(err)
			}
			for k := range uint64(5000) {
				v, err := table.Get(store, k)
				if err != nil {
					t.Fatal(err)
				}
				if v.Funcref() != nil {
					t.Fatalf("store %d: table element %d is set, left by the store before", i, k)
				}
			}
		}
		store.Close()
	}
}
