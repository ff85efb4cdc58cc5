package main

// Instances on the raw wire: ordering of pipelined calls, cancellation of
// queued and running calls, release with calls queued, hostile params.

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
)

// rawInstance instantiates the stateful module on a raw sidecar and
// returns the instance id.
func rawInstance(t *testing.T, s *rawSidecar, id string) string {
	t.Helper()
	s.request(id, "instantiate", map[string]any{"module": map[string]string{"wat": statefulWAT}, "limits": hangLimits(nil)})
	m, _ := s.response(id, time.Minute)
	var res protocol.InstantiateResult
	if m.Error != nil || json.Unmarshal(m.Result, &res) != nil || res.Instance == "" {
		t.Fatalf("instantiate: %s", m.raw)
	}
	return res.Instance
}

func callParams(inst, fn string, args ...any) map[string]any {
	p := map[string]any{"instance": inst, "function": fn}
	if args != nil {
		p["args"] = args
	}
	return p
}

// errData decodes a response's error data.
func errData(t *testing.T, m *message) map[string]any {
	t.Helper()
	if m.Error == nil {
		t.Fatalf("want an error, got %s", m.raw)
	}
	var d map[string]any
	_ = json.Unmarshal(m.Error.Data, &d)
	return d
}

func resultI32(t *testing.T, m *message) int {
	t.Helper()
	var res struct{ Values []struct{ Value int } }
	if m.Error != nil || json.Unmarshal(m.Result, &res) != nil || len(res.Values) != 1 {
		t.Fatalf("want one value, got %s", m.raw)
	}
	return res.Values[0].Value
}

// TestInstanceCallsRunInArrivalOrder pipelines calls to one instance
// without waiting for any answer: each push must land in the order the
// requests were written, whatever the workers do, and calls to another
// instance interleaved with them keep their own order.
func TestInstanceCallsRunInArrivalOrder(t *testing.T) {
	t.Parallel()
	s := startRaw(t, binPath, "--framing=ndjson", "--max-concurrency", "4")
	s.startReading()
	a, b := rawInstance(t, s, `"a"`), rawInstance(t, s, `"b"`)
	const n = 200
	for i := range n {
		s.request(fmt.Sprintf(`"a%d"`, i), "call", callParams(a, "push", i))
		s.request(fmt.Sprintf(`"b%d"`, i), "call", callParams(b, "push", n-i))
	}
	for i := range n {
		for _, id := range []string{"a", "b"} {
			m, _ := s.response(fmt.Sprintf(`"%s%d"`, id, i), time.Minute)
			if got := resultI32(t, m); got != i {
				t.Fatalf("call %s%d ran as number %d", id, i, got)
			}
		}
	}
	for i := range n {
		s.request(fmt.Sprintf(`"at%d"`, i), "call", callParams(a, "at", i))
		m, _ := s.response(fmt.Sprintf(`"at%d"`, i), time.Minute)
		if got := resultI32(t, m); got != i {
			t.Fatalf("slot %d holds %d", i, got)
		}
	}
}

