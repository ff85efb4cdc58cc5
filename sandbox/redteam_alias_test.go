package sandbox_test

// Red team, issue 14: the alias cache (cache.go) as the sidecar's
// dispatcher uses it. Lookup is Compile served from memory in one step:
// what it finds is a counted hit that keeps the module recent, and it
// never reads a file (a path's file may change between two reads, or sit
// on a slow filesystem; the dispatcher must not wait for either).

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/sandbox"
)

func TestRedteamLookupIsCompileFromTheCache(t *testing.T) {
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

// TestRedteamPathModuleFollowsItsFile: a path's module is the file's
// content at each Compile; a module it named before is not reused.
func TestRedteamPathModuleFollowsItsFile(t *testing.T) {
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

// TestRedteamSourcesStayWithinCacheBytes: one module sent in several big
// formattings (whitespace only: each compiles to the same wasm) keeps its
// latest few texts, and they count against CacheBytes like anything else:
// the cache never holds more than CacheBytes, even when that module is
// the only one left.
func TestRedteamSourcesStayWithinCacheBytes(t *testing.T) {
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
