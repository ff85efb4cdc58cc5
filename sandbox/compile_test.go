package sandbox_test

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
)

// The compile fence: compiles run in a child process under a deadline and
// a memory limit, are cancellable, and are bounded in number.

// The bomb tests are not parallel: a bomb takes a core for up to a
// second, and other tests of the package run guests under 1 s deadlines.

// hangBound detects a hang; it is not a speed assertion.
const hangBound = 60 * time.Second

// compileHangBound is the compile time limit of the shared test engines,
// for compiles whose limit is not under test: a 2 MB Go module took longer
// than the 30 s default on a loaded machine.
const compileHangBound = 5 * time.Minute

// nestedLoops is a module whose "run" is n nested empty loops: 3 bytes a
// loop, and very expensive for Cranelift (100,000 of them took 27 s and
// 2.2 GB before the fence). salt makes the bytes differ.
func nestedLoops(n int, salt byte) []byte {
	body := []byte{0}
	body = append(body, []byte(strings.Repeat("\x03\x40", n))...)
	body = append(body, []byte(strings.Repeat("\x0b", n))...)
	body = append(body, 0x41, salt&0x3f, 0x1a, 0x0b) // i32.const salt; drop; end
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = append(m, wasmSection(1, []byte{1, 0x60, 0, 0})...)
	m = append(m, wasmSection(3, []byte{1, 0})...)
	m = append(m, wasmSection(7, []byte{1, 3, 'r', 'u', 'n', 0, 0})...)
	return append(m, wasmSection(10, append(append([]byte{1}, leb(len(body))...), body...))...)
}

// compileWithin runs Compile in the background and returns its error, or
// fails the test if it has not returned within hangBound.
func compileWithin(t *testing.T, e *sandbox.Engine, ctx context.Context, src sandbox.Source) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, _, err := e.Compile(ctx, src)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(hangBound):
		t.Fatalf("Compile did not return within %v", hangBound)
		return nil
	}
}

func wantCompileLimit(t *testing.T, err error, resource sandbox.Resource, limit uint64) {
	t.Helper()
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Kind != sandbox.KindCompileLimitExceeded || se.Resource != resource || se.Limit != limit {
		t.Fatalf("got %#v, want compile_limit_exceeded of %s at %d", err, resource, limit)
	}
	if strings.Contains(strings.ToLower(se.Message), "backtrace") {
		t.Errorf("message carries a backtrace: %q", se.Message)
	}
}

func TestCompileTimeLimit(t *testing.T) {
	e := newEngine(t, sandbox.Config{})
	src := sandbox.Source{Wasm: nestedLoops(100_000, 1), CompileTimeout: 300 * time.Millisecond, CompileMemoryBytes: 1 << 30}
	wantCompileLimit(t, compileWithin(t, e, context.Background(), src), sandbox.ResourceCompileTime, 300)
	if st := e.CacheStats(); st.Entries != 0 {
		t.Errorf("a failed compile was cached: %+v", st)
	}
}

func TestCompileMemoryLimit(t *testing.T) {
	e := newEngine(t, sandbox.Config{CompileMemoryBytes: 256 << 20})
	src := sandbox.Source{Wasm: nestedLoops(100_000, 2), CompileTimeout: hangBound}
	wantCompileLimit(t, compileWithin(t, e, context.Background(), src), sandbox.ResourceCompileMemory, 256<<20)
	// A limit below the child's own baseline fails every compile the same
	// way, whatever allocation fails first (a thread's stack, say).
	for i := range 5 {
		src := sandbox.Source{WAT: uniqueWAT("tiny limit " + strconv.Itoa(i)), CompileMemoryBytes: 1}
		wantCompileLimit(t, compileWithin(t, e, context.Background(), src), sandbox.ResourceCompileMemory, 1)
	}
	// The engine's default limit applies when the source sets none, and a
	// small module compiles under it.
	if _, _, err := e.Compile(context.Background(), sandbox.Source{WAT: uniqueWAT("small under the limit")}); err != nil {
		t.Fatal(err)
	}
}

