package main

// A fresh sidecar's first requests, all at once: every kind of request
// (plain runs with host imports, WASI runs, plugin runs, instantiate and
// call, compile, runs by id, stats, cancellations) written in one burst
// before the sidecar has answered anything, under --max-concurrency 2..8
// (and in every third sidecar with instances and modules evicted at once).
// The engine builds its shared objects (host function types, the WASI
// shim and its linker, the plugin kernel, the compile cache) on first use,
// so these are the requests that race to build them; one such race
// aborted the process in CI (the shared function types of 2c616c9: the
// binary before that fix aborted in 1 of 120 sidecars here). Every request
// must get exactly one answer of an allowed outcome, and the sidecar must
// exit cleanly. `go test ./cmd/sandboxd -run FreshSidecarBurst
// -burst-rounds 200` runs many more sidecars, and -burst-bin runs another
// build of the binary (e.g. go build -race).

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

var (
	burstRounds = flag.Int("burst-rounds", 0, "fresh sidecars in TestFreshSidecarBurst (0: 6, or 2 with -short)")
	burstBin    = flag.String("burst-bin", "", "the sidecar binary TestFreshSidecarBurst runs (default: the one built for the tests)")
)

// burstReq is one request of the burst and the outcomes it may have: ""
// for a result, else the error's data.kind, or "code:N" for a protocol
// error without a kind.
type burstReq struct {
	method string
	params any
	want   []string
}