// TestInstanceCancelQueuedAndRunning: cancelling a call queued behind its
// instance's running call answers it -32800 and keeps the instance;
// cancelling the running call cancels it and closes the instance.
func TestInstanceCancelQueuedAndRunning(t *testing.T) {
	t.Parallel()
	s := startRaw(t, binPath, "--framing=ndjson")
	s.startReading()
	inst := rawInstance(t, s, `"i"`)

	// A long but finite call; a push queued behind it, then cancelled.
	work := callParams(inst, "work", "3000000000")
	work["limits"] = map[string]uint64{"fuel": hugeFuel}
	s.request(`"work"`, "call", work)
	s.waitRunning(1, 0)
	s.request(`"queued"`, "call", callParams(inst, "push", 7))
	s.waitRunning(1, 1) // stats count a call waiting for its instance as queued, idle workers or not
	s.notify("$/cancelRequest", map[string]any{"id": "queued"})
	m, _ := s.response(`"queued"`, time.Minute)
	if m.Error == nil || m.Error.Code != protocol.CodeCancelled || errData(t, m)["instanceClosed"] == true {
		t.Fatalf("cancelled queued call: %s", m.raw)
	}
	if m, _ := s.response(`"work"`, 5*time.Minute); m.Error != nil {
		t.Fatalf("the running call, after a queued one was cancelled: %s", m.raw)
	}
	s.request(`"after"`, "call", callParams(inst, "count"))
	if m, _ := s.response(`"after"`, time.Minute); resultI32(t, m) != 0 {
		t.Fatalf("the cancelled push ran, or the instance is gone: %s", m.raw)
	}

	// A call's own fuel: its budget is the call's, and running out closes
	// the instance like any fence.
	small := callParams(inst, "work", "1000000000")
	small["limits"] = map[string]uint64{"fuel": 5000}
	s.request(`"small"`, "call", small)
	m, _ = s.response(`"small"`, time.Minute)
	if d := errData(t, m); m.Error.Code != 2 || d["budget"] != float64(5000) || d["instanceClosed"] != true {
		t.Fatalf("a call out of its own fuel: %s", m.raw)
	}
	inst = rawInstance(t, s, `"i2"`)

	// The running call: cancelled, and the instance closed.
	spin := callParams(inst, "spin")
	spin["limits"] = map[string]uint64{"fuel": hugeFuel}
	s.request(`"spin"`, "call", spin)
	s.waitRunning(1, 0)
	s.notify("$/cancelRequest", map[string]any{"id": "spin"})
	m, _ = s.response(`"spin"`, time.Minute)
	if m.Error == nil || m.Error.Code != protocol.CodeCancelled || errData(t, m)["instanceClosed"] != true {
		t.Fatalf("cancelled running call: %s", m.raw)
	}
	s.request(`"late"`, "call", callParams(inst, "count"))
	m, _ = s.response(`"late"`, time.Minute)
	d := errData(t, m)
	if m.Error.Code != protocol.CodeInstanceClosed || d["instance"] != inst || d["reason"] != `closed after cancelled in a call of "spin"` {
		t.Fatalf("call after a cancelled call: %s", m.raw)
	}
}

// TestInstanceRelease: release cancels the running call, answers the
// queued ones -32001 (released), and is idempotent.
func TestInstanceRelease(t *testing.T) {
	t.Parallel()
	s := startRaw(t, binPath, "--framing=ndjson")
	s.startReading()
	inst := rawInstance(t, s, `"i"`)
	spin := callParams(inst, "spin")
	spin["limits"] = map[string]uint64{"fuel": hugeFuel}
	s.request(`"spin"`, "call", spin)
	s.waitRunning(1, 0)
	s.request(`"q1"`, "call", callParams(inst, "push", 1))
	s.request(`"q2"`, "call", callParams(inst, "count"))
	s.waitRunning(1, 2)
	s.request(`"rel"`, "release", map[string]any{"instance": inst})
	s.request(`"after"`, "call", callParams(inst, "count"))
	if m, _ := s.response(`"rel"`, time.Minute); m.Error != nil || string(m.Result) != "null" {
		t.Fatalf("release: %s", m.raw)
	}
	if m, _ := s.response(`"spin"`, time.Minute); m.Error == nil || m.Error.Code != protocol.CodeCancelled {
		t.Fatalf("the running call of a released instance: %s", m.raw)
	}
	for _, id := range []string{`"q1"`, `"q2"`, `"after"`} {
		m, _ := s.response(id, time.Minute)
		if m.Error == nil || m.Error.Code != protocol.CodeInstanceClosed || errData(t, m)["reason"] != "released" {
			t.Fatalf("call %s of a released instance: %s", id, m.raw)
		}
	}
	for i, target := range []string{inst, "inst-never-made-1"} {
		id := fmt.Sprintf(`"again%d"`, i)
		s.request(id, "release", map[string]any{"instance": target})
		if m, _ := s.response(id, time.Minute); m.Error != nil || string(m.Result) != "null" {
			t.Fatalf("release of %s: %s", target, m.raw)
		}
	}
	s.request(`"unknown"`, "call", callParams("inst-never-made-1", "count"))
	m, _ := s.response(`"unknown"`, time.Minute)
	if m.Error == nil || m.Error.Code != protocol.CodeInstanceClosed || !strings.HasPrefix(errData(t, m)["reason"].(string), "no such instance") {
		t.Fatalf("call of an unknown instance: %s", m.raw)
	}
}

