package sandboxd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/protocol"
)

// plainRequest is the request as encoded before the module cache.
func plainRequest(t *testing.T, id uint64, method string, params any) []byte {
	t.Helper()
	b, err := json.Marshal(outMsg{JSONRPC: "2.0", ID: &id, Method: method, Params: params})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEncodeRequestModuleCache(t *testing.T) {
	var c Client
	wat := "(module\n  (func (export \"add\") (param i32 i32) (result i32)\n    local.get 0 local.get 1 i32.add))\n<&>\u2028"
	run := RunParams{Module: ModuleSpec{WAT: &wat}, Function: "add",
		Args: []json.RawMessage{json.RawMessage("1"), json.RawMessage("2")}, Limits: map[string]uint64{"fuel": 1000}}

	first, err := c.encodeRequest(1, protocol.MethodRun, run)
	if err != nil {
		t.Fatal(err)
	}
	if want := plainRequest(t, 1, protocol.MethodRun, run); !bytes.Equal(first, want) {
		t.Fatalf("first encoding\n got %s\nwant %s", first, want)
	}
	if len(c.modules.entries) != 1 {
		t.Fatalf("%d modules cached after one, want 1", len(c.modules.entries))
	}
	second, err := c.encodeRequest(2, protocol.MethodRun, run)
	if err != nil {
		t.Fatal(err)
	}
	if want := plainRequest(t, 2, protocol.MethodRun, run); !bytes.Equal(second, want) {
		t.Fatalf("second encoding (cached)\n got %s\nwant %s", second, want)
	}
	// The cache served it: its entry is what the request carries.
	k, _ := keyOf(run.Module)
	if cached := c.modules.entries[k]; !bytes.Contains(second, cached) {
		t.Fatalf("request does not carry the cached module %s", cached)
	}

	// The same *string changed after its first use: sent as it is now.
	*run.Module.WAT = strings.Replace(wat, "i32.add", "i32.sub", 1)
	third, err := c.encodeRequest(3, protocol.MethodRun, run)
	if err != nil {
		t.Fatal(err)
	}
	if want := plainRequest(t, 3, protocol.MethodRun, run); !bytes.Equal(third, want) {
		t.Fatalf("changed module\n got %s\nwant %s", third, want)
	}
	if !bytes.Contains(third, []byte("i32.sub")) || bytes.Contains(third, []byte("i32.add")) {
		t.Fatalf("changed module sent stale: %s", third)
	}

	// The other params types that carry a module, and the ones that don't.
	wasm := "AGFzbQEAAAA="
	for _, p := range []struct {
		method string
		params any
	}{
		{protocol.MethodCompile, CompileParams{Module: ModuleSpec{Wasm: &wasm}}},
		{protocol.MethodInstantiate, InstantiateParams{Module: ModuleSpec{WAT: &wat}, Config: map[string]string{"k": "v"}}},
		{protocol.MethodRun, RunParams{Module: ModuleSpec{ID: Str("sha256:00")}}},
		{protocol.MethodRun, RunParams{Module: ModuleSpec{WAT: &wat, Wasm: &wasm}}},
		{protocol.MethodRun, &run},
		{protocol.MethodStats, nil},
	} {
		for i := range 2 {
			got, err := c.encodeRequest(uint64(10+i), p.method, p.params)
			if err != nil {
				t.Fatal(err)
			}
			if want := plainRequest(t, uint64(10+i), p.method, p.params); !bytes.Equal(got, want) {
				t.Fatalf("%s %T, time %d\n got %s\nwant %s", p.method, p.params, i+1, got, want)
			}
		}
	}
}

func TestModuleCacheBounded(t *testing.T) {
	var c Client
	for i := range 3 * moduleCacheEntries {
		wat := fmt.Sprintf("(module) ;; %d", i)
		if _, err := c.encodeRequest(uint64(i), protocol.MethodRun, RunParams{Module: ModuleSpec{WAT: &wat}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(c.modules.entries); n > moduleCacheEntries {
		t.Fatalf("%d modules cached, want at most %d", n, moduleCacheEntries)
	}
	big := strings.Repeat("x", moduleCacheBytes/2)
	if _, err := c.encodeRequest(1, protocol.MethodRun, RunParams{Module: ModuleSpec{WAT: &big}}); err != nil {
		t.Fatal(err)
	}
	size := 0
	for _, b := range c.modules.entries {
		size += len(b)
	}
	if size != c.modules.size || size > moduleCacheBytes/4 {
		t.Fatalf("cache holds %d bytes (counted %d), want ≤ %d: a big module is not kept", size, c.modules.size, moduleCacheBytes/4)
	}
}

// BenchmarkEncodeRunWAT is a run's request with the bench's 2.4 KB WAT
// text: cached (the client's path) and encoded in full each time.
func BenchmarkEncodeRunWAT(b *testing.B) {
	wat := strings.Repeat("  (func $f (param i32) (result i32)\n    local.get 0)\n", 48)
	run := RunParams{Module: ModuleSpec{WAT: &wat}, Function: "add",
		Args: []json.RawMessage{json.RawMessage("1"), json.RawMessage("2")}}
	b.Run("cached", func(b *testing.B) {
		var c Client
		for i := range b.N {
			if _, err := c.encodeRequest(uint64(i), protocol.MethodRun, run); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("marshal", func(b *testing.B) {
		for i := range b.N {
			id := uint64(i)
			if _, err := json.Marshal(outMsg{JSONRPC: "2.0", ID: &id, Method: protocol.MethodRun, Params: run}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
