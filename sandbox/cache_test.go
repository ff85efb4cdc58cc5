package sandbox_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// newEngine is a private engine for tests that read its cache counters.
func newEngine(t *testing.T, cfg sandbox.Config) *sandbox.Engine {
	t.Helper()
	e, err := sandbox.NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// uniqueWAT is a small valid module whose bytes differ per tag.
func uniqueWAT(tag string) string {
	return fmt.Sprintf(`(module (func (export %q) (result i32) i32.const 7))`, tag)
}

func TestCompileCacheHit(t *testing.T) {
	t.Parallel()
	e := newEngine(t, sandbox.Config{})
	ctx := context.Background()
	src := sandbox.Source{WAT: uniqueWAT("hit")}
	m1, info1, err := e.Compile(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	if info1.Cached {
		t.Error("first compile reported cached")
	}
	m2, info2, err := e.Compile(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	if m1 != m2 || !info2.Cached {
		t.Errorf("second compile: same module %v, cached %v", m1 == m2, info2.Cached)
	}
	// The same bytes given as binary, and by id, are the same module.
	wasm := mustWat2Wasm(t, src.WAT)
	m3, info3, err := e.Compile(ctx, sandbox.Source{Wasm: wasm})
	if err != nil || m3 != m1 || !info3.Cached {
		t.Errorf("binary of the same module: same %v cached %v err %v", m3 == m1, info3.Cached, err)
	}
	if m1.ID != sandbox.ModuleID(wasm) || !strings.HasPrefix(m1.ID, sandbox.IDPrefix) {
		t.Errorf("id %s, want %s", m1.ID, sandbox.ModuleID(wasm))
	}
	m4, info4, err := e.Compile(ctx, sandbox.Source{ID: m1.ID})
	if err != nil || m4 != m1 || !info4.Cached {
		t.Errorf("by id: same %v cached %v err %v", m4 == m1, info4.Cached, err)
	}
	st := e.CacheStats()
	t.Logf("stats %+v", st)
	// The cache holds the compiled module and the two sources it is known
	// by (the text and the binary).
	want := int64(m1.CompiledSize + len(src.WAT) + len(wasm))
	if st.Entries != 1 || st.Misses != 1 || st.Hits != 3 || st.Bytes != want || m1.Size != len(wasm) {
		t.Errorf("stats = %+v, want 1 entry of %d bytes, 1 miss, 3 hits (wasm size %d)", st, want, m1.Size)
	}
	// The cache counts compiled code, which outweighs the wasm many times.
	if m1.CompiledSize <= m1.Size {
		t.Errorf("compiled size %d <= wasm size %d", m1.CompiledSize, m1.Size)
	}
}

// mustWat2Wasm converts text to binary with the same converter Compile
// uses, so the binary has the same id as the text.
func mustWat2Wasm(t *testing.T, wat string) []byte {
	t.Helper()
	wasm, err := wasmtime.Wat2Wasm(wat)
	if err != nil {
		t.Fatal(err)
	}
	return wasm
}

// sandboxRequest calls the first exported function of m, without
// arguments, under the default limits.
func sandboxRequest(m *sandbox.Module) sandbox.Request {
	fn := ""
	for _, x := range m.Exports {
		if x.Kind == "func" {
			fn = x.Name
			break
		}
	}
	return sandbox.Request{Module: m, Function: fn, Limits: limits.Defaults()}
}

// TestCompileConcurrentSingleFlight: 20 goroutines compiling the same new
// bytes at once get one module, compiled once.
func TestCompileConcurrentSingleFlight(t *testing.T) {
	t.Parallel()
	e := newEngine(t, sandbox.Config{})
	// A module big enough that compiling takes a moment, so the goroutines
	// really overlap.
	var b strings.Builder
	b.WriteString("(module\n")
	for i := range 2000 {
		fmt.Fprintf(&b, "  (func (export \"f%d\") (param i32) (result i32) (i32.mul (i32.add (local.get 0) (i32.const %d)) (i32.const 3)))\n", i, i)
	}
	b.WriteString(")")
	src := sandbox.Source{WAT: b.String()}

	const n = 20
	mods := make([]*sandbox.Module, n)
	infos := make([]sandbox.CompileInfo, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			mods[i], infos[i], errs[i] = e.Compile(context.Background(), src)
		}()
	}
	close(start)
	wg.Wait()
	cached := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("compile %d: %v", i, errs[i])
		}
		if mods[i] != mods[0] {
			t.Errorf("compile %d returned a different *Module", i)
		}
		if infos[i].Cached {
			cached++
		}
	}
	st := e.CacheStats()
	t.Logf("stats %+v; %d of %d compiles reported cached", st, cached, n)
	if st.Entries != 1 {
		t.Errorf("entries = %d, want 1", st.Entries)
	}
	if st.Hits+st.Misses != n {
		t.Errorf("hits %d + misses %d != %d lookups", st.Hits, st.Misses, n)
	}
	if st.Misses != 1 {
		t.Errorf("misses = %d for one module compiled once, want 1: concurrent compiles that waited "+
			"for the same in-flight compile are each counted as a miss", st.Misses)
	}
}