// TestInstancePluginBytesOnTheWire: a plugin's output that is not UTF-8
// comes back as {"base64"}, text as {"text"}; log lines carry their level.
func TestInstancePluginBytesOnTheWire(t *testing.T) {
	t.Parallel()
	s := startRaw(t, binPath, "--framing=ndjson", "--cache-dir", instanceCacheDir(t))
	s.startReading()
	s.request(`"i"`, "instantiate", map[string]any{"module": map[string]string{"path": pluginPath(t, "wat/plugin.wat")},
		"capabilities": map[string]any{"log": true}, "limits": hangLimits(nil)})
	m, _ := s.response(`"i"`, time.Minute)
	var res protocol.InstantiateResult
	if m.Error != nil || json.Unmarshal(m.Result, &res) != nil {
		t.Fatalf("instantiate: %s", m.raw)
	}
	s.request(`"bin"`, "call", map[string]any{"instance": res.Instance, "function": "echo", "input": map[string]string{"base64": "/wBhwyg="}})
	if m, _ := s.response(`"bin"`, time.Minute); !strings.Contains(string(m.Result), `"output":{"base64":"/wBhwyg="}`) {
		t.Fatalf("binary echo: %s", m.raw)
	}
	s.request(`"txt"`, "call", map[string]any{"instance": res.Instance, "function": "echo", "input": "héllo"})
	if m, _ := s.response(`"txt"`, time.Minute); !strings.Contains(string(m.Result), `"output":{"text":"héllo"}`) ||
		!strings.HasPrefix(string(m.Result), `{"values":[{"type":"i32","value":0}],`) {
		t.Fatalf("text echo: %s", m.raw)
	}
	// Per-call limits: outputBytes cuts this call's output only.
	s.request(`"cut"`, "call", map[string]any{"instance": res.Instance, "function": "greet", "input": "Ada",
		"limits": map[string]uint64{"outputBytes": 5}})
	if m, _ := s.response(`"cut"`, time.Minute); !strings.Contains(string(m.Result), `"output":{"text":"Hello"},"outputTruncated":true`) {
		t.Fatalf("greet under outputBytes 5: %s", m.raw)
	}
	s.request(`"whole"`, "call", map[string]any{"instance": res.Instance, "function": "greet", "input": "Ada"})
	if m, _ := s.response(`"whole"`, time.Minute); !strings.Contains(string(m.Result), `"output":{"text":"Hello, Ada"},"outputTruncated":false`) {
		t.Fatalf("greet after a call with its own outputBytes: %s", m.raw)
	}
	s.request(`"logs"`, "call", map[string]any{"instance": res.Instance, "function": "logs"})
	_, msgs := s.response(`"logs"`, time.Minute)
	var levels []string
	for _, m := range msgs {
		var p struct {
			ID    string `json:"id"`
			Level string `json:"level"`
			Line  string `json:"line"`
		}
		if m.Method == "log" && json.Unmarshal(m.Params, &p) == nil && p.ID == "logs" {
			levels = append(levels, p.Level+"="+p.Line)
		}
	}
	if strings.Join(levels, ",") != "info=hello from info,warn=careful: warn" {
		t.Fatalf("log notifications: %q", levels)
	}
}

