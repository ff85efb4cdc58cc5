package sandbox_test

// The cache knows a module by the texts and binaries that compiled to it
// (cache.go): a second Compile of the same bytes is a lookup. These tests
// pin what a hit skips (any compile), what it never skips (the checks of
// every run), and that the sources go with their module.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// noCompile makes src fail if it is compiled: a compile time limit no
// child can meet. A Compile that succeeds with it was served by the cache.
func noCompile(src sandbox.Source) sandbox.Source {
	src.CompileTimeout = time.Nanosecond
	return src
}

func TestSourceAliasHit(t *testing.T) {
	t.Parallel()
	e := newEngine(t, sandbox.Config{})
	ctx := context.Background()
	text := uniqueWAT("alias-hit")
	wasm := mustWat2Wasm(t, text)
	for _, src := range []sandbox.Source{{WAT: text}, {Wasm: wasm}} {
		if _, _, err := e.Compile(ctx, noCompile(src)); sandbox.KindOf(err) != sandbox.KindCompileLimitExceeded {
			t.Fatalf("a first compile under a 1 ns limit: %v, want compile_limit_exceeded (the probe works)", err)
		}
	}
	m, _, err := e.Compile(ctx, sandbox.Source{WAT: text})
	if err != nil {
		t.Fatal(err)
	}
	// The same text, the same text in the wasm field, and the binary (known
	// by its id, then by its bytes): none is compiled again.
	for i, src := range []sandbox.Source{{WAT: text}, {Wasm: []byte(text)}, {Wasm: wasm}, {Wasm: wasm}} {
		got, info, err := e.Compile(ctx, noCompile(src))
		if err != nil || got != m || !info.Cached {
			t.Errorf("source %d: same module %v, cached %v, err %v", i, got == m, info.Cached, err)
		}
		if c, ok := e.Cached(src); !ok || c != m {
			t.Errorf("source %d: Cached = %v, %v", i, c == m, ok)
		}
	}
	// A file of the same text is known by its bytes too.
	path := filepath.Join(t.TempDir(), "m.wat")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, ok := e.Cached(sandbox.Source{Path: path}); !ok || c != m {
		t.Errorf("file: Cached = %v, %v", c == m, ok)
	}
	if got, info, err := e.Compile(ctx, noCompile(sandbox.Source{Path: path})); err != nil || got != m || !info.Cached {
		t.Errorf("file: same module %v, cached %v, err %v", got == m, info.Cached, err)
	}
	if st := e.CacheStats(); st.Misses != 3 || st.Entries != 1 {
		t.Errorf("stats %+v, want 1 entry and 3 misses (two probes, one compile)", st)
	}
	// A caller's buffer is copied: changing it after Compile changes
	// nothing the cache recognises.
	buf := append([]byte(nil), wasm...)
	e2 := newEngine(t, sandbox.Config{})
	m2, _, err := e2.Compile(ctx, sandbox.Source{Wasm: buf})
	if err != nil {
		t.Fatal(err)
	}
	copy(buf, mustWat2Wasm(t, uniqueWAT("alias-hiX"))) // same length, other module
	if got, _, err := e2.Compile(ctx, sandbox.Source{Wasm: buf}); err != nil || got == m2 || got.ID != sandbox.ModuleID(buf) {
		t.Errorf("the caller's rewritten buffer: got the old module %v, err %v", got == m2, err)
	}
}