func TestCacheEvictionByEntries(t *testing.T) {
	t.Parallel()
	e := newEngine(t, sandbox.Config{CacheEntries: 2})
	ctx := context.Background()
	compile := func(tag string) *sandbox.Module {
		t.Helper()
		m, _, err := e.Compile(ctx, sandbox.Source{WAT: uniqueWAT(tag)})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	a, b := compile("a"), compile("b")
	// Touch a, so b is the least recently used.
	if _, info, err := e.Compile(ctx, sandbox.Source{ID: a.ID}); err != nil || !info.Cached {
		t.Fatalf("a by id: %v %v", info, err)
	}
	c := compile("c")
	if st := e.CacheStats(); st.Entries != 2 {
		t.Errorf("entries = %d, want 2", st.Entries)
	}
	for _, m := range []*sandbox.Module{a, c} {
		if got, _, err := e.Compile(ctx, sandbox.Source{ID: m.ID}); err != nil || got != m {
			t.Errorf("%s should still be cached: %v", m.ID, err)
		}
	}
	_, _, err := e.Compile(ctx, sandbox.Source{ID: b.ID})
	se := wantKind(t, err, sandbox.KindInvalidModule)
	if !strings.Contains(se.Message, b.ID) {
		t.Errorf("message %q does not name the id %s", se.Message, b.ID)
	}
	// An evicted module stays usable by whoever holds it.
	if res, err := e.Run(ctx, sandboxRequest(b)); err != nil || res.Values[0] != i32(7) {
		t.Errorf("run of evicted module: %v %v", res, err)
	}
	// An id never seen is refused the same way.
	unknown := sandbox.IDPrefix + strings.Repeat("0", 64)
	_, _, err = e.Compile(ctx, sandbox.Source{ID: unknown})
	if se := wantKind(t, err, sandbox.KindInvalidModule); !strings.Contains(se.Message, unknown) {
		t.Errorf("message %q does not name the id", se.Message)
	}
}

func TestCacheEvictionByBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	probe := newEngine(t, sandbox.Config{})
	m, _, err := probe.Compile(ctx, sandbox.Source{WAT: uniqueWAT("x")})
	if err != nil {
		t.Fatal(err)
	}
	// Room for two of these modules (their sizes are equal), not three.
	e := newEngine(t, sandbox.Config{CacheBytes: int64(2*m.CompiledSize + m.CompiledSize/2)})
	var ids []string
	for _, tag := range []string{"x", "y", "z"} {
		m, _, err := e.Compile(ctx, sandbox.Source{WAT: uniqueWAT(tag)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	st := e.CacheStats()
	if want := int64(2 * (m.CompiledSize + len(uniqueWAT("x")))); st.Entries != 2 || st.Bytes != want {
		t.Errorf("stats = %+v, want 2 entries, %d bytes with their texts", st, want)
	}
	if _, _, err := e.Compile(ctx, sandbox.Source{ID: ids[0]}); sandbox.KindOf(err) != sandbox.KindInvalidModule {
		t.Errorf("oldest module by id: %v, want invalid_module", err)
	}
}

func TestCompileInvalid(t *testing.T) {
	t.Parallel()
	e := newEngine(t, sandbox.Config{MaxModuleBytes: 4096})
	bigFile := filepath.Join(t.TempDir(), "big.wat")
	if err := os.WriteFile(bigFile, []byte("(module)"+strings.Repeat(" ", 5000)), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		src   sandbox.Source
		kind  sandbox.Kind
		inMsg string
	}{
		{"bad wat", sandbox.Source{WAT: "(module (func (export \"f\") i32.bogus))"}, sandbox.KindInvalidModule, "invalid WAT"},
		{"not wat at all", sandbox.Source{WAT: "garbage"}, sandbox.KindInvalidModule, "invalid WAT"},
		{"truncated binary", sandbox.Source{Wasm: []byte("\x00asm\x01\x00\x00\x00\x01")}, sandbox.KindInvalidModule, ""},
		{"bad version", sandbox.Source{Wasm: []byte("\x00asm\x02\x00\x00\x00")}, sandbox.KindInvalidModule, ""},
		{"type error", sandbox.Source{WAT: `(module (func (result i32) i64.const 1))`}, sandbox.KindInvalidModule, "type mismatch"},
		// The rewrite appends globals: an index past the module's own must
		// be refused before it could name one of them.
		{"global past the count", sandbox.Source{WAT: `(module (memory 1) (func (drop (memory.grow (i32.const 1))) (global.set 1 (i64.const 7))))`}, sandbox.KindInvalidModule, "unknown global"},
		{"oversized wat", sandbox.Source{WAT: "(module)" + strings.Repeat(" ", 4096)}, sandbox.KindInvalidModule, "maximum is 4096"},
		{"oversized wasm", sandbox.Source{Wasm: append([]byte("\x00asm\x01\x00\x00\x00"), make([]byte, 5000)...)}, sandbox.KindInvalidModule, "maximum is 4096"},
		{"oversized path", sandbox.Source{Path: bigFile}, sandbox.KindInvalidModule, "maximum is 4096"},
		{"missing path", sandbox.Source{Path: filepath.Join(t.TempDir(), "nope.wasm")}, sandbox.KindHost, "cannot open"},
		{"two sources", sandbox.Source{WAT: "(module)", ID: "sha256:00"}, sandbox.KindHost, "exactly one"},
		{"no source", sandbox.Source{}, sandbox.KindHost, "exactly one"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := e.Compile(context.Background(), tc.src)
			se := wantKind(t, err, tc.kind)
			t.Logf("%v", se)
			if !strings.Contains(se.Message, tc.inMsg) {
				t.Errorf("message %q does not mention %q", se.Message, tc.inMsg)
			}
			for _, leak := range []string{"backtrace", "Stack backtrace", "wasmtime::", "rust"} {
				if strings.Contains(se.Message, leak) {
					t.Errorf("message leaks %q: %q", leak, se.Message)
				}
			}
		})
	}
	if st := e.CacheStats(); st.Entries != 0 {
		t.Errorf("failed compiles were cached: %+v", st)
	}
	// A module just under the maximum is fine.
	if _, _, err := e.Compile(context.Background(), sandbox.Source{WAT: uniqueWAT("small")}); err != nil {
		t.Errorf("small module refused: %v", err)
	}
}

// A WAT error quotes the line it failed on, and a module on one line is
// the caller's whole input: the message is bounded, so 17 MiB on a line is
// invalid_module (it was a host error: the reply passed the compile
// child's frame limit) and 2 MiB of NULs no longer a 12 MiB message.
func TestInvalidWATMessagesAreBounded(t *testing.T) {
	e := newEngine(t, sandbox.Config{})
	for _, wat := range []string{strings.Repeat("a", 17<<20), strings.Repeat("\x00", 2<<20), strings.Repeat("é", 1<<20)} {
		_, _, err := e.Compile(context.Background(), sandbox.Source{WAT: wat})
		se := wantKind(t, err, sandbox.KindInvalidModule)
		if len(se.Message) > 4096 || !strings.Contains(se.Message, "invalid WAT") || !utf8.ValidString(se.Message) {
			t.Errorf("%d bytes of %q: a message of %d bytes: %.300q", len(wat), wat[:1], len(se.Message), se.Message)
		}
	}
}

func TestEngineConfigValidation(t *testing.T) {
	t.Parallel()
	for _, cfg := range []sandbox.Config{
		{Tick: time.Microsecond},
		{Tick: 2 * time.Second},
		{CompileTimeout: -time.Second},
		{MaxCompiles: -1},
		{CacheBytes: -1},
		{MaxModuleBytes: -1},
		{ModulePathDirs: []string{"/nonexistent-sandboxd-dir"}},
	} {
		if e, err := sandbox.NewEngine(cfg); err == nil {
			e.Close()
			t.Errorf("NewEngine(%+v) accepted", cfg)
		}
	}
}

// TestPersistentCache: with CacheDir set, every compiled module is kept
// on disk, and a second engine on the same directory loads it instead of
// compiling it; a corrupted file is compiled again and replaced.
func TestPersistentCache(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	wasm := mustWat2Wasm(t, uniqueWAT("persistent"))
	src := sandbox.Source{Wasm: wasm}
	e := newEngine(t, sandbox.Config{CacheDir: dir})
	m, info, err := e.Compile(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	if info.FromDisk || info.Cached {
		t.Fatalf("first compile: %+v, want a compile", info)
	}
	artefacts := func() []string {
		var files []string
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".cwasm") {
				files = append(files, p)
			}
			return nil
		})
		return files
	}
	files := artefacts()
	if len(files) != 1 {
		t.Fatalf("cache files %v, want one artefact", files)
	}

	run := func(e *sandbox.Engine, m *sandbox.Module) {
		t.Helper()
		if res, err := e.Run(context.Background(), sandboxRequest(m)); err != nil || res.Values[0] != i32(7) {
			t.Fatalf("run: %v %v", res, err)
		}
	}
	run(e, m)
	e2 := newEngine(t, sandbox.Config{CacheDir: dir})
	m2, info, err := e2.Compile(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	if !info.FromDisk || info.Cached {
		t.Fatalf("second engine: %+v, want the module loaded from disk", info)
	}
	if m2.ID != m.ID || m2.Size != m.Size || m2.CompiledSize != m.CompiledSize || len(m2.Exports) != len(m.Exports) {
		t.Errorf("loaded module %+v differs from the compiled one %+v", m2, m)
	}
	run(e2, m2)
	if st := e2.CacheStats(); st.Entries != 1 || st.Misses != 1 {
		t.Errorf("second engine's stats %+v: the loaded module is not cached", st)
	}

	// A text is known after a restart too, by the id it compiled to.
	text := sandbox.Source{WAT: uniqueWAT("persistent text")}
	if _, info, err := e.Compile(context.Background(), text); err != nil || info.FromDisk {
		t.Fatalf("text, first engine: %+v %v", info, err)
	}
	e4 := newEngine(t, sandbox.Config{CacheDir: dir})
	mt, info, err := e4.Compile(context.Background(), text)
	if err != nil || !info.FromDisk {
		t.Fatalf("text, second engine: %+v %v, want it loaded from disk", info, err)
	}
	run(e4, mt)
	if _, info, err := e4.Compile(context.Background(), text); err != nil || !info.Cached {
		t.Errorf("text again: %+v %v, want the in-memory cache", info, err)
	}

	// A torn file is not loaded: the module is compiled again and the
	// file replaced.
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files[0], b[:len(b)-10], 0o600); err != nil {
		t.Fatal(err)
	}
	e3 := newEngine(t, sandbox.Config{CacheDir: dir})
	m3, info, err := e3.Compile(context.Background(), src)
	if err != nil || info.FromDisk {
		t.Fatalf("after corruption: %+v %v, want a fresh compile", info, err)
	}
	run(e3, m3)
	if b2, err := os.ReadFile(files[0]); err != nil || len(b2) != len(b) {
		t.Errorf("the torn file was not replaced (%d bytes, want %d): %v", len(b2), len(b), err)
	}
}

// TestCacheOff: CacheOff keeps no module: every compile compiles, and an
// id is never known.
func TestCacheOff(t *testing.T) {
	t.Parallel()
	e := newEngine(t, sandbox.Config{CacheEntries: sandbox.CacheOff})
	src := sandbox.Source{WAT: uniqueWAT("off")}
	var id string
	for i := range 2 {
		m, info, err := e.Compile(context.Background(), src)
		if err != nil || info.Cached {
			t.Fatalf("compile %d: cached %v, err %v", i, info.Cached, err)
		}
		id = m.ID
	}
	if _, _, err := e.Compile(context.Background(), sandbox.Source{ID: id}); sandbox.KindOf(err) != sandbox.KindInvalidModule {
		t.Errorf("by id with the cache off: %v, want invalid_module", err)
	}
	if st := e.CacheStats(); st.Entries != 0 || st.Bytes != 0 || st.Misses != 3 {
		t.Errorf("stats %+v, want nothing kept and 3 misses", st)
	}
}