// TestInstanceHostileParams: every malformed instantiate, call and release
// is -32602 naming its field, and the sidecar keeps serving.
func TestInstanceHostileParams(t *testing.T) {
	t.Parallel()
	s := startRaw(t, binPath, "--framing=ndjson")
	s.startReading()
	inst := rawInstance(t, s, `"i"`)
	mod := map[string]string{"wat": statefulWAT}
	cases := []struct {
		method string
		params any
		field  string // the message starts with it
	}{
		{"call", []int{1}, "params: "},
		{"call", map[string]any{"function": "count"}, "instance: "},
		{"call", map[string]any{"instance": 7, "function": "count"}, "instance: must be a string"},
		{"call", map[string]any{"instance": "", "function": "count"}, "instance: "},
		{"call", map[string]any{"instance": inst}, "function: "},
		{"call", map[string]any{"instance": inst, "function": []int{}}, "function: must be a string"},
		{"call", map[string]any{"instance": inst, "function": "count", "input": 5}, "input: "},
		{"call", map[string]any{"instance": inst, "function": "count", "input": map[string]string{"base64": "%%"}}, "input: base64"},
		{"call", map[string]any{"instance": inst, "function": "push", "args": "1"}, "args: must be an array"},
		{"call", map[string]any{"instance": inst, "function": "push", "args": []any{"x"}}, "args[0]: "},
		{"call", map[string]any{"instance": inst, "function": "count", "limits": 5}, "limits: must be an object"},
		{"call", map[string]any{"instance": inst, "function": "count", "limits": map[string]any{"memoryBytes": 5}}, "limits.memoryBytes: fixed at instantiate (only fuel, timeoutMs, logBytes, outputBytes apply to a call)"},
		{"call", map[string]any{"instance": inst, "function": "count", "limits": map[string]any{"varBytes": 5}}, "limits.varBytes: fixed at instantiate"},
		{"call", map[string]any{"instance": inst, "function": "count", "limits": map[string]any{"fuel": -1}}, "limits.fuel: "},
		{"call", map[string]any{"instance": inst, "function": "count", "limits": map[string]any{"timeoutMs": "soon"}}, "limits.timeoutMs: "},
		{"call", map[string]any{"instance": inst, "function": "count", "limits": map[string]any{"fuell": 1}}, "limits.fuell: unknown field"},
		{"call", map[string]any{"instance": inst, "function": "count", "extra": 1}, "extra: unknown field"},
		{"instantiate", map[string]any{}, "module: "},
		{"instantiate", map[string]any{"module": mod, "config": []int{}}, "config: must be an object"},
		{"instantiate", map[string]any{"module": mod, "config": map[string]any{"k": 1}}, "config.k: must be a string"},
		{"instantiate", map[string]any{"module": mod, "limits": map[string]any{"varBytes": 0}}, "limits.varBytes: "},
		{"instantiate", map[string]any{"module": mod, "limits": map[string]any{"varBytes": 1 << 40}}, "limits.varBytes: must be in [1, 67108864]"},
		{"instantiate", map[string]any{"module": mod, "limits": map[string]any{"varBytes": "x"}}, "limits.varBytes: must be an integer"},
		{"instantiate", map[string]any{"module": mod, "limits": map[string]any{"memoryBytes": true}}, "limits.memoryBytes: "},
		{"instantiate", map[string]any{"module": mod, "capabilities": map[string]any{"log": "yes"}}, "capabilities.log: "},
		{"instantiate", map[string]any{"module": mod, "function": "x"}, "function: unknown field"},
		{"release", map[string]any{}, "instance: "},
		{"release", map[string]any{"instance": []string{inst}}, "instance: must be a string"},
		{"release", "inst", "params: "},
		{"run", map[string]any{"module": mod, "function": "count", "config": map[string]any{"k": false}}, "config.k: must be a string"},
		{"run", map[string]any{"module": mod, "function": "count", "input": []int{1}}, "input: "},
	}
	for i, c := range cases {
		id := fmt.Sprintf(`"bad%d"`, i)
		s.request(id, c.method, c.params)
		m, _ := s.response(id, time.Minute)
		if m.Error == nil || m.Error.Code != protocol.CodeInvalidParams || !strings.HasPrefix(m.Error.Message, c.field) {
			t.Errorf("%s %v: %s; want -32602 starting %q", c.method, c.params, m.raw, c.field)
		}
	}
	s.request(`"ok"`, "call", callParams(inst, "push", 3))
	if m, _ := s.response(`"ok"`, time.Minute); resultI32(t, m) != 0 {
		t.Fatalf("after the hostile frames (a bad call must not run): %s", m.raw)
	}
}