// TestSourceAliasSameLength: modules of the same length (the hash's input
// differs in one byte) are told apart, each running its own code.
func TestSourceAliasSameLength(t *testing.T) {
	t.Parallel()
	e := newEngine(t, sandbox.Config{})
	ctx := context.Background()
	const n = 20
	texts := make([]string, n)
	mods := make([]*sandbox.Module, n)
	for i := range n {
		texts[i] = fmt.Sprintf(`(module (func (export "f") (result i32) i32.const %03d))`, i)
		if len(texts[i]) != len(texts[0]) {
			t.Fatal("texts of different lengths")
		}
		m, _, err := e.Compile(ctx, sandbox.Source{WAT: texts[i]})
		if err != nil {
			t.Fatal(err)
		}
		mods[i] = m
	}
	for i := range n {
		for _, src := range []sandbox.Source{{WAT: texts[i]}, {Wasm: []byte(texts[i])}} {
			m, info, err := e.Compile(ctx, noCompile(src))
			if err != nil || m != mods[i] || !info.Cached {
				t.Fatalf("text %d: module %d? %v, cached %v, err %v", i, i, m == mods[i], info.Cached, err)
			}
			res, err := e.Run(ctx, sandbox.Request{Module: m, Function: "f", Limits: limits.Defaults()})
			if err != nil || res.Values[0] != i32(int32(i)) {
				t.Fatalf("text %d ran %v, %v", i, res, err)
			}
		}
	}
}

// TestSourceAliasEviction: evicting a module forgets the bytes it was
// known by, and what they cost.
func TestSourceAliasEviction(t *testing.T) {
	t.Parallel()
	e := newEngine(t, sandbox.Config{CacheEntries: 1})
	ctx := context.Background()
	a, b := uniqueWAT("evict-a"), uniqueWAT("evict-b")
	if _, _, err := e.Compile(ctx, sandbox.Source{WAT: a}); err != nil {
		t.Fatal(err)
	}
	mb, _, err := e.Compile(ctx, sandbox.Source{WAT: b})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Cached(sandbox.Source{WAT: a}); ok {
		t.Error("the evicted module is still known by its text")
	}
	if _, _, err := e.Compile(ctx, noCompile(sandbox.Source{WAT: a})); sandbox.KindOf(err) != sandbox.KindCompileLimitExceeded {
		t.Errorf("the evicted module's text: %v, want a compile (and its 1 ns limit)", err)
	}
	if st := e.CacheStats(); st.Entries != 1 || st.Bytes != int64(mb.CompiledSize+len(b)) {
		t.Errorf("stats %+v, want only b: %d bytes", st, mb.CompiledSize+len(b))
	}
}

// TestSourceAliasCacheOff: with the cache off nothing is known by its
// bytes either.
func TestSourceAliasCacheOff(t *testing.T) {
	t.Parallel()
	e := newEngine(t, sandbox.Config{CacheEntries: sandbox.CacheOff})
	src := sandbox.Source{WAT: uniqueWAT("alias-off")}
	for i := range 2 {
		if _, info, err := e.Compile(context.Background(), src); err != nil || info.Cached {
			t.Fatalf("compile %d: cached %v, err %v", i, info.Cached, err)
		}
	}
	if _, ok := e.Cached(src); ok {
		t.Error("Cached found a module with the cache off")
	}
	if _, _, err := e.Compile(context.Background(), noCompile(src)); sandbox.KindOf(err) != sandbox.KindCompileLimitExceeded {
		t.Errorf("third compile: %v, want a compile", err)
	}
}

// TestSourceAliasBounded: one module sent in many formattings keeps only
// the latest few texts.
func TestSourceAliasBounded(t *testing.T) {
	t.Parallel()
	e := newEngine(t, sandbox.Config{})
	ctx := context.Background()
	var m *sandbox.Module
	longest := 0
	for i := range 50 {
		text := `(module (func (export "f") (result i32)` + strings.Repeat(" ", i) + ` i32.const 7))`
		got, _, err := e.Compile(ctx, sandbox.Source{WAT: text})
		if err != nil {
			t.Fatal(err)
		}
		if m == nil {
			m = got
		}
		if got != m {
			t.Fatal("formattings of one module compiled to different modules")
		}
		longest = max(longest, len(text))
	}
	if st := e.CacheStats(); st.Entries != 1 || st.Bytes > int64(m.CompiledSize+8*longest) {
		t.Errorf("stats %+v: %d bytes of texts kept for one module", st, st.Bytes-int64(m.CompiledSize))
	}
	last := `(module (func (export "f") (result i32)` + strings.Repeat(" ", 49) + ` i32.const 7))`
	if got, ok := e.Cached(sandbox.Source{WAT: last}); !ok || got != m {
		t.Error("the latest text is not known")
	}
	first := `(module (func (export "f") (result i32) i32.const 7))`
	if _, ok := e.Cached(sandbox.Source{WAT: first}); ok {
		t.Error("the first of 50 texts is still kept")
	}
}

