package main

// Pre-initialisation through the real binary: compile's preinitialize
// gives a module of its own id, without _initialize, that answers as the
// plain one does; a module that cannot be pre-initialised is refused
// with invalid_module and the reason; the CLI's call --preinitialize.

import (
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestPreinitializeCompileThroughTheSidecar(t *testing.T) {
	t.Parallel()
	plugin := pluginPath(t, "go/plugin.wasm")
	s := startRaw(t, binPath)
	s.startReading()
	type compiled struct {
		ModuleID string `json:"moduleId"`
		Exports  []struct {
			Name string `json:"name"`
		} `json:"exports"`
	}
	compile := func(id string, params map[string]any) compiled {
		s.request(id, "compile", params)
		m, _ := s.response(id, 5*time.Minute)
		if m == nil || m.Error != nil {
			t.Fatalf("compile %v: %v", params, m.Error)
		}
		var c compiled
		if err := json.Unmarshal(m.Result, &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	plain := compile("1", map[string]any{"module": map[string]any{"path": plugin}})
	pre := compile("2", map[string]any{"module": map[string]any{"path": plugin}, "preinitialize": true})
	if pre.ModuleID == plain.ModuleID || !strings.HasPrefix(pre.ModuleID, "sha256:") {
		t.Fatalf("pre-initialised id %q, plain %q: want an id of its own", pre.ModuleID, plain.ModuleID)
	}
	for _, e := range pre.Exports {
		if e.Name == "_initialize" {
			t.Fatal("the pre-initialised module exports _initialize")
		}
	}
	if again := compile("3", map[string]any{"module": map[string]any{"path": plugin}, "preinitialize": true}); again.ModuleID != pre.ModuleID {
		t.Fatalf("a second compile gave id %q, want %q (the cached one)", again.ModuleID, pre.ModuleID)
	}
	long := map[string]uint64{"timeoutMs": 60_000}
	for i, id := range []string{plain.ModuleID, pre.ModuleID} {
		rid := string(rune('7' + i))
		s.request(rid, "run", map[string]any{"module": map[string]any{"id": id}, "function": "greet", "input": "Ada",
			"limits": long, "capabilities": map[string]any{"wasi": true}})
		m, _ := s.response(rid, time.Minute)
		if m == nil || m.Error != nil || !strings.Contains(string(m.Result), `"output":{"text":"Hello, Ada!"}`) {
			t.Fatalf("greet on %s: %v", id, m)
		}
	}
	// Refusals: text, and a module with no initialiser.
	s.request("4", "compile", map[string]any{"module": map[string]any{"wat": "(module)"}, "preinitialize": true})
	m, _ := s.response("4", time.Minute)
	if kind, msg, _ := errorOf(t, m); kind != "invalid_module" || !strings.Contains(msg, "binary") {
		t.Fatalf("WAT with preinitialize: %s %q", kind, msg)
	}
	s.request("5", "compile", map[string]any{"module": wasmSpec(wasmModule([]byte{0, 0}, true, []byte{0})), "preinitialize": true})
	m, _ = s.response("5", time.Minute)
	if kind, msg, _ := errorOf(t, m); kind != "invalid_module" || !strings.Contains(msg, "initialiser") {
		t.Fatalf("a module without _initialize: %s %q", kind, msg)
	}
	s.request("6", "compile", map[string]any{"module": map[string]any{"path": plugin}, "preinitialize": "yes"})
	m, _ = s.response("6", time.Minute)
	if m == nil || m.Error == nil || !strings.Contains(m.Error.Message, "preinitialize: must be true or false") {
		t.Fatalf("preinitialize as a string: %v", m)
	}
}

func TestCLICallPreinitialized(t *testing.T) {
	t.Parallel()
	out, errText, code := sandboxdCall(t, pluginPath(t, "go/plugin.wasm"), "greet", "--input", "Ada", "--allow-wasi", "--preinitialize")
	if code != 0 || string(out) != "Hello, Ada!" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errText)
	}
}

// TestPreinitializeSizeBombThroughTheSidecar: a 65-byte module whose
// initialiser fills 16 MiB of memory with a non-zero byte is refused by
// --max-module-bytes (the pre-initialised module would be 16 MiB; it was
// built, whatever its size, and the whole memory copied first), with one
// response, and the sidecar keeps serving.
func TestPreinitializeSizeBombThroughTheSidecar(t *testing.T) {
	t.Parallel()
	bomb, err := hex.DecodeString("0061736d01000000010401600000030201000503010001070f010b5f696e697469616c697a6500000a1701150041ff0140001a410041aa014180808008fc0b000b")
	if err != nil {
		t.Fatal(err)
	}
	s := startRaw(t, binPath, "--max-module-bytes", "1048576")
	s.startReading()
	s.request("1", "compile", map[string]any{"module": wasmSpec(bomb), "preinitialize": true})
	m, _ := s.response("1", 5*time.Minute)
	if kind, msg, _ := errorOf(t, m); kind != "invalid_module" || !strings.Contains(msg, "over 1048576 bytes") {
		t.Fatalf("the size bomb: %s %q", kind, msg)
	}
	s.request("2", "compile", map[string]any{"module": wasmSpec(wasmModule([]byte{0, 0}, true, []byte{0}))})
	if m, _ := s.response("2", time.Minute); m == nil || m.Error != nil {
		t.Fatalf("a compile after the bomb: %v", m)
	}
}