// TestInstantiateNotificationsAndCancel: the log lines of a start function
// carry the instantiate's id, and a cancelled instantiate (an endless
// start function) leaves no instance behind.
func TestInstantiateNotificationsAndCancel(t *testing.T) {
	t.Parallel()
	s := startRaw(t, binPath, "--framing=ndjson")
	s.startReading()
	logStart := `(module
	  (import "host" "log" (func $log (param i32 i32)))
	  (memory (export "memory") 1)
	  (data (i32.const 0) "starting")
	  (func $s (call $log (i32.const 0) (i32.const 8)))
	  (start $s)
	  (func (export "run")))`
	s.request(`"log"`, "instantiate", map[string]any{"module": map[string]string{"wat": logStart},
		"capabilities": map[string]any{"log": true}, "limits": hangLimits(nil)})
	m, msgs := s.response(`"log"`, time.Minute)
	if m.Error != nil || !strings.Contains(string(m.Result), `"logLines":1`) {
		t.Fatalf("instantiate with a logging start function: %s", m.raw)
	}
	if lines := checkLogOrder(t, msgs, `"log"`); len(lines) != 1 || lines[0] != "starting" {
		t.Fatalf("log lines of instantiation: %q", lines)
	}

	s.request(`"spin"`, "instantiate", map[string]any{"module": map[string]string{"path": fixture("start_spin.wat")},
		"limits": hangLimits(map[string]uint64{"fuel": hugeFuel})})
	s.waitRunning(1, 0)
	s.notify("$/cancelRequest", map[string]any{"id": "spin"})
	m, _ = s.response(`"spin"`, time.Minute)
	if m.Error == nil || m.Error.Code != protocol.CodeCancelled {
		t.Fatalf("cancelled instantiate: %s", m.raw)
	}
	s.request(`"st"`, "stats", nil)
	m, _ = s.response(`"st"`, time.Minute)
	if !strings.Contains(string(m.Result), `"instances":{"live":1,"max":64,"created":1,"evicted":0}`) {
		t.Fatalf("stats after a cancelled instantiate: %s", m.raw)
	}
}

// TestInstanceShutdownAndEOF: shutdown waits for a call in flight and the
// calls queued behind it, and answers each; the end of input (no
// shutdown) cancels a running call and those queued behind it. Every
// request gets exactly one response.
func TestInstanceShutdownAndEOF(t *testing.T) {
	t.Parallel()
	t.Run("shutdown", func(t *testing.T) {
		t.Parallel()
		s := startRaw(t, binPath, "--framing=ndjson")
		s.startReading()
		inst := rawInstance(t, s, `"i"`)
		work := callParams(inst, "work", "1000000000")
		work["limits"] = map[string]uint64{"fuel": hugeFuel}
		s.request(`"work"`, "call", work)
		s.waitRunning(1, 0)
		s.request(`"q"`, "call", callParams(inst, "push", 5))
		s.request(`"down"`, "shutdown", nil)
		s.request(`"late"`, "call", callParams(inst, "count"))
		_, msgs := s.response(`"down"`, 5*time.Minute)
		seen := map[string]*message{}
		for _, m := range msgs {
			if m.isResponse() {
				if seen[m.idKey()] != nil {
					t.Fatalf("two responses to %s", m.idKey())
				}
				seen[m.idKey()] = m
			}
		}
		if m := seen[`"work"`]; m == nil || m.Error != nil {
			t.Fatalf("the running call, before shutdown's answer: %v", m)
		}
		if m := seen[`"q"`]; m == nil || resultI32(t, m) != 0 {
			t.Fatalf("the queued call, before shutdown's answer: %v", m)
		}
		if m, _ := s.response(`"late"`, time.Minute); m.Error == nil || m.Error.Code != protocol.CodeInvalidRequest {
			t.Fatalf("a call after shutdown: %s", m.raw)
		}
	})
	t.Run("eof", func(t *testing.T) {
		t.Parallel()
		s := startRaw(t, binPath, "--framing=ndjson")
		s.startReading()
		inst := rawInstance(t, s, `"i"`)
		spin := callParams(inst, "spin")
		spin["limits"] = map[string]uint64{"fuel": hugeFuel}
		s.request(`"spin"`, "call", spin)
		s.waitRunning(1, 0)
		s.request(`"q"`, "call", callParams(inst, "count"))
		_ = s.stdin.Close() // what was read before the end is still dispatched
		if code, _, killed := s.wait(30 * time.Second); killed || code != 0 {
			t.Fatalf("sidecar after EOF: exit %d, killed %v", code, killed)
		}
		for _, id := range []string{`"spin"`, `"q"`} {
			m, _ := s.response(id, time.Second)
			if m.Error == nil || m.Error.Code != protocol.CodeCancelled {
				t.Fatalf("%s after EOF: %s", id, m.raw)
			}
		}
	})
}