// TestSourceAliasKeepsChecks: a module found by its bytes is checked like
// any other on every run: grants, the WASI grant check before compiling,
// and the limits.
func TestSourceAliasKeepsChecks(t *testing.T) {
	t.Parallel()
	e := newEngine(t, sandbox.Config{})
	ctx := context.Background()

	logText := `(module (import "host" "log" (func $log (param i32 i32))) (memory 2)
	  (func (export "f") (result i32) i32.const 1))`
	m, _, err := e.Compile(ctx, sandbox.Source{WAT: logText})
	if err != nil {
		t.Fatal(err)
	}
	granted := sandbox.Request{Module: m, Function: "f", Limits: limits.Defaults(), Capabilities: sandbox.Capabilities{Log: true}}
	if _, err := e.Run(ctx, granted); err != nil {
		t.Fatal(err)
	}
	again, info, err := e.Compile(ctx, sandbox.Source{WAT: logText})
	if err != nil || !info.Cached {
		t.Fatalf("second compile: cached %v, err %v", info.Cached, err)
	}
	_, err = e.Run(ctx, sandbox.Request{Module: again, Function: "f", Limits: limits.Defaults()})
	wantKind(t, err, sandbox.KindDisallowedImport)
	small := limits.Defaults()
	small.MemoryBytes = limits.WasmPageSize
	_, err = e.Run(ctx, sandbox.Request{Module: again, Function: "f", Limits: small, Capabilities: sandbox.Capabilities{Log: true}})
	wantKind(t, err, sandbox.KindMemoryLimitExceeded)

	wasiText := `(module (import "wasi_snapshot_preview1" "proc_exit" (func (param i32)))
	  (func (export "_start")))`
	if _, _, err := e.Compile(ctx, sandbox.Source{WAT: wasiText}); err != nil {
		t.Fatal(err)
	}
	found, ok := e.Cached(sandbox.Source{WAT: wasiText})
	if !ok {
		t.Fatal("the WASI text is not known")
	}
	for _, src := range []sandbox.Source{{WAT: wasiText}, {ID: found.ID}} {
		wantKind(t, e.CheckWASIGrant(src, sandbox.Capabilities{}), sandbox.KindDisallowedImport)
	}
	_, err = e.Run(ctx, sandbox.Request{Module: found, Function: "_start", Limits: limits.Defaults()})
	wantKind(t, err, sandbox.KindDisallowedImport)
}

