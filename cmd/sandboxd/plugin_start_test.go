package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
)

// TestWireGoStdPluginStart: the Go PDK's std-Go example, a WASI command
// whose main is the plugin, over the wire. `call _start` takes the input
// and the instance's config and answers the output (Go ends main with
// proc_exit(0), a success); a second `_start` is -32001 naming why, as
// Extism's Go SDK refuses it ("module is closed"); `run` with input is
// the one-shot path, and an error the plugin sets is a plugin_error. Not
// parallel: its compile (~3 MB of Go) should not crowd the compile
// deadlines of the parallel tests.
func TestWireGoStdPluginStart(t *testing.T) {
	s := startRaw(t, binPath, "--framing=ndjson", "--cache-dir", instanceCacheDir(t))
	s.startReading()
	module := map[string]string{"path": pluginPath(t, "go/std_countvowels.wasm")}
	caps := map[string]any{"wasi": true, "log": true}
	config := map[string]string{"thing": "1234"}
	s.request(`"i"`, "instantiate", map[string]any{"module": module, "capabilities": caps, "config": config, "limits": hangLimits(nil)})
	m, _ := s.response(`"i"`, 5*time.Minute)
	var res protocol.InstantiateResult
	if m.Error != nil || json.Unmarshal(m.Result, &res) != nil || !res.Plugin ||
		!strings.Contains(string(m.Result), `{"name":"_start","kind":"func","params":[],"results":[]}`) {
		t.Fatalf("instantiate: %s", m.raw)
	}
	start := callParams(res.Instance, "_start")
	start["input"] = `{"input": "this is a test"}`
	s.request(`"first"`, "call", start)
	m, _ = s.response(`"first"`, time.Minute)
	if m.Error != nil || !strings.Contains(string(m.Result), `"output":{"text":"JSON roundtrip: a === b"}`) ||
		!strings.Contains(string(m.Result), `"values":[]`) {
		t.Fatalf("_start: %s", m.raw)
	}
	s.request(`"second"`, "call", start)
	m, _ = s.response(`"second"`, time.Minute)
	if m.Error == nil || m.Error.Code != protocol.CodeInstanceClosed ||
		errData(t, m)["reason"] != `closed after the guest exited with status 0 in a call of "_start"` {
		t.Fatalf("a second _start: %s", m.raw)
	}

	run := map[string]any{"module": module, "capabilities": caps, "config": config, "limits": hangLimits(nil), "function": "_start"}
	run["input"] = `{"input": "once"}`
	s.request(`"run"`, "run", run)
	if m, _ := s.response(`"run"`, time.Minute); m.Error != nil || !strings.Contains(string(m.Result), `"output":{"text":"JSON roundtrip: a === b"}`) {
		t.Fatalf("run: %s", m.raw)
	}
	run["input"] = "this is a test"
	s.request(`"bad"`, "run", run)
	m, _ = s.response(`"bad"`, time.Minute)
	if d := errData(t, m); m.Error.Code != 10 || d["kind"] != "plugin_error" || d["function"] != "_start" || d["returnCode"] != 0.0 ||
		!strings.HasPrefix(d["message"].(string), "invalid character 'h'") {
		t.Fatalf("run with input that is not JSON: %s", m.raw)
	}
}