func TestCompileCancel(t *testing.T) {
	e := newEngine(t, sandbox.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	src := sandbox.Source{Wasm: nestedLoops(100_000, 3), CompileTimeout: 10 * time.Minute, CompileMemoryBytes: 1 << 30}
	if err := compileWithin(t, e, ctx, src); sandbox.KindOf(err) != sandbox.KindCancelled {
		t.Fatalf("got %v, want cancelled", err)
	}
}

// TestSharedCompileSurvivesOneCancel: callers of the same bytes share one
// compile; one cancelling does not fail the others.
func TestSharedCompileSurvivesOneCancel(t *testing.T) {
	e := newEngine(t, sandbox.Config{})
	src := sandbox.Source{Wasm: nestedLoops(100_000, 4), CompileTimeout: time.Second, CompileMemoryBytes: 1 << 30}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, c := range []context.Context{ctx, context.Background()} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = compileWithin(t, e, c, src)
		}()
	}
	time.Sleep(100 * time.Millisecond)
	cancel()
	wg.Wait()
	if sandbox.KindOf(errs[0]) != sandbox.KindCancelled {
		t.Errorf("the cancelled caller got %v", errs[0])
	}
	wantCompileLimit(t, errs[1], sandbox.ResourceCompileTime, 1000)
}

// TestCompileSlotsBoundAndWaitCancellably: with MaxCompiles 1, a second
// compile waits for the first, and gives up when its context is done.
func TestCompileSlotsBoundAndWaitCancellably(t *testing.T) {
	e := newEngine(t, sandbox.Config{MaxCompiles: 1})
	bombCtx, stopBomb := context.WithCancel(context.Background())
	bombDone := make(chan error, 1)
	go func() {
		_, _, err := e.Compile(bombCtx, sandbox.Source{Wasm: nestedLoops(100_000, 5), CompileTimeout: 10 * time.Minute, CompileMemoryBytes: 1 << 30})
		bombDone <- err
	}()
	for sandbox.CompilesRunning(e) == 0 { // until the bomb holds the one slot
		select {
		case err := <-bombDone:
			t.Fatalf("the bomb ended before it was seen compiling: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := compileWithin(t, e, ctx, sandbox.Source{WAT: uniqueWAT("waits for a slot")}); sandbox.KindOf(err) != sandbox.KindCancelled {
		t.Errorf("compile waiting for the slot: %v, want cancelled", err)
	}
	stopBomb()
	if err := <-bombDone; sandbox.KindOf(err) != sandbox.KindCancelled {
		t.Errorf("bomb: %v, want cancelled", err)
	}
	// The slot is free again.
	if _, _, err := e.Compile(context.Background(), sandbox.Source{WAT: uniqueWAT("after the bomb")}); err != nil {
		t.Error(err)
	}
}

// TestCloseStopsCompiles: Close kills compiles in flight and waits for
// them.
func TestCloseStopsCompiles(t *testing.T) {
	e, err := sandbox.NewEngine(sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := e.Compile(context.Background(), sandbox.Source{Wasm: nestedLoops(100_000, 6), CompileTimeout: 10 * time.Minute, CompileMemoryBytes: 1 << 30})
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	closed := make(chan struct{})
	go func() { e.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(hangBound):
		t.Fatal("Close did not return")
	}
	if err := <-done; err == nil {
		t.Error("the compile succeeded after Close")
	}
}

// TestCompileInChildMatchesInProcess: the module the child compiled and
// serialized is the one an in-process compile gives: same description,
// same rewrite facts (Info crosses the process boundary whole), same
// results.
func TestCompileInChildMatchesInProcess(t *testing.T) {
	t.Parallel()
	child := newEngine(t, sandbox.Config{})
	inproc, err := sandbox.NewInProcessEngine(sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inproc.Close() })
	for _, name := range []string{"well_behaved", "memory_bomb", "table_bomb", "start_grow", "mem_hidden_grow", "traps", "logger", "multi_memory", "data_exceeds_cap"} {
		src := fixture(t, name)
		a, _, err := child.Compile(context.Background(), src)
		if err != nil {
			t.Fatalf("%s in the child: %v", name, err)
		}
		b, _, err := inproc.Compile(context.Background(), src)
		if err != nil {
			t.Fatalf("%s in process: %v", name, err)
		}
		if a.ID != b.ID || a.Size != b.Size || !reflect.DeepEqual(a.Imports, b.Imports) || !reflect.DeepEqual(a.Exports, b.Exports) {
			t.Errorf("%s: child %+v, in process %+v", name, a, b)
		}
		if ia, ib := sandbox.ModuleInfo(a), sandbox.ModuleInfo(b); !reflect.DeepEqual(ia, ib) {
			t.Errorf("%s: info from the child %+v, in process %+v", name, ia, ib)
		}
	}
}