// Lookup, as the sidecar's dispatcher uses it, is Compile served from
// memory in one step: what it finds is a counted hit that keeps the module
// recent, and it never reads a file (a path's file may change between two
// reads, or sit on a slow filesystem; the dispatcher must not wait for
// either).
func TestSourceAliasLookupIsCompileFromTheCache(t *testing.T) {
	t.Parallel()
	e := newEngine(t, sandbox.Config{CacheEntries: 2})
	ctx := context.Background()
	a, b, c := uniqueWAT("lookup-a"), uniqueWAT("lookup-b"), uniqueWAT("lookup-c")
	ma, _, err := e.Compile(ctx, sandbox.Source{WAT: a})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Compile(ctx, sandbox.Source{WAT: b}); err != nil {
		t.Fatal(err)
	}
	before := e.CacheStats()
	for i, src := range []sandbox.Source{{WAT: a}, {Wasm: []byte(a)}, {ID: ma.ID}} {
		if m, ok := e.Lookup(src); !ok || m != ma {
			t.Fatalf("source %d: Lookup = %v, %v", i, m == ma, ok)
		}
	}
	if st := e.CacheStats(); st.Hits != before.Hits+3 || st.Misses != before.Misses {
		t.Errorf("three lookups: stats %+v after %+v, want 3 more hits and no miss", st, before)
	}
	// a was looked up last: c evicts b, not a.
	if _, _, err := e.Compile(ctx, sandbox.Source{WAT: c}); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Lookup(sandbox.Source{WAT: a}); !ok {
		t.Error("the module looked up last was evicted: Lookup does not keep it recent")
	}
	if _, ok := e.Lookup(sandbox.Source{WAT: b}); ok {
		t.Error("the least recently used module is still found")
	}
	// Nothing unknown is counted as a miss (Compile counts it, if asked).
	before = e.CacheStats()
	if _, ok := e.Lookup(sandbox.Source{ID: "sha256:" + "00"}); ok {
		t.Error("an unknown id was found")
	}
	if _, ok := e.Lookup(sandbox.Source{WAT: uniqueWAT("lookup-new")}); ok {
		t.Error("a text never compiled was found")
	}
	// A path is never found: its file would have to be read.
	path := filepath.Join(t.TempDir(), "a.wat")
	if err := os.WriteFile(path, []byte(a), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Lookup(sandbox.Source{Path: path}); ok {
		t.Error("Lookup found a module by a path (it read the file)")
	}
	if st := e.CacheStats(); st != before {
		t.Errorf("lookups that found nothing changed the stats: %+v, then %+v", before, st)
	}
}

// TestSourceAliasPathFollowsItsFile: a path's module is the file's
// content at each Compile; a module it named before is not reused.
func TestSourceAliasPathFollowsItsFile(t *testing.T) {
	t.Parallel()
	e := newEngine(t, sandbox.Config{})
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.wat")
	var ids []string
	for _, text := range []string{uniqueWAT("path-v1"), uniqueWAT("path-v2")} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		m, _, err := e.Compile(ctx, sandbox.Source{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		if c, ok := e.Cached(sandbox.Source{Path: path}); !ok || c != m {
			t.Errorf("the file's current module is not the one Cached finds")
		}
		ids = append(ids, m.ID)
	}
	if ids[0] == ids[1] {
		t.Errorf("the file changed but Compile returned the module of its old content (%s)", ids[0])
	}
}

// TestSourceAliasWithinCacheBytes: one module sent in several big
// formattings (whitespace only: each compiles to the same wasm) keeps its
// latest few texts, and they count against CacheBytes like anything else:
// the cache never holds more than CacheBytes, even when that module is
// the only one left.
func TestSourceAliasWithinCacheBytes(t *testing.T) {
	t.Parallel()
	const cacheBytes = 256 << 10
	e := newEngine(t, sandbox.Config{CacheBytes: cacheBytes})
	ctx := context.Background()
	var m *sandbox.Module
	for i := range 4 {
		// 150 KiB of text each: one fits the bound, two do not.
		text := `(module (func (export "f") (result i32)` + strings.Repeat(" ", 150<<10+i) + ` i32.const 7))`
		got, _, err := e.Compile(ctx, sandbox.Source{WAT: text})
		if err != nil {
			t.Fatal(err)
		}
		if m != nil && got != m {
			t.Fatal("formattings of one module compiled to different modules")
		}
		m = got
		if st := e.CacheStats(); st.Bytes > cacheBytes {
			t.Fatalf("after %d formattings the cache holds %d bytes, over CacheBytes %d (%d entries)", i+1, st.Bytes, cacheBytes, st.Entries)
		}
		if c, ok := e.Cached(sandbox.Source{WAT: text}); !ok || c != m {
			t.Errorf("formatting %d: the latest text is not known", i)
		}
	}
}