func TestFreshSidecarBurst(t *testing.T) {
	rounds := *burstRounds
	if rounds == 0 {
		rounds = 6
		if testing.Short() {
			rounds = 2
		}
	}
	bin := binPath
	if *burstBin != "" {
		bin = *burstBin
	}
	read := func(path string) []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	guestC := read(wasiGuest("guest_c.wasm"))
	guestRust := wasiGuest("guest_rust.wasm")
	goPlugin := fixture("../plugins/go/plugin.wasm")
	watPlugin := fixture("../plugins/wat/plugin.wat")
	idOf := func(b []byte) string { s := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(s[:]) }
	guestCID := idOf(guestC)
	goPluginID := idOf(read(goPlugin))
	logger := string(read(fixture("logger.wat")))
	path := func(p string) map[string]string { return map[string]string{"path": p} }
	long := map[string]uint64{"timeoutMs": 60000, "compileTimeoutMs": 300000, "memoryBytes": 256 << 20} // hang bounds
	reqs := []burstReq{
		{"run", runParams(fixture("well_behaved.wat"), "add", []any{2, 40}, nil, nil), []string{""}},
		{"run", map[string]any{"module": map[string]string{"wat": logger}, "capabilities": map[string]any{"log": true}}, []string{""}},
		{"run", runParams(fixture("random_roller.wat"), "roll", nil, nil, map[string]any{"random": map[string]any{"seed": 42}}), []string{""}},
		{"run", runParams(fixture("clock.wat"), "run", nil, nil, map[string]any{"clock": true}), []string{""}},
		{"run", map[string]any{"module": map[string]string{"wasm": base64.StdEncoding.EncodeToString(guestC)}, "limits": long,
			"capabilities": map[string]any{"wasi": map[string]any{"args": []string{"echo"}, "stdin": "hi"}}}, []string{""}},
		{"run", runParams(guestRust, "", nil, long, map[string]any{"wasi": map[string]any{"args": []string{"echo"}, "stdin": "hi"}}), []string{""}},
		{"run", map[string]any{"module": map[string]string{"id": guestCID}, "limits": long,
			"capabilities": map[string]any{"wasi": map[string]any{"args": []string{"env"}, "env": map[string]string{"A": "1"}}}}, []string{"", "invalid_module"}},
		{"run", map[string]any{"module": path(watPlugin), "function": "greet", "input": "Ada", "capabilities": map[string]any{"log": true}}, []string{""}},
		{"run", map[string]any{"module": path(goPlugin), "function": "greet", "input": "Ada", "limits": long,
			"capabilities": map[string]any{"log": true, "wasi": true}}, []string{""}},
		{"run", map[string]any{"module": map[string]string{"id": goPluginID}, "function": "echo", "input": "x", "limits": long,
			"capabilities": map[string]any{"log": true, "wasi": true}}, []string{"", "invalid_module"}},
		{"instantiate", map[string]any{"module": path(watPlugin), "capabilities": map[string]any{"log": true}}, []string{""}},
		{"instantiate", map[string]any{"module": path(goPlugin), "limits": long, "capabilities": map[string]any{"log": true, "wasi": true}}, []string{""}},
		{"instantiate", map[string]any{"module": path(fixture("well_behaved.wat"))}, []string{""}},
		{"compile", map[string]any{"module": path(wasiGuest("guest_c.wasm"))}, []string{""}},
		{"compile", map[string]any{"module": map[string]string{"wat": logger}}, []string{""}},
		{"run", runParams(fixture("infinite_loop.wat"), "", nil, map[string]uint64{"fuel": hugeFuel, "timeoutMs": 30}, nil), []string{"timeout"}},
		{"run", runParams(fixture("memory_bomb.wat"), "", nil, map[string]uint64{"memoryBytes": 4 << 20}, nil), []string{"memory_limit_exceeded"}},
		{"run", runParams(fixture("traps.wat"), "div_by_zero", nil, nil, nil), []string{"trap"}},
		{"run", runParams(fixture("disallowed_import.wat"), "", nil, nil, nil), []string{"disallowed_import"}},
		{"run", runParams(fixture("infinite_loop.wat"), "", nil, map[string]uint64{"fuel": hugeFuel, "timeoutMs": 60000}, nil), []string{"cancelled"}},
		{"stats", nil, []string{""}},
	}
	const cancelled = 19 // the index of the request cancelled at once
	cacheDir := t.TempDir()
	for round := range rounds {
		conc := 2 + round%7
		args := []string{"--max-concurrency", fmt.Sprint(conc)}
		if round%2 == 1 {
			args = append(args, "--cache-dir", cacheDir) // later rounds load from disk
		}
		// Every third sidecar also evicts: instances idle for a
		// millisecond, one compiled module kept (runs of others still hold
		// theirs), two instances at most.
		harsh := round%3 == 2
		if harsh {
			args = append(args, "--instance-idle", "1ms", "--cache-entries", "1", "--max-instances", "2")
		}
		t.Run(fmt.Sprintf("round%d-conc%d-harsh%v", round, conc, harsh), func(t *testing.T) {
			burstRound(t, bin, args, reqs, cancelled, harsh)
		})
		if t.Failed() {
			return
		}
	}
}

