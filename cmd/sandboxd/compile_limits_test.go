package main

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
)

// TestCompileTakesCompileLimits: an ahead-of-time compile takes the
// compile fields of limits, as a run does. The bomb under a 500 ms
// compileTimeoutMs is answered compile_limit_exceeded (compile_time, 500);
// a run limit there, or a compile limit past the maximum, is -32602 naming
// the field. Before compile took limits, every such request was -32602
// "unknown field" and the bomb compiled for the default 30 s.
func TestCompileTakesCompileLimits(t *testing.T) {
	s := startRaw(t, binPath)
	s.startReading()

	bomb := base64.StdEncoding.EncodeToString(nestedLoops(100_000, 31))
	s.request("1", "compile", protocol.CompileParams{Module: protocol.ModuleSpec{Wasm: &bomb}, Limits: map[string]uint64{"compileTimeoutMs": 500}})
	m, _ := s.response("1", 120*time.Second)
	kind, _, data := errorOf(t, m)
	if kind != "compile_limit_exceeded" || data["resource"] != "compile_time" || data["limit"] != 500.0 {
		t.Errorf("bomb compiled under compileTimeoutMs 500: %s", trunc(m.raw))
	}

	for id, tc := range map[string]struct {
		limits map[string]uint64
		field  string
	}{
		"2": {map[string]uint64{"compileTimeoutMs": 500, "fuel": 10}, "limits.fuel"},
		"3": {map[string]uint64{"timeoutMs": 10}, "limits.timeoutMs"},
		"4": {map[string]uint64{"compileTimeoutMs": 300_001}, "limits.compileTimeoutMs"},
		"5": {map[string]uint64{"compileMemoryBytes": 0}, "limits.compileMemoryBytes"},
	} {
		s.request(id, "compile", map[string]any{"module": map[string]any{"wat": "(module)"}, "limits": tc.limits})
		m, _ := s.response(id, 60*time.Second)
		if m == nil || m.Error == nil || m.Error.Code != -32602 || !strings.HasPrefix(m.Error.Message, tc.field+":") {
			t.Errorf("compile with limits %v: want -32602 naming %s, got %s", tc.limits, tc.field, trunc(m.raw))
		}
	}

	// The compile fields are honoured, not only checked: a small module
	// compiles under them, and the sidecar still serves.
	s.request("6", "compile", map[string]any{"module": map[string]any{"wat": "(module (func (export \"run\")))"}, "limits": map[string]uint64{"compileTimeoutMs": 60_000, "compileMemoryBytes": 1 << 30}})
	if m, _ := s.response("6", 60*time.Second); m == nil || m.Error != nil || !strings.Contains(string(m.Result), `"moduleId"`) {
		t.Errorf("compile under explicit compile limits: %s", trunc(m.raw))
	}
}
