package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/sandbox"
)

// secretReactor's _initialize counts its runs in a global, writes a
// secret into a page it grows and sets a global; peek reads them back.
const secretReactor = `(module
  (memory (export "memory") 1)
  (global $runs (mut i32) (i32.const 0))
  (global $where (mut i32) (i32.const 0))
  (func (export "_initialize")
    (global.set $runs (i32.add (global.get $runs) (i32.const 1)))
    (global.set $where (i32.mul (memory.grow (i32.const 1)) (i32.const 65536)))
    (i64.store (global.get $where) (i64.const 0x5ec2e7)))
  (func (export "runs") (result i32) (global.get $runs))
  (func (export "secret") (result i64) (i64.load (global.get $where))))`

func wat2wasm(t testing.TB, wat string) []byte {
	t.Helper()
	b, err := wasmtime.Wat2Wasm(wat)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func preinit(t testing.TB, wasm []byte) []byte {
	t.Helper()
	out, _, err := engine(t).Preinitialize(context.Background(), wasm, sandbox.PreinitOptions{Limits: hangLimits()})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPreinitializeKeepsWhatInitializeDid(t *testing.T) {
	out := preinit(t, wat2wasm(t, secretReactor))
	m, _, err := engine(t).Compile(context.Background(), sandbox.Source{Wasm: out})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Export("_initialize"); ok {
		t.Fatal("the pre-initialised module still exports _initialize")
	}
	// An instance runs _initialize when the module exports it: this one
	// must see the state without a second run.
	in, err := engine(t).Instantiate(context.Background(), sandbox.InstanceRequest{Module: m, Limits: hangLimits()})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Release()
	call := func(fn string) sandbox.Value {
		res, err := in.Call(context.Background(), sandbox.CallRequest{Function: fn})
		if err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		return res.Values[0]
	}
	if v := call("runs"); v.I32() != 1 {
		t.Fatalf("runs = %d, want 1 (_initialize ran again, or its global was lost)", v.I32())
	}
	if v := call("secret"); v.I64() != 0x5ec2e7 {
		t.Fatalf("secret = %#x, want 0x5ec2e7", v.I64())
	}
	if exp, _ := m.Export("memory"); exp.Kind != "memory" {
		t.Fatalf("memory export = %+v", exp)
	}
	if len(m.Imports) != 0 {
		t.Fatalf("imports = %v", m.Imports)
	}
}

func wantSnapshotRefusal(t *testing.T, err error, mention string) {
	t.Helper()
	se := wantKind(t, err, sandbox.KindInvalidModule)
	var snap *sandbox.SnapshotError
	if !errors.As(err, &snap) {
		t.Fatalf("err = %v, want a *sandbox.SnapshotError inside", err)
	}
	if !strings.Contains(se.Message, mention) {
		t.Fatalf("message %q does not mention %q", se.Message, mention)
	}
}

func TestPreinitializeRefusesTableMutation(t *testing.T) {
	wasm := wat2wasm(t, `(module (table 1 funcref) (func $f)
  (func (export "_initialize") (table.set (i32.const 0) (ref.func $f))) (elem declare func $f))`)
	_, _, err := engine(t).Preinitialize(context.Background(), wasm, sandbox.PreinitOptions{Limits: hangLimits()})
	wantSnapshotRefusal(t, err, "table.set")
}

func TestPreinitializeRefusesAnInitializeWithValues(t *testing.T) {
	wasm := wat2wasm(t, `(module (func (export "_initialize") (param i32)))`)
	_, _, err := engine(t).Preinitialize(context.Background(), wasm, sandbox.PreinitOptions{Limits: hangLimits()})
	wantSnapshotRefusal(t, err, "takes or returns values")
}

func TestPreinitializeRefusesImportCalledDuringInit(t *testing.T) {
	wasm := wat2wasm(t, `(module
  (import "extism:host/env" "output_set" (func $out (param i64 i64)))
  (func (export "_initialize") (call $out (i64.const 0) (i64.const 0))))`)
	_, _, err := engine(t).Preinitialize(context.Background(), wasm, sandbox.PreinitOptions{Limits: hangLimits()})
	wantSnapshotRefusal(t, err, "extism:host/env::output_set")
}

func TestPreinitializeAllowsImportsNotCalled(t *testing.T) {
	wasm := wat2wasm(t, `(module
  (import "extism:host/env" "output_set" (func $out (param i64 i64)))
  (memory 1) (global $g (mut i32) (i32.const 0))
  (func (export "_initialize") (global.set $g (i32.const 3)))
  (func (export "f") (call $out (i64.const 0) (i64.const 0))))`)
	out := preinit(t, wasm)
	if _, err := wasmtime.NewModule(wasmtime.NewEngine(), out); err != nil {
		t.Fatal(err)
	}
}

func TestPreinitializeHostileInitialisersMeetTheFences(t *testing.T) {
	t.Run("loop/timeout", func(t *testing.T) {
		l := hangLimits()
		l.Timeout = 200 * 1e6
		wasm := wat2wasm(t, `(module (func (export "_initialize") (loop (br 0))))`)
		_, _, err := engine(t).Preinitialize(context.Background(), wasm, sandbox.PreinitOptions{Limits: l})
		se := wantKind(t, err, sandbox.KindTimeout)
		if !strings.HasPrefix(se.Message, "pre-initialisation: ") {
			t.Fatalf("message %q does not say it was the pre-initialisation", se.Message)
		}
	})
	t.Run("loop/fuel", func(t *testing.T) {
		l := hangLimits()
		l.Fuel = 1_000_000
		wasm := wat2wasm(t, `(module (func (export "_initialize") (loop (br 0))))`)
		_, _, err := engine(t).Preinitialize(context.Background(), wasm, sandbox.PreinitOptions{Limits: l})
		wantKind(t, err, sandbox.KindFuelExhausted)
	})
	t.Run("memory", func(t *testing.T) {
		l := hangLimits()
		l.MemoryBytes = 4 << 20
		wasm := wat2wasm(t, `(module (memory 1)
  (func (export "_initialize")
    (loop (br_if 0 (i32.ne (memory.grow (i32.const 16)) (i32.const -1)))) unreachable))`)
		_, _, err := engine(t).Preinitialize(context.Background(), wasm, sandbox.PreinitOptions{Limits: l})
		wantKind(t, err, sandbox.KindMemoryLimitExceeded)
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		wasm := wat2wasm(t, `(module (func (export "_initialize") (loop (br 0))))`)
		go cancel()
		_, _, err := engine(t).Preinitialize(ctx, wasm, sandbox.PreinitOptions{Limits: hangLimits()})
		wantKind(t, err, sandbox.KindCancelled)
	})
}

// TestPreinitializedGoPluginAnswersAlike: the Go PDK plugin, whose
// _initialize starts the Go runtime, answers every function the same
// way pre-initialised, in an instance that runs no initialiser.
func TestPreinitializedGoPluginAnswersAlike(t *testing.T) {
	wasm, err := os.ReadFile(goPlugin)
	if err != nil {
		t.Fatal(err)
	}
	out, info, err := engine(t).Preinitialize(context.Background(), wasm, sandbox.PreinitOptions{Limits: hangLimits()})
	if err != nil {
		t.Fatal(err)
	}
	if info.FuelConsumed == 0 || info.MemoryBytes == 0 {
		t.Fatalf("info = %+v", info)
	}
	m, _, err := engine(t).Compile(context.Background(), sandbox.Source{Wasm: out})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Export("_initialize"); ok {
		t.Fatal("the pre-initialised plugin still exports _initialize")
	}
	start := func(m *sandbox.Module) *sandbox.Instance {
		in, err := engine(t).Instantiate(context.Background(), sandbox.InstanceRequest{Module: m, Limits: hangLimits(),
			Capabilities: sandbox.Capabilities{Log: true, WASI: &sandbox.WASI{}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(in.Release)
		return in
	}
	plain, snap := start(goPluginModule(t)), start(m)
	if snap.Instantiation().Usage.FuelConsumed*10 > plain.Instantiation().Usage.FuelConsumed {
		t.Errorf("the pre-initialised plugin's instantiation took %d fuel, the plain one's %d: the initialiser ran again",
			snap.Instantiation().Usage.FuelConsumed, plain.Instantiation().Usage.FuelConsumed)
	}
	for _, c := range []struct{ fn, input string }{{"greet", "Ada"}, {"greet", "名前"}, {"count", ""}, {"count", ""}, {"echo", strings.Repeat("xyz", 50000)}} {
		a, b := pluginCall(t, plain, c.fn, []byte(c.input)), pluginCall(t, snap, c.fn, []byte(c.input))
		if !bytes.Equal(a.PluginOutput, b.PluginOutput) {
			t.Fatalf("%s(%.20q): %q plain, %q pre-initialised", c.fn, c.input, a.PluginOutput, b.PluginOutput)
		}
	}
}

// TestPreinitializeSizeBomb: an initialiser that fills its memory with
// data is refused by the engine's MaxModuleBytes, as the module would be
// if it were sent so, and one that grows a large memory it leaves almost
// empty is pre-initialised without the host copying that memory.
func TestPreinitializeSizeBomb(t *testing.T) {
	e := newEngine(t, sandbox.Config{MaxModuleBytes: 1 << 20, CompileTimeout: compileHangBound})
	full := wat2wasm(t, `(module (memory 1)
  (func (export "_initialize")
    (drop (memory.grow (i32.const 127)))
    (memory.fill (i32.const 0) (i32.const 0xaa) (i32.const 0x800000))))`)
	_, _, err := e.Compile(context.Background(), sandbox.Source{Wasm: full, Preinitialize: true})
	wantSnapshotRefusal(t, err, "over 1048576 bytes")

	sparse := wat2wasm(t, `(module (memory 1)
  (func (export "_initialize")
    (drop (memory.grow (i32.const 4095)))
    (i32.store (i32.const 0xffff000) (i32.const 7))))`)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	m, _, err := e.Compile(context.Background(), sandbox.Source{Wasm: sparse, Preinitialize: true})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
		t.Fatalf("pre-initialising a module with 256 MiB of memory allocated %d MiB on the host's heap: its memory was copied", got>>20)
	}
	if m.ID != sandbox.PreinitID(sparse) {
		t.Fatalf("id %s, want PreinitID", m.ID)
	}
	// The engine still serves.
	if _, _, err := e.Compile(context.Background(), sandbox.Source{Wasm: wat2wasm(t, secretReactor), Preinitialize: true}); err != nil {
		t.Fatal(err)
	}
}

// TestPreinitializeStoredSnapshotBound: a snapshot stored in CacheDir by
// an engine with a larger MaxModuleBytes is not loaded by one with a
// smaller bound: that engine pre-initialises the module again and refuses
// it as it would have without the cache. Under the bound it is loaded.
func TestPreinitializeStoredSnapshotBound(t *testing.T) {
	dir := t.TempDir()
	// 2 MiB of data in its memory: the snapshot is over 1 MiB, its source
	// a few dozen bytes.
	src := sandbox.Source{Preinitialize: true, Wasm: wat2wasm(t, `(module (memory 1)
  (func (export "_initialize")
    (drop (memory.grow (i32.const 31)))
    (memory.fill (i32.const 0) (i32.const 0x5a) (i32.const 0x200000))))`)}
	large := newEngine(t, sandbox.Config{CacheDir: dir, MaxModuleBytes: 4 << 20, CompileTimeout: compileHangBound})
	if _, info, err := large.Compile(context.Background(), src); err != nil || info.FromDisk {
		t.Fatalf("under a 4 MiB bound: %+v %v, want a compile", info, err)
	}
	small := newEngine(t, sandbox.Config{CacheDir: dir, MaxModuleBytes: 1 << 20, CompileTimeout: compileHangBound})
	_, _, err := small.Compile(context.Background(), src)
	wantSnapshotRefusal(t, err, "over 1048576 bytes")
	again := newEngine(t, sandbox.Config{CacheDir: dir, MaxModuleBytes: 4 << 20, CompileTimeout: compileHangBound})
	if _, info, err := again.Compile(context.Background(), src); err != nil || !info.FromDisk {
		t.Fatalf("under a 4 MiB bound again: %+v %v, want it loaded from disk", info, err)
	}
}

// TestPreinitializeRefusesWASIContextChanges: a call that changes the
// WASI context (each instance gets a fresh one) refuses the snapshot:
// stdout closed by the initialiser would be open in every instance.
func TestPreinitializeRefusesWASIContextChanges(t *testing.T) {
	for _, c := range []struct{ name, call string }{
		{"fd_close", `(call $f (i32.const 1))`},
		{"fd_renumber", `(call $f (i32.const 2) (i32.const 1))`},
	} {
		params := "(param i32)"
		if c.name == "fd_renumber" {
			params = "(param i32 i32)"
		}
		wasm := wat2wasm(t, `(module (import "wasi_snapshot_preview1" "`+c.name+`" (func $f `+params+` (result i32)))
  (memory (export "memory") 1) (func (export "_initialize") (drop `+c.call+`)))`)
		_, _, err := engine(t).Preinitialize(context.Background(), wasm, sandbox.PreinitOptions{Limits: hangLimits()})
		wantSnapshotRefusal(t, err, "wasi_snapshot_preview1::"+c.name)
	}
}

// TestPreinitializeExitIsARefusal: an initialiser (or start function)
// that calls proc_exit is refused as docs/preinit.md says, invalid_module
// with its status, whatever the status.
func TestPreinitializeExitIsARefusal(t *testing.T) {
	for _, wat := range []string{
		`(module (import "wasi_snapshot_preview1" "proc_exit" (func $x (param i32)))
  (memory (export "memory") 1) (func (export "_initialize") (call $x (i32.const 3))))`,
		`(module (import "wasi_snapshot_preview1" "proc_exit" (func $x (param i32)))
  (memory (export "memory") 1) (func $s (call $x (i32.const 0))) (start $s))`,
	} {
		_, _, err := engine(t).Preinitialize(context.Background(), wat2wasm(t, wat), sandbox.PreinitOptions{Limits: hangLimits()})
		wantSnapshotRefusal(t, err, "its initialiser exited (status")
	}
}

// TestPreinitializeLeavesBadWASIImportsToInstantiation: a WASI import
// the host has not (no such name, a wrong signature) is a stub while the
// initialiser runs, as any import is, not a host error: the snapshot is
// made if the initialiser does not call it, and instantiation refuses the
// module as it refuses the original, with disallowed_import.
func TestPreinitializeLeavesBadWASIImportsToInstantiation(t *testing.T) {
	for _, imp := range []string{
		`(import "wasi_snapshot_preview1" "no_such" (func $x))`,
		`(import "wasi_snapshot_preview1" "proc_exit" (func $x (param i64)))`,
	} {
		out := preinit(t, wat2wasm(t, `(module `+imp+` (memory (export "memory") 1) (func (export "_initialize")))`))
		m, _, err := engine(t).Compile(context.Background(), sandbox.Source{Wasm: out})
		if err != nil {
			t.Fatal(err)
		}
		_, err = engine(t).Instantiate(context.Background(), sandbox.InstanceRequest{Module: m, Limits: hangLimits(), Capabilities: sandbox.Capabilities{WASI: &sandbox.WASI{}}})
		wantKind(t, err, sandbox.KindDisallowedImport)
	}
}

// TestPreinitializedModulesAnswerAlike is the differential test: for
// deterministic guests, each export called in turn on one instance
// answers the same with and without pre-initialisation (NaN payloads,
// extreme integers, a start function and _initialize both, an exported
// mutable global, data overwritten and memory grown by the initialiser,
// the initialiser exported under a second name, no memory, a memory of
// no pages).
func TestPreinitializedModulesAnswerAlike(t *testing.T) {
	cases := []struct {
		name, wat string
		calls     []string
	}{
		{"numbers", `(module (global $f (mut f32) (f32.const 0)) (global $d (mut f64) (f64.const 0))
  (global $i (mut i64) (i64.const 0)) (global $j (mut i32) (i32.const 0))
  (func (export "_initialize")
    (global.set $f (f32.reinterpret_i32 (i32.const 0x7fa00001)))
    (global.set $d (f64.reinterpret_i64 (i64.const 0x7ff4000000000001)))
    (global.set $i (i64.const -9223372036854775808)) (global.set $j (i32.const -2147483648)))
  (func (export "f") (result i32) (i32.reinterpret_f32 (global.get $f)))
  (func (export "d") (result i64) (i64.reinterpret_f64 (global.get $d)))
  (func (export "i") (result i64) (global.get $i)) (func (export "j") (result i32) (global.get $j)))`,
			[]string{"f", "d", "i", "j"}},
		{"start and _initialize", `(module (memory 1) (global $g (mut i32) (i32.const 1))
  (func $s (global.set $g (i32.mul (global.get $g) (i32.const 10)))) (start $s)
  (func (export "_initialize") (global.set $g (i32.add (global.get $g) (i32.const 3))))
  (func (export "g") (result i32) (global.get $g)))`, []string{"g"}},
		{"memory and exported global", `(module (global $g (export "g") (mut i64) (i64.const 1))
  (memory (export "memory") 1 3) (data (i32.const 100) "hello")
  (func (export "_initialize") (global.set $g (i64.const 77)) (i32.store8 (i32.const 101) (i32.const 0))
    (drop (memory.grow (i32.const 1))) (i32.store (i32.const 70000) (i32.const 5)))
  (func (export "get") (result i64) (global.get $g)) (func (export "b") (result i32) (i32.load (i32.const 100)))
  (func (export "size") (result i32) (memory.size)) (func (export "grow") (result i32) (memory.grow (i32.const 1)))
  (func (export "high") (result i32) (i32.load (i32.const 70000))))`, []string{"get", "b", "size", "high", "grow", "grow", "size"}},
		{"initialiser exported twice", `(module (global $g (mut i32) (i32.const 0))
  (func $i (global.set $g (i32.add (global.get $g) (i32.const 1))))
  (export "_initialize" (func $i)) (export "again" (func $i)) (func (export "g") (result i32) (global.get $g)))`,
			[]string{"g", "again", "g"}},
		{"no memory", `(module (global $g (mut i32) (i32.const 0)) (func (export "_initialize") (global.set $g (i32.const 9)))
  (func (export "g") (result i32) (global.get $g)))`, []string{"g"}},
		{"memory of no pages", `(module (memory 0) (global $g (mut i32) (i32.const 0))
  (func (export "_initialize") (global.set $g (i32.add (memory.size) (i32.const 4))))
  (func (export "g") (result i32) (global.get $g)) (func (export "size") (result i32) (memory.size)))`, []string{"g", "size"}},
	}
	answers := func(t *testing.T, wasm []byte, calls []string) []string {
		m, _, err := engine(t).Compile(context.Background(), sandbox.Source{Wasm: wasm})
		if err != nil {
			t.Fatal(err)
		}
		in, err := engine(t).Instantiate(context.Background(), sandbox.InstanceRequest{Module: m, Limits: hangLimits()})
		if err != nil {
			t.Fatal(err)
		}
		defer in.Release()
		var got []string
		for _, fn := range calls {
			res, err := in.Call(context.Background(), sandbox.CallRequest{Function: fn})
			if err != nil {
				got = append(got, fn+": "+err.Error())
				continue
			}
			got = append(got, fmt.Sprintf("%s: %v", fn, res.Values))
		}
		return got
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wasm := wat2wasm(t, c.wat)
			want, got := answers(t, wasm, c.calls), answers(t, preinit(t, wasm), c.calls)
			if !slices.Equal(want, got) {
				t.Fatalf("pre-initialised answers\n  %v\nthe original\n  %v", got, want)
			}
		})
	}
}

// TestPreinitializeCompilesUnderTheRequestsLimits: the copy the
// initialiser runs in is compiled under the compile limits the caller
// gave, not the engine's defaults: a compile memory limit too small for
// any compile refuses the module before its initialiser (here, a loop
// that would last until the deadline) runs.
func TestPreinitializeCompilesUnderTheRequestsLimits(t *testing.T) {
	wasm := wat2wasm(t, `(module (func (export "_initialize") (loop (br 0))))`)
	_, _, err := engine(t).Compile(context.Background(), sandbox.Source{Wasm: wasm, Preinitialize: true,
		CompileMemoryBytes: 1 << 20, CompileTimeout: 2 * time.Second})
	se := wantKind(t, err, sandbox.KindCompileLimitExceeded)
	if se.Resource != sandbox.ResourceCompileMemory || se.Limit != 1<<20 {
		t.Fatalf("resource %s, limit %d: want the request's compile memory limit", se.Resource, se.Limit)
	}
}

// TestPreinitializeMemoryIsTheCompiles: the initialiser's memory counts
// against the compile's memory limit (a compile takes no memoryBytes),
// so a parent bounds what a hostile initialiser can hold.
func TestPreinitializeMemoryIsTheCompiles(t *testing.T) {
	wasm := wat2wasm(t, `(module (memory 1)
  (func (export "_initialize") (if (i32.eq (memory.grow (i32.const 3071)) (i32.const -1)) (then unreachable))))`)
	// 192 MiB: under MaxPreinitMemoryBytes, over the compile's 160 MiB.
	_, _, err := engine(t).Compile(context.Background(), sandbox.Source{Wasm: wasm, Preinitialize: true, CompileMemoryBytes: 160 << 20})
	se := wantKind(t, err, sandbox.KindMemoryLimitExceeded)
	if !strings.HasPrefix(se.Message, "pre-initialisation: ") {
		t.Fatalf("message %q does not say it was the pre-initialisation", se.Message)
	}
}

// TestPreinitializeLimitsDoNotBleed: two compiles of the same bytes at
// once with different compile limits each meet their own: one whose
// compile memory limit the initialiser's memory outgrows does not fail
// the other's (they shared one compile, under the first caller's limits,
// before).
func TestPreinitializeLimitsDoNotBleed(t *testing.T) {
	wasm := wat2wasm(t, `(module (memory 1) (global $g (mut i32) (i32.const 0))
  (func (export "_initialize") (local $i i32)
    (loop (local.set $i (i32.add (local.get $i) (i32.const 1))) (br_if 0 (i32.lt_u (local.get $i) (i32.const 200000000))))
    (if (i32.eq (memory.grow (i32.const 3071)) (i32.const -1)) (then unreachable))
    (global.set $g (i32.const 1)))
  (func (export "g") (result i32) (global.get $g)))`)
	tight := make(chan error, 1)
	go func() {
		_, _, err := engine(t).Compile(context.Background(), sandbox.Source{Wasm: wasm, Preinitialize: true, CompileMemoryBytes: 160 << 20})
		tight <- err
	}()
	time.Sleep(50 * time.Millisecond) // most often, the tight compile is in flight: the other would have joined it
	if _, _, err := engine(t).Compile(context.Background(), sandbox.Source{Wasm: wasm, Preinitialize: true}); err != nil {
		t.Fatalf("the compile with the default limits failed: %v", err)
	}
	<-tight // failed, or found the other's module in the cache: either is right
}