func burstRound(t *testing.T, bin string, args []string, reqs []burstReq, cancelled int, harsh bool) {
	s := startRaw(t, bin, args...)
	var frames strings.Builder
	frame := func(m map[string]any) {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&frames, "Content-Length: %d\r\n\r\n%s", len(b), b)
	}
	want := map[string][]string{}
	for i, r := range reqs {
		m := map[string]any{"jsonrpc": "2.0", "id": i, "method": r.method}
		if r.params != nil {
			m["params"] = r.params
		}
		frame(m)
		want[fmt.Sprint(i)] = r.want
		if harsh && r.method == "instantiate" {
			want[fmt.Sprint(i)] = []string{"", "code:-32002"} // too many instances
		}
		if i == cancelled {
			frame(map[string]any{"jsonrpc": "2.0", "method": "$/cancelRequest", "params": map[string]any{"id": i}})
		}
	}
	s.sendBytes([]byte(frames.String())) // one write: the whole burst before any answer
	s.startReading()

	// Each instance, once made, gets calls (and one a release) while the
	// rest of the burst still runs.
	next := len(reqs)
	send := func(method string, params any, outcomes ...string) {
		id := fmt.Sprint(next)
		next++
		if harsh && method == "call" {
			outcomes = append(outcomes, "code:-32001") // evicted
		}
		want[id] = outcomes
		s.request(id, method, params)
	}
	answers := map[string]*message{}
	for i, r := range reqs {
		if r.method != "instantiate" {
			continue
		}
		m := burstResponse(t, s, fmt.Sprint(i))
		answers[fmt.Sprint(i)] = m
		var res struct {
			Instance string `json:"instance"`
			Plugin   bool   `json:"plugin"`
		}
		if harsh && m.Error != nil && m.Error.Code == -32002 {
			continue
		}
		if m.Error != nil || json.Unmarshal(m.Result, &res) != nil || res.Instance == "" {
			t.Fatalf("instantiate %d: %s", i, m.raw)
		}
		in := res.Instance
		if res.Plugin {
			// A release does not wait for the calls before it: those
			// still waiting are answered -32001, a running one cancelled.
			send("call", map[string]any{"instance": in, "function": "greet", "input": "Ada"}, "", "cancelled", "code:-32001")
			send("call", map[string]any{"instance": in, "function": "count"}, "", "cancelled", "code:-32001")
			send("call", map[string]any{"instance": in, "function": "echo", "input": "x"}, "", "cancelled", "code:-32001")
			send("release", map[string]any{"instance": in}, "")
			send("call", map[string]any{"instance": in, "function": "greet"}, "code:-32001")
		} else {
			send("call", map[string]any{"instance": in, "function": "add", "args": []any{1, 2}}, "")
			send("call", map[string]any{"instance": in, "function": "fib", "args": []any{20}}, "")
		}
	}

	// Exactly one response for every request, each an allowed outcome.
	for id, outcomes := range want {
		m := answers[id]
		if m == nil {
			m = burstResponse(t, s, id)
		}
		got := m.kind()
		if m.Error != nil && got == "" {
			got = fmt.Sprintf("code:%d", m.Error.Code)
		}
		ok := false
		for _, o := range outcomes {
			ok = ok || o == got
		}
		if !ok {
			t.Errorf("request %s: outcome %q, want one of %q: %s", id, got, outcomes, trunc(m.raw))
		}
	}
	s.request(`"bye"`, "shutdown", nil)
	s.response(`"bye"`, 60*time.Second)
	s.notify("exit", nil)
	if code, _, killed := s.wait(60 * time.Second); code != 0 || killed {
		t.Fatalf("exit after shutdown: status %d (killed %v), want 0; stderr:\n%s", code, killed, s.stderr.String())
	}
	seen := s.responsesByID()
	for id, n := range seen {
		if n != 1 {
			t.Errorf("request %s answered %d times", id, n)
		}
	}
	if len(seen) != len(want)+1 {
		t.Errorf("%d requests answered, sent %d", len(seen), len(want)+1)
	}
	if e := s.stderr.String(); strings.Contains(e, "panic") || strings.Contains(e, "fatal") || strings.Contains(e, "DATA RACE") {
		t.Errorf("stderr:\n%s", e)
	}
}

// burstResponse waits for the response to id. A sidecar that died fails
// the test with its stderr; one that gives no answer within the hang bound
// is made to print its goroutines (SIGQUIT) first.
func burstResponse(t *testing.T, s *rawSidecar, id string) *message {
	t.Helper()
	var found *message
	ok := s.waitUntil(120*time.Second, func() bool { found = s.claimResponse(id); return found != nil })
	n, end := len(s.msgs), s.readErr
	var answered []string
	for _, m := range s.msgs {
		if m.isResponse() {
			answered = append(answered, m.idKey())
		}
	}
	s.mu.Unlock()
	if !ok {
		what := "the sidecar's output ended"
		if end == nil {
			what = "none within 120 s"
			_ = s.cmd.Process.Signal(syscall.SIGQUIT) // its goroutines, on stderr
		}
		code, _, _ := s.wait(10 * time.Second)
		t.Fatalf("no response to request %s: %s (%d messages read, answers to %v; exit status %d); stderr:\n%s",
			id, what, n, answered, code, s.stderr.String())
	}
	return found
}