// wasiInstanceWAT writes to stdout through WASI and can exit.
const wasiInstanceWAT = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "hi\n")
  (func (export "say") (result i32)
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 3))
    (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
  (func (export "quit") (call $proc_exit (i32.const 3))))`

// TestInstanceWASIOutputAndExit: a WASI instance's writes are `output`
// notifications of the call that made them and its result's stdout, call
// after call; a proc_exit ends the call with its status and closes the
// instance.
func TestInstanceWASIOutputAndExit(t *testing.T) {
	t.Parallel()
	s := startRaw(t, binPath, "--framing=ndjson")
	s.startReading()
	s.request(`"i"`, "instantiate", map[string]any{"module": map[string]string{"wat": wasiInstanceWAT},
		"capabilities": map[string]any{"wasi": true}, "limits": hangLimits(nil)})
	m, _ := s.response(`"i"`, time.Minute)
	var res protocol.InstantiateResult
	if m.Error != nil || json.Unmarshal(m.Result, &res) != nil {
		t.Fatalf("instantiate: %s", m.raw)
	}
	for _, id := range []string{"say1", "say2"} {
		s.request(`"`+id+`"`, "call", callParams(res.Instance, "say"))
		m, msgs := s.response(`"`+id+`"`, time.Minute)
		if m.Error != nil || !strings.Contains(string(m.Result), `"stdout":{"text":"hi\n"}`) || !strings.Contains(string(m.Result), `"exitCode":0`) {
			t.Fatalf("%s: %s", id, m.raw)
		}
		var pieces []string
		for _, n := range msgs {
			var p protocol.OutputParams
			if n.Method == "output" && json.Unmarshal(n.Params, &p) == nil && string(p.ID.Str) == id {
				pieces = append(pieces, p.Stream+":"+string(p.Data))
			}
		}
		if strings.Join(pieces, "") != "stdout:hi\n" {
			t.Fatalf("%s: output notifications %q", id, pieces)
		}
	}
	s.request(`"quit"`, "call", callParams(res.Instance, "quit"))
	if m, _ := s.response(`"quit"`, time.Minute); m.Error != nil || !strings.Contains(string(m.Result), `"exitCode":3`) {
		t.Fatalf("quit: %s", m.raw)
	}
	s.request(`"after"`, "call", callParams(res.Instance, "say"))
	m, _ = s.response(`"after"`, time.Minute)
	if m.Error == nil || m.Error.Code != protocol.CodeInstanceClosed || errData(t, m)["reason"] != `closed after the guest exited with status 3 in a call of "quit"` {
		t.Fatalf("a call after proc_exit: %s", m.raw)
	}
}

// TestInstantiateRefusals: instantiate fails with the run error kinds and
// leaves no instance: refused imports of the ABI, a missing grant, a cap
// below the plugin kernel's memory, a start function past its deadline.
func TestInstantiateRefusals(t *testing.T) {
	t.Parallel()
	s := startRaw(t, binPath, "--framing=ndjson", "--cache-dir", instanceCacheDir(t))
	s.startReading()
	plugin := func(imports string) map[string]string {
		return map[string]string{"wat": "(module " + imports + ` (memory (export "memory") 1) (func (export "run") (result i32) (i32.const 0)))`}
	}
	cases := []struct {
		name   string
		params map[string]any
		code   int64
		data   string
	}{
		{"http_request", map[string]any{"module": plugin(`(import "extism:host/env" "http_request" (func (param i64 i64) (result i64)))`)},
			5, `"module":"extism:host/env","name":"http_request"`},
		{"user host function", map[string]any{"module": plugin(`(import "extism:host/user" "lookup" (func (param i64) (result i64)))`)},
			5, `"module":"extism:host/user","name":"lookup"`},
		{"WASI without the grant", map[string]any{"module": map[string]string{"path": pluginPath(t, "go/plugin.wasm")},
			"capabilities": map[string]any{"log": true}}, 5, `"module":"wasi_snapshot_preview1"`},
		{"cap below the kernel", map[string]any{"module": plugin(`(import "extism:host/env" "alloc" (func (param i64) (result i64)))`),
			"limits": map[string]uint64{"memoryBytes": 32 << 10}}, 4, `"resource":"memory"`},
		{"start function past its deadline", map[string]any{"module": map[string]string{"path": fixture("start_spin.wat")},
			"limits": map[string]uint64{"fuel": hugeFuel, "timeoutMs": 100}}, 3, `"kind":"timeout"`},
	}
	for i, c := range cases {
		id := fmt.Sprintf(`"r%d"`, i)
		if _, ok := c.params["limits"]; !ok {
			c.params["limits"] = hangLimits(nil)
		}
		s.request(id, "instantiate", c.params)
		m, _ := s.response(id, 5*time.Minute)
		if m.Error == nil || m.Error.Code != c.code || !strings.Contains(string(m.Error.Data), c.data) {
			t.Errorf("%s: %s; want code %d with %s", c.name, m.raw, c.code, c.data)
		}
	}
	s.request(`"st"`, "stats", nil)
	if m, _ := s.response(`"st"`, time.Minute); !strings.Contains(string(m.Result), `"instances":{"live":0,"max":64,"created":0,"evicted":0}`) {
		t.Fatalf("stats after refused instantiates: %s", m.raw)
	}
}

// TestInstanceVarBytes: limits.varBytes reaches the plugin's vars: a
// var_set past it is memory_limit_exceeded (resource vars) and closes the
// instance; within it the var persists.
func TestInstanceVarBytes(t *testing.T) {
	t.Parallel()
	s := startRaw(t, binPath, "--framing=ndjson")
	s.startReading()
	for _, tc := range []struct {
		varBytes uint64
		ok       bool
	}{{8, false}, {4096, true}} { // the count var: a 1-byte key and an 8-byte value, plus the engine's per-var charge
		id := fmt.Sprintf(`"i%d"`, tc.varBytes)
		s.request(id, "instantiate", map[string]any{"module": map[string]string{"path": pluginPath(t, "wat/plugin.wat")},
			"capabilities": map[string]any{"log": true}, "limits": hangLimits(map[string]uint64{"varBytes": tc.varBytes})})
		m, _ := s.response(id, time.Minute)
		var res protocol.InstantiateResult
		if m.Error != nil || json.Unmarshal(m.Result, &res) != nil {
			t.Fatalf("instantiate: %s", m.raw)
		}
		for k := range 2 {
			cid := fmt.Sprintf(`"c%d-%d"`, tc.varBytes, k)
			s.request(cid, "call", map[string]any{"instance": res.Instance, "function": "count"})
			m, _ := s.response(cid, time.Minute)
			var out struct{ Output protocol.Bytes }
			_ = json.Unmarshal(m.Result, &out)
			switch want := []byte{byte(k + 1), 0, 0, 0, 0, 0, 0, 0}; {
			case tc.ok && string(out.Output) != string(want):
				t.Fatalf("count %d under varBytes %d: %s, want the output %v", k, tc.varBytes, m.raw, want)
			case !tc.ok && k == 0:
				if d := errData(t, m); m.Error.Code != 4 || d["resource"] != "vars" || d["instanceClosed"] != true {
					t.Fatalf("count under varBytes %d: %s", tc.varBytes, m.raw)
				}
			case !tc.ok && (m.Error == nil || m.Error.Code != protocol.CodeInstanceClosed):
				t.Fatalf("a call after var_set past varBytes: %s", m.raw)
			}
		}
	}
}
