package rpc_test

// Preparing and running jobs (execute.go): results, errors, logs, compiles.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/internal/rpctest"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

func TestServerRunResult(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 2})
	h.run(`1`, "values", nil)
	m, _ := h.response(`1`)
	if m.Error != nil {
		t.Fatalf("error %+v", m.Error)
	}
	var res struct {
		Values []json.RawMessage `json:"values"`
		rpc.RunResult
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(m.Result, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"values", "fuelConsumed", "peakMemoryBytes", "elapsedMicros", "queuedMicros", "moduleId", "logLines", "logTruncated"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("run result lacks %q", k)
		}
	}
	if err := json.Unmarshal(m.Result, &res); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"type":"i32","value":-1}`,
		`{"type":"i64","value":"-9223372036854775808"}`,
		`{"type":"f32","value":-0.0,"bits":"0x80000000"}`,
		`{"type":"f64","value":"NaN","bits":"0x7ff8000000000123"}`,
	}
	if len(res.Values) != len(want) {
		t.Fatalf("values %s", raw["values"])
	}
	for i := range want {
		if string(res.Values[i]) != want[i] {
			t.Errorf("value %d = %s, want %s", i, res.Values[i], want[i])
		}
	}
	if res.ModuleID != rpctest.ModuleID || res.FuelConsumed != 4 || res.PeakMemoryBytes != 65536 || res.ElapsedMicros != 31 || res.QueuedMicros < 0 {
		t.Errorf("result %+v", res.RunResult)
	}

	// Arguments are decoded against the export's parameter types.
	h.run(`2`, "echo", map[string]any{"args": []any{4294967295, "18446744073709551615",
		map[string]any{"type": "f32", "bits": "0x7fc00001"}, "-0"}})
	m, _ = h.response(`2`)
	if m.Error != nil {
		t.Fatalf("echo: %+v", m.Error)
	}
	_ = json.Unmarshal(m.Result, &res)
	wantEcho := []string{
		`{"type":"i32","value":-1}`,
		`{"type":"i64","value":"-1"}`,
		`{"type":"f32","value":"NaN","bits":"0x7fc00001"}`,
		`{"type":"f64","value":-0.0,"bits":"0x8000000000000000"}`,
	}
	for i := range wantEcho {
		if i >= len(res.Values) || string(res.Values[i]) != wantEcho[i] {
			t.Errorf("echo value %d = %s, want %s", i, res.Values, wantEcho[i])
			break
		}
	}
	// A wrong argument is -32602 naming it.
	h.run(`3`, "echo", map[string]any{"args": []any{1, true, 1, 1}})
	m, _ = h.response(`3`)
	wantError(t, m, rpc.CodeInvalidParams, "args[1]: expected i64, got true")
	// Invalid params never reach the engine.
	h.run(`4`, "run", map[string]any{"limits": map[string]any{"fuel": 0}})
	m, _ = h.response(`4`)
	wantError(t, m, rpc.CodeInvalidParams, "limits.fuel: must be > 0")
	h.request(`5`, rpc.MethodRun, map[string]any{"module": map[string]any{}})
	m, _ = h.response(`5`)
	wantError(t, m, rpc.CodeInvalidParams, "module: give exactly one of wat, wasm, id, path")
	h.request(`6`, rpc.MethodRun, nil)
	m, _ = h.response(`6`)
	wantError(t, m, rpc.CodeInvalidParams, "params: must be an object")
	// An empty result list is [].
	h.run(`7`, "log:0", nil)
	m, _ = h.response(`7`)
	if m.Error != nil || string(raw["values"]) == "" || !strings.Contains(string(m.Result), `"values":[]`) {
		t.Errorf("log:0 result %s", m.Result)
	}
}

func TestServerCompile(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 1})
	h.request(`1`, rpc.MethodCompile, map[string]any{"module": map[string]any{"wat": "(module)"}})
	m, _ := h.response(`1`)
	if m.Error != nil {
		t.Fatal(m.Error)
	}
	var res rpc.CompileResult
	_ = json.Unmarshal(m.Result, &res)
	if res.ModuleID != rpctest.ModuleID || len(res.Exports) != len(rpctest.Exports) || len(res.Imports) != 1 || res.Cached || res.CompileMicros != 5 {
		t.Errorf("compile result %s", m.Result)
	}
	h.request(`2`, rpc.MethodCompile, map[string]any{"module": map[string]any{"id": rpctest.UnknownModuleID}})
	m, _ = h.response(`2`)
	wantError(t, m, 6, rpctest.UnknownModuleID)
	if d := errorData(t, m); d["kind"] != "invalid_module" {
		t.Errorf("data %v", d)
	}
	h.request(`3`, rpc.MethodCompile, map[string]any{"module": map[string]any{"wat": "x"}, "function": "run"})
	m, _ = h.response(`3`)
	wantError(t, m, rpc.CodeInvalidParams, "function: unknown field")
	h.request(`4`, "nosuchmethod", nil)
	m, _ = h.response(`4`)
	wantError(t, m, rpc.CodeMethodNotFound, `unknown method "nosuchmethod" (methods: initialize, run, compile, instantiate, call, release, eval, stats, shutdown)`)
}

func TestServerRunErrorKinds(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 2})
	for i, info := range protocol.Kinds() {
		id := strconv.Itoa(100 + i)
		h.run(id, "fail:"+string(info.Kind), nil)
		m, _ := h.response(id)
		wantError(t, m, int64(info.RPCCode), string(info.Kind))
		d := errorData(t, m)
		if d["kind"] != string(info.Kind) {
			t.Errorf("%s: data.kind %v", info.Kind, d["kind"])
		}
		want := map[string]any{}
		switch info.Kind {
		case protocol.KindFuelExhausted:
			want["budget"] = 1000.0
		case protocol.KindTimeout:
			want["timeoutMs"] = 250.0
		case protocol.KindMemoryLimitExceeded:
			want["limit"], want["resource"], want["requested"] = 65536.0, "memory", 131072.0
		case protocol.KindDisallowedImport:
			want["module"], want["name"] = "wasi_snapshot_preview1", "fd_write"
		case protocol.KindExport:
			want["function"] = "nope"
		case protocol.KindTrap:
			want["trapCode"] = "unreachable"
		}
		if info.Kind != protocol.KindInvalidModule && info.Kind != protocol.KindDisallowedImport {
			want["fuelConsumed"], want["peakMemoryBytes"] = 77.0, 65536.0
		} else if _, ok := d["fuelConsumed"]; ok {
			t.Errorf("%s: fuelConsumed without a store: %v", info.Kind, d)
		}
		for k, v := range want {
			if d[k] != v {
				t.Errorf("%s: data.%s = %v, want %v", info.Kind, k, d[k], v)
			}
		}
		if info.Kind == protocol.KindTrap {
			frames, _ := json.Marshal(d["frames"])
			if string(frames) != `[{"func":"inner","funcIndex":3,"moduleOffset":66},{"funcIndex":1,"moduleOffset":7}]` {
				t.Errorf("frames %s", frames)
			}
		}
	}
	if protocol.KindCancelled.Info().RPCCode != -32800 {
		t.Errorf("cancelled is not -32800")
	}
	// A plain error is a host error.
	h.run(`200`, "plainerror", nil)
	m, _ := h.response(`200`)
	wantError(t, m, 1, "something broke")
	if d := errorData(t, m); d["kind"] != "host" {
		t.Errorf("data %v", d)
	}
}

func TestServerLogsBeforeResponse(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 4})
	const runs, lines = 8, 200
	for i := 0; i < runs; i++ {
		h.run(strconv.Itoa(i), "log:"+strconv.Itoa(lines), map[string]any{"capabilities": map[string]any{"log": true}})
	}
	nextSeq := map[string]int{}
	answered := map[string]bool{}
	for len(answered) < runs {
		m := h.next(5 * time.Second)
		if m.isResponse() {
			id := string(m.ID)
			if answered[id] {
				t.Fatalf("two responses to %s", id)
			}
			answered[id] = true
			if nextSeq[id] != lines {
				t.Errorf("run %s answered after %d of %d log lines", id, nextSeq[id], lines)
			}
			var res rpc.RunResult
			_ = json.Unmarshal(m.Result, &res)
			if res.LogLines != lines {
				t.Errorf("run %s: logLines %d", id, res.LogLines)
			}
			continue
		}
		if m.Method != rpc.NotifyLog || m.hasID {
			t.Fatalf("unexpected message %+v", m)
		}
		var p struct {
			ID   json.RawMessage `json:"id"`
			Seq  int             `json:"seq"`
			Line string          `json:"line"`
		}
		if err := json.Unmarshal(m.Params, &p); err != nil {
			t.Fatal(err)
		}
		id := string(p.ID)
		if answered[id] {
			t.Errorf("log line %d of run %s after its response", p.Seq, id)
		}
		if p.Seq != nextSeq[id] || p.Line != "line "+strconv.Itoa(p.Seq) {
			t.Errorf("run %s: log seq %d %q, want seq %d", id, p.Seq, p.Line, nextSeq[id])
		}
		nextSeq[id]++
	}
	// Log ids are echoed as sent: a string id too.
	h.run(`"s"`, "log:1", nil)
	m, notes := h.response(`"s"`)
	if m.Error != nil || len(notes) != 1 || !strings.Contains(string(notes[0].Params), `"id":"s"`) {
		t.Errorf("string id logs: %+v %v", m.Error, notes)
	}
}

func TestServerPanicRecovered(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 1})
	for i := 0; i < 3; i++ {
		h.run(`"p"`, "panic", nil)
		m, _ := h.response(`"p"`)
		wantError(t, m, rpc.CodeInternalError, "fake engine panic")
		h.run(`"ok"`, "run", nil)
		if m, _ := h.response(`"ok"`); m.Error != nil {
			t.Fatalf("run after panic: %+v", m.Error)
		}
	}
}

func TestServerManyConcurrentRuns(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 2})
	const n = 100
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				fn := "sleep"
				if i%10 == 0 {
					fn = "log:3"
				}
				h.run(strconv.Itoa(i), fn, nil)
			}
		}(w)
	}
	wg.Wait()
	count := map[string]int{}
	for got := 0; got < n; {
		m := h.next(10 * time.Second)
		if !m.isResponse() {
			continue
		}
		got++
		count[string(m.ID)]++
		if m.Error != nil {
			t.Errorf("run %s: %+v", m.ID, m.Error)
		}
	}
	for i := 0; i < n; i++ {
		if c := count[strconv.Itoa(i)]; c != 1 {
			t.Errorf("run %d answered %d times", i, c)
		}
	}
	h.endsWithNoMore()
}

// TestServerCompileHoldsNoWorker: a run waiting for its module to compile
// holds no run worker, so a run of a module already compiled is answered
// meanwhile (issue 10 item 6: a compile "never delays runs of modules
// already compiled"), and the waiting compile is cancellable.
func TestServerCompileHoldsNoWorker(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 1})
	h.request(`"slow"`, "run", map[string]any{"module": map[string]any{"wat": "compile:gate"}})
	h.waitStarted()
	h.request(`"slow-compile"`, "compile", map[string]any{"module": map[string]any{"wat": "compile:gate"}})
	h.waitStarted()
	h.run(`"cached"`, "run", nil)
	if m, _ := h.response(`"cached"`); m.Error != nil || !strings.Contains(string(m.Result), `"value":42`) {
		t.Fatalf("the cached run: %s", m.Result)
	}
	h.notify("$/cancelRequest", map[string]any{"id": "slow-compile"})
	m, _ := h.response(`"slow-compile"`)
	wantError(t, m, rpc.CodeCancelled, "cancelled")
	close(h.eng.Gate)
	if m, _ := h.response(`"slow"`); m.Error != nil {
		t.Errorf("the slow run after its compile: %+v", m.Error)
	}
}

// TestServerGoClient drives the server with the Go client.
func TestServerGoClient(t *testing.T) {
	eng := rpctest.NewEngine()
	srv, err := rpc.NewServer(eng, rpc.Options{MaxConcurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() {
		err := srv.Serve(context.Background(), inR, outW)
		outW.Close()
		served <- err
	}()
	ctx := context.Background()
	c := sandboxd.New(ctx, outR, inW, false)

	var lines []string
	res, err := c.Run(ctx, sandboxd.RunParams{Module: rpc.ModuleSpec{WAT: sandboxd.Str("(module)")}, Function: "log:3"},
		func(seq int, line string) { lines = append(lines, line) })
	if err != nil || res.LogLines != 3 || strings.Join(lines, "|") != "line 0|line 1|line 2" {
		t.Errorf("run: %+v %v %q", res, err, lines)
	}
	_, err = c.Run(ctx, sandboxd.RunParams{Module: rpc.ModuleSpec{WAT: sandboxd.Str("(module)")}, Function: "fail:timeout"}, nil)
	var ce *sandboxd.Error
	if !errors.As(err, &ce) || ce.Code != 3 || ce.Kind() != "timeout" {
		t.Errorf("timeout run: %v", err)
	}
	// A context that ends cancels the run on the server.
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = c.Run(cctx, sandboxd.RunParams{Module: rpc.ModuleSpec{WAT: sandboxd.Str("(module)")}, Function: "block"}, nil)
	cancel()
	if !errors.As(err, &ce) || ce.Code != -32800 || ce.Kind() != "cancelled" {
		t.Errorf("cancelled run: %v", err)
	}
	cr, err := c.Compile(ctx, rpc.ModuleSpec{Path: sandboxd.Str("x.wat")})
	if err != nil || cr.ModuleID != rpctest.ModuleID {
		t.Errorf("compile: %+v %v", cr, err)
	}
	st, err := c.Stats(ctx)
	if err != nil || st.Runs["ok"] != 1 || st.Runs["timeout"] != 1 || st.Runs["cancelled"] != 1 {
		t.Errorf("stats: %+v %v", st, err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve = %v, want nil after the client's shutdown/exit", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Serve did not return")
	}
}

// evictingEngine is the fake engine whose "compile:gate" module is cached
// when IsCached asks (the question the server used to ask) and evicted
// by the time anything else looks: its Compile waits for the gate (a
// compile), and CompileCached finds nothing.
type evictingEngine struct{ *rpctest.Engine }

func (e evictingEngine) IsCached(protocol.Source) bool { return true }

func (e evictingEngine) CompileCached(src protocol.Source) (rpc.Module, bool) {
	if src.WAT == "compile:gate" {
		return nil, false
	}
	return e.Engine.CompileCached(src)
}

// A small run whose module the engine has is prepared on the dispatcher
// (or on the reader), where nothing may block. The server asked the
// engine whether the module was cached, and then called Compile; but a
// module cached when asked can be evicted before Compile looks (another
// compile finishing under a small --cache-entries or --cache-bytes), and
// a path's file can change in between: Compile then compiled on the
// dispatcher, and cancels, stats and shutdown waited for it. Measured on
// the real binary (--cache-entries 1, runs of a cached 60 KB text
// pipelined with compiles of new modules; red team, issue 14): 12
// compiles of 3-14 ms on the dispatcher in 15 s. The server now takes the
// module from the engine's cache in one step (CompileCached), and anything
// else goes to a goroutine of its own.
//
// TestCachedRunNeverCompilesOnTheDispatcher: a run whose module is
// evicted between the two looks is prepared in a goroutine of its own:
// stats and a cancel behind it are answered while it compiles.
func TestCachedRunNeverCompilesOnTheDispatcher(t *testing.T) {
	for _, follow := range []string{"stats", "cancel"} {
		t.Run(follow, func(t *testing.T) {
			eng := evictingEngine{rpctest.NewEngine()}
			srv, err := rpc.NewServer(eng, rpc.Options{MaxConcurrency: 2})
			if err != nil {
				t.Fatal(err)
			}
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			h := &harness{t: t, srv: srv, eng: eng.Engine, inW: inW, msgs: make(chan *message, 1000), served: make(chan error, 1)}
			go func() {
				h.served <- srv.Serve(context.Background(), inR, outW)
				outW.Close()
			}()
			go h.readLoop(outR)
			gate := eng.Gate
			t.Cleanup(func() {
				select {
				case <-gate:
				default:
					close(gate)
				}
				inW.Close()
				select {
				case <-h.served:
				case <-time.After(10 * time.Second):
					t.Errorf("Serve did not return after the input closed")
				}
			})
			run := map[string]any{"jsonrpc": "2.0", "id": 1, "method": "run",
				"params": map[string]any{"module": map[string]any{"wat": "compile:gate"}, "function": "run"}}
			switch follow {
			case "stats":
				sendTogether(t, h, run, map[string]any{"jsonrpc": "2.0", "id": 2, "method": "stats"})
				if m := responseWithin(t, h, "2", 10*time.Second); m.Error != nil {
					t.Fatalf("stats: %+v", m.Error)
				}
				close(gate)
				if m := responseWithin(t, h, "1", time.Minute); m.Error != nil {
					t.Fatalf("run: %+v", m.Error)
				}
			case "cancel":
				sendTogether(t, h, run, map[string]any{"jsonrpc": "2.0", "method": "$/cancelRequest", "params": map[string]any{"id": 1}})
				m := responseWithin(t, h, "1", 10*time.Second)
				if m.Error == nil || m.Error.Code != protocol.CodeCancelled {
					t.Fatalf("run cancelled while its module compiles: want -32800, got %+v %s", m.Error, m.Result)
				}
			}
		})
	}
}
