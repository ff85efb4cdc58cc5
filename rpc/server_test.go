package rpc_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

// --- a fake engine ---

// fakeEngine implements rpc.Engine. What a run does depends on the function
// name:
//
//	run          returns i32 42
//	values       returns one value of each type, with awkward bits
//	echo         returns its four args (i32, i64, f32, f64)
//	block        reports it started, then waits for its context
//	gate         reports it started, then waits for the gate (or its context)
//	log:N        logs N lines ("line i"), then returns nothing
//	fail:KIND    fails with a *protocol.Error of that kind
//	panic        panics
//	sleep        sleeps a little, then returns i32 1
type fakeEngine struct {
	started chan string   // function names, as runs begin
	gate    chan struct{} // closed to release "gate" runs
	runs    atomic.Int64
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{started: make(chan string, 1000), gate: make(chan struct{})}
}

var fakeExports = []protocol.Export{
	{Name: "run", Kind: "func", Params: []string{}, Results: []string{"i32"}},
	{Name: "values", Kind: "func", Params: []string{}, Results: []string{"i32", "i64", "f32", "f64"}},
	{Name: "echo", Kind: "func", Params: []string{"i32", "i64", "f32", "f64"}, Results: []string{"i32", "i64", "f32", "f64"}},
	{Name: "memory", Kind: "memory", Params: []string{}, Results: []string{}},
}

// fakeModule is the one module of the fake engine.
type fakeModule struct{ info protocol.ModuleInfo }

func (m *fakeModule) Info() *protocol.ModuleInfo { return &m.info }

func (e *fakeEngine) Compile(ctx context.Context, src protocol.Source) (rpc.Module, protocol.CompileInfo, error) {
	if src.ID == "sha256:unknown" {
		return nil, protocol.CompileInfo{}, &protocol.Error{Kind: protocol.KindInvalidModule, Message: "module sha256:unknown was never compiled here"}
	}
	if src.WAT == "compile:gate" { // a slow compile: until the gate opens or ctx ends
		e.started <- "compile"
		select {
		case <-e.gate:
		case <-ctx.Done():
			return nil, protocol.CompileInfo{}, &protocol.Error{Kind: protocol.KindCancelled, Message: "compile cancelled"}
		}
	}
	mod := &fakeModule{protocol.ModuleInfo{
		ID:      "sha256:fake",
		Imports: []protocol.Import{{Module: "host", Name: "log", Kind: "func", Type: "(i32, i32) -> ()"}},
		Exports: fakeExports,
	}}
	return mod, protocol.CompileInfo{Cached: src.ID != "", Elapsed: 5 * time.Microsecond}, nil
}

// CompileCached: every module is in the cache, except the slow compile's
// and the unknown id, so runs take the server's inline paths (prepared,
// and run when nothing else waits, where they were read).
func (e *fakeEngine) CompileCached(src protocol.Source) (rpc.Module, bool) {
	if src.Encoded != nil && src.WAT == "" && src.Wasm == nil {
		return nil, false // knows no wire literals: the server decodes and asks again
	}
	if src.WAT == "compile:gate" || src.ID == "sha256:unknown" {
		return nil, false
	}
	m, _, err := e.Compile(context.Background(), src)
	return m, err == nil
}

func (e *fakeEngine) CacheStats() protocol.CacheStats {
	return protocol.CacheStats{Entries: 3, Bytes: 1234, Hits: 9, Misses: 3}
}

func u64(v uint64) *uint64 { return &v }
func str(s string) *string { return &s }

func kindError(kind protocol.Kind) *protocol.Error {
	se := &protocol.Error{Kind: kind, Message: "fake " + string(kind)}
	d := &se.Data
	switch kind {
	case protocol.KindFuelExhausted:
		d.Budget = u64(1000)
	case protocol.KindTimeout:
		d.TimeoutMs = u64(250)
	case protocol.KindMemoryLimitExceeded:
		d.Limit, d.Resource, d.Requested = u64(65536), string(protocol.ResourceMemory), u64(131072)
	case protocol.KindDisallowedImport:
		d.Module, d.Name = str("wasi_snapshot_preview1"), str("fd_write")
	case protocol.KindExport:
		d.Function = str("nope")
	case protocol.KindTrap:
		d.TrapCode = "unreachable"
		d.Frames = []protocol.FrameInfo{{Func: "inner", FuncIndex: 3, ModuleOffset: 0x42}, {FuncIndex: 1, ModuleOffset: 7}}
	}
	if kind != protocol.KindInvalidModule && kind != protocol.KindDisallowedImport {
		d.FuelConsumed, d.PeakMemoryBytes = u64(77), u64(65536)
	}
	return se
}

func (e *fakeEngine) Run(ctx context.Context, _ rpc.Module, req protocol.Run) (*protocol.RunOutcome, error) {
	e.runs.Add(1)
	fn := req.Function
	res := &protocol.RunOutcome{Usage: protocol.Usage{FuelConsumed: 4, PeakMemoryBytes: 65536}, Elapsed: 31 * time.Microsecond}
	switch {
	case fn == "run":
		res.Values = []protocol.Value{protocol.ValueI32(42)}
	case fn == "values":
		res.Values = []protocol.Value{
			protocol.ValueI32(-1),
			protocol.ValueI64(math.MinInt64),
			protocol.ValueF32(float32(math.Copysign(0, -1))),
			{Type: protocol.F64, Bits: 0x7ff8000000000123},
		}
	case fn == "echo":
		res.Values = append([]protocol.Value(nil), req.Args...)
	case fn == "block":
		e.started <- fn
		<-ctx.Done()
		return nil, &protocol.Error{Kind: protocol.KindCancelled, Message: "run cancelled by the caller", Data: protocol.ErrorData{FuelConsumed: u64(1)}}
	case fn == "gate":
		e.started <- fn
		select {
		case <-e.gate:
			res.Values = []protocol.Value{protocol.ValueI32(1)}
		case <-ctx.Done():
			return nil, &protocol.Error{Kind: protocol.KindCancelled, Message: "run cancelled by the caller"}
		}
	case strings.HasPrefix(fn, "log:"):
		n, _ := strconv.Atoi(strings.TrimPrefix(fn, "log:"))
		for i := 0; i < n; i++ {
			req.Log(fmt.Sprintf("line %d", i))
		}
		res.LogLines = n
		res.Values = []protocol.Value{}
	case strings.HasPrefix(fn, "fail:"):
		return nil, kindError(protocol.Kind(strings.TrimPrefix(fn, "fail:")))
	case fn == "plainerror":
		return nil, errors.New("something broke")
	case fn == "panic":
		panic("fake engine panic")
	case fn == "sleep":
		time.Sleep(time.Duration(e.runs.Load()%3) * time.Millisecond)
		res.Values = []protocol.Value{protocol.ValueI32(1)}
	default:
		return nil, &protocol.Error{Kind: protocol.KindExport, Data: protocol.ErrorData{Function: str(fn)}, Message: "no export " + fn}
	}
	return res, nil
}

// --- a raw client over pipes ---

type message struct {
	rpc.Message
	hasID bool
}

func (m *message) isResponse() bool { return m.Method == "" }

type harness struct {
	t      *testing.T
	srv    *rpc.Server
	eng    *fakeEngine
	inW    *io.PipeWriter
	wmu    sync.Mutex
	ndjson bool
	msgs   chan *message
	served chan error
}

func startServer(t *testing.T, eng *fakeEngine, opts rpc.Options) *harness {
	t.Helper()
	srv, err := rpc.NewServer(eng, opts)
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	h := &harness{t: t, srv: srv, eng: eng, inW: inW, ndjson: opts.Framing == rpc.FramingNDJSON,
		msgs: make(chan *message, 100000), served: make(chan error, 1)}
	go func() {
		err := srv.Serve(context.Background(), inR, outW)
		outW.Close()
		h.served <- err
	}()
	go h.readLoop(outR)
	t.Cleanup(func() {
		inW.Close()
		select {
		case <-h.served:
		case <-time.After(5 * time.Second):
			t.Errorf("Serve did not return after the input closed")
		}
	})
	return h
}

func (h *harness) readLoop(r io.Reader) {
	defer close(h.msgs)
	br := bufio.NewReader(r)
	for {
		var body []byte
		if h.ndjson {
			line, err := br.ReadBytes('\n')
			if err != nil {
				return
			}
			body = line
		} else {
			n := -1
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				line = strings.TrimRight(line, "\r\n")
				if line == "" {
					break
				}
				if v, ok := strings.CutPrefix(line, "Content-Length: "); ok {
					n, _ = strconv.Atoi(v)
				}
			}
			if n < 0 {
				h.t.Errorf("server wrote a frame without Content-Length")
				return
			}
			body = make([]byte, n)
			if _, err := io.ReadFull(br, body); err != nil {
				return
			}
		}
		m := &message{}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(body, m); err != nil || json.Unmarshal(body, &fields) != nil {
			h.t.Errorf("server wrote invalid JSON %q: %v", body, err)
			return
		}
		_, m.hasID = fields["id"]
		if m.JSONRPC != "2.0" {
			h.t.Errorf("server wrote %q without jsonrpc 2.0", body)
		}
		h.msgs <- m
	}
}

// sendRaw writes one body, framed.
func (h *harness) sendRaw(body string) {
	h.t.Helper()
	h.wmu.Lock()
	defer h.wmu.Unlock()
	var frame string
	if h.ndjson {
		frame = body + "\n"
	} else {
		frame = "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	if _, err := io.WriteString(h.inW, frame); err != nil {
		h.t.Fatalf("write: %v", err)
	}
}

// request sends a request; id is raw JSON (e.g. `1` or `"a"`).
func (h *harness) request(id, method string, params any) {
	h.t.Helper()
	body := map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "method": method}
	if params != nil {
		body["params"] = params
	}
	b, err := json.Marshal(body)
	if err != nil {
		h.t.Fatal(err)
	}
	h.sendRaw(string(b))
}

func (h *harness) notify(method string, params any) {
	h.t.Helper()
	body := map[string]any{"jsonrpc": "2.0", "method": method}
	if params != nil {
		body["params"] = params
	}
	b, _ := json.Marshal(body)
	h.sendRaw(string(b))
}

func (h *harness) run(id string, fn string, extra map[string]any) {
	h.t.Helper()
	p := map[string]any{"module": map[string]any{"wat": "(module)"}, "function": fn}
	for k, v := range extra {
		p[k] = v
	}
	h.request(id, rpc.MethodRun, p)
}

// next returns the next message the server wrote.
// hangFloor is the least time a harness waits for something that must
// come: every such wait is a hang bound, and on a loaded machine (under
// -race, beside other packages' tests) a second is not one.
const hangFloor = time.Minute

func (h *harness) next(timeout time.Duration) *message {
	h.t.Helper()
	timeout = max(timeout, hangFloor)
	select {
	case m, ok := <-h.msgs:
		if !ok {
			h.t.Fatalf("the server's output ended")
		}
		return m
	case <-time.After(timeout):
		h.t.Fatalf("no message within %v", timeout)
	}
	return nil
}

// response waits for the response with the given raw id, failing on any
// other response; notifications on the way are returned too.
func (h *harness) response(id string) (*message, []*message) {
	h.t.Helper()
	var notes []*message
	for {
		m := h.next(5 * time.Second)
		if !m.isResponse() {
			notes = append(notes, m)
			continue
		}
		if string(m.ID) != id {
			h.t.Fatalf("waiting for the response to %s, got one to %s: %+v", id, m.ID, m.Error)
		}
		return m, notes
	}
}

// quiet checks the server writes nothing for d.
func (h *harness) quiet(d time.Duration) {
	h.t.Helper()
	select {
	case m := <-h.msgs:
		if m != nil {
			h.t.Errorf("unexpected message: id %s method %q error %+v result %s", m.ID, m.Method, m.Error, m.Result)
		}
	case <-time.After(d):
	}
}

func (h *harness) waitStarted() {
	h.t.Helper()
	select {
	case <-h.eng.started:
	case <-time.After(hangFloor):
		h.t.Fatal("run did not start")
	}
}

func (h *harness) serveResult(timeout time.Duration) error {
	h.t.Helper()
	timeout = max(timeout, hangFloor)
	select {
	case err := <-h.served:
		h.served <- err // for Cleanup
		return err
	case <-time.After(timeout):
		h.t.Fatalf("Serve did not return within %v", timeout)
	}
	return nil
}

func wantError(t *testing.T, m *message, code int64, msgPart string) {
	t.Helper()
	if m.Error == nil {
		t.Fatalf("response %s: result %s, want error %d", m.ID, m.Result, code)
	}
	if m.Error.Code != code || !strings.Contains(m.Error.Message, msgPart) {
		t.Errorf("response %s: error %d %q, want %d containing %q", m.ID, m.Error.Code, m.Error.Message, code, msgPart)
	}
}

func errorData(t *testing.T, m *message) map[string]any {
	t.Helper()
	var d map[string]any
	if m.Error == nil || json.Unmarshal(m.Error.Data, &d) != nil {
		t.Fatalf("response %s has no error data", m.ID)
	}
	return d
}

// --- tests ---

func TestServerInitialize(t *testing.T) {
	for _, framing := range []rpc.Framing{rpc.FramingContentLength, rpc.FramingNDJSON} {
		t.Run(string(framing), func(t *testing.T) {
			h := startServer(t, newFakeEngine(), rpc.Options{Framing: framing, MaxConcurrency: 2, MaxQueue: 7, Version: "0.1.0", EngineVersion: "v39.0.1"})
			h.request(`1`, "initialize", map[string]any{"anything": true})
			m, _ := h.response(`1`)
			if m.Error != nil {
				t.Fatalf("error %+v", m.Error)
			}
			var got struct {
				rpc.InitializeResult
				Extra map[string]any `json:"-"`
			}
			if err := json.Unmarshal(m.Result, &got); err != nil {
				t.Fatal(err)
			}
			r := got.InitializeResult
			if r.ServerInfo != (rpc.ServerInfo{Name: "sandboxd", Version: "0.1.0"}) {
				t.Errorf("serverInfo %+v", r.ServerInfo)
			}
			if r.Engine.Wasmtime != "v39.0.1" {
				t.Errorf("engine %+v", r.Engine)
			}
			if strings.Join(r.Capabilities.HostFunctions, ",") != "log,random,clock" ||
				strings.Join(r.Capabilities.ValueTypes, ",") != "i32,i64,f32,f64" ||
				r.Capabilities.Framing != string(framing) {
				t.Errorf("capabilities %+v", r.Capabilities)
			}
			wantDef := map[string]uint64{"fuel": 1 << 50, "timeoutMs": 1000, "memoryBytes": 16777216,
				"tableElements": 100000, "instances": 1, "memories": 1, "logBytes": 1048576, "outputBytes": 1048576,
				"compileTimeoutMs": 180000, "compileMemoryBytes": 2 << 30}
			wantMax := map[string]uint64{"fuel": 1125899906842624, "timeoutMs": 600000, "memoryBytes": 4294967296,
				"tableElements": 10000000, "instances": 16, "memories": 16, "logBytes": 67108864, "outputBytes": 67108864,
				"compileTimeoutMs": 300000, "compileMemoryBytes": 4 << 30}
			if fmt.Sprint(r.Limits.Defaults) != fmt.Sprint(wantDef) || fmt.Sprint(r.Limits.Maximums) != fmt.Sprint(wantMax) {
				t.Errorf("limits %+v", r.Limits)
			}
			if r.MaxConcurrency != 2 || r.MaxQueue != 7 {
				t.Errorf("maxConcurrency %d maxQueue %d", r.MaxConcurrency, r.MaxQueue)
			}
			// Every documented key is present on the wire.
			var raw map[string]json.RawMessage
			_ = json.Unmarshal(m.Result, &raw)
			for _, k := range []string{"serverInfo", "engine", "capabilities", "limits", "maxConcurrency", "maxQueue"} {
				if _, ok := raw[k]; !ok {
					t.Errorf("initialize result lacks %q", k)
				}
			}
			// No params at all is fine too.
			h.request(`"two"`, "initialize", nil)
			if m, _ := h.response(`"two"`); m.Error != nil {
				t.Errorf("initialize without params: %+v", m.Error)
			}
		})
	}
}

func TestServerRunResult(t *testing.T) {
	h := startServer(t, newFakeEngine(), rpc.Options{MaxConcurrency: 2})
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
	if res.ModuleID != "sha256:fake" || res.FuelConsumed != 4 || res.PeakMemoryBytes != 65536 || res.ElapsedMicros != 31 || res.QueuedMicros < 0 {
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
	h := startServer(t, newFakeEngine(), rpc.Options{MaxConcurrency: 1})
	h.request(`1`, rpc.MethodCompile, map[string]any{"module": map[string]any{"wat": "(module)"}})
	m, _ := h.response(`1`)
	if m.Error != nil {
		t.Fatal(m.Error)
	}
	var res rpc.CompileResult
	_ = json.Unmarshal(m.Result, &res)
	if res.ModuleID != "sha256:fake" || len(res.Exports) != len(fakeExports) || len(res.Imports) != 1 || res.Cached || res.CompileMicros != 5 {
		t.Errorf("compile result %s", m.Result)
	}
	h.request(`2`, rpc.MethodCompile, map[string]any{"module": map[string]any{"id": "sha256:unknown"}})
	m, _ = h.response(`2`)
	wantError(t, m, 6, "sha256:unknown")
	if d := errorData(t, m); d["kind"] != "invalid_module" {
		t.Errorf("data %v", d)
	}
	h.request(`3`, rpc.MethodCompile, map[string]any{"module": map[string]any{"wat": "x"}, "function": "run"})
	m, _ = h.response(`3`)
	wantError(t, m, rpc.CodeInvalidParams, "function: unknown field")
	h.request(`4`, "nosuchmethod", nil)
	m, _ = h.response(`4`)
	wantError(t, m, rpc.CodeMethodNotFound, `unknown method "nosuchmethod" (methods: initialize, run, compile, instantiate, call, release, stats, shutdown)`)
}

func TestServerRunErrorKinds(t *testing.T) {
	h := startServer(t, newFakeEngine(), rpc.Options{MaxConcurrency: 2})
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
	h := startServer(t, newFakeEngine(), rpc.Options{MaxConcurrency: 4})
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

func TestServerCancel(t *testing.T) {
	eng := newFakeEngine()
	h := startServer(t, eng, rpc.Options{MaxConcurrency: 1})
	h.run(`1`, "block", nil)
	h.waitStarted()
	h.run(`2`, "block", nil) // queued behind 1
	h.run(`"q"`, "block", nil)
	h.quiet(50 * time.Millisecond)

	// Cancel the queued run: answered at once, never started.
	h.notify(rpc.MethodCancel, map[string]any{"id": 2})
	m, _ := h.response(`2`)
	wantError(t, m, -32800, "cancelled")
	if d := errorData(t, m); d["kind"] != "cancelled" {
		t.Errorf("data %v", d)
	}
	// Unknown ids (and the string "2" is not the number 2) are ignored.
	h.notify(rpc.MethodCancel, map[string]any{"id": 99})
	h.notify(rpc.MethodCancel, map[string]any{"id": "1"})
	h.notify(rpc.MethodCancel, map[string]any{"id": 2}) // already answered
	h.notify(rpc.MethodCancel, nil)
	h.notify(rpc.MethodCancel, map[string]any{"id": true})
	h.quiet(50 * time.Millisecond)

	// Cancel the running run.
	start := time.Now()
	h.notify(rpc.MethodCancel, map[string]any{"id": 1})
	m, _ = h.response(`1`)
	wantError(t, m, -32800, "cancelled")
	if d := errorData(t, m); d["kind"] != "cancelled" || d["fuelConsumed"] != 1.0 {
		t.Errorf("data %v", d)
	}
	if el := time.Since(start); el > hangFloor {
		t.Errorf("cancel took %v", el)
	}
	// The string-id run now starts; cancel it by its string id.
	h.waitStarted()
	h.notify(rpc.MethodCancel, map[string]any{"id": "q"})
	m, _ = h.response(`"q"`)
	wantError(t, m, -32800, "cancelled")

	if n := eng.runs.Load(); n != 2 {
		t.Errorf("engine ran %d runs, want 2 (the cancelled queued run must not start)", n)
	}
	// The server still works.
	h.run(`3`, "run", nil)
	if m, _ := h.response(`3`); m.Error != nil {
		t.Errorf("run after cancels: %+v", m.Error)
	}
	h.request(`4`, rpc.MethodStats, nil)
	m, _ = h.response(`4`)
	var st rpc.StatsResult
	_ = json.Unmarshal(m.Result, &st)
	if st.Runs["cancelled"] != 3 || st.Runs["ok"] != 1 {
		t.Errorf("stats runs %v", st.Runs)
	}
}

func TestServerBusy(t *testing.T) {
	h := startServer(t, newFakeEngine(), rpc.Options{MaxConcurrency: 1, MaxQueue: 1})
	h.run(`1`, "block", nil)
	h.waitStarted()
	h.run(`2`, "block", nil) // queued
	h.run(`3`, "run", nil)   // queue full
	m, _ := h.response(`3`)
	wantError(t, m, rpc.CodeBusy, "busy")
	d := errorData(t, m)
	if d["queued"] != 1.0 || d["maxQueue"] != 1.0 {
		t.Errorf("busy data %v", d)
	}
	// Compile shares the queue.
	h.request(`4`, rpc.MethodCompile, map[string]any{"module": map[string]any{"wat": "(module)"}})
	m, _ = h.response(`4`)
	wantError(t, m, rpc.CodeBusy, "busy")
	// stats is answered while every worker is busy, and busy is not counted.
	h.request(`5`, rpc.MethodStats, nil)
	m, _ = h.response(`5`)
	var st rpc.StatsResult
	_ = json.Unmarshal(m.Result, &st)
	if st.InFlight != 1 || st.Queued != 1 {
		t.Errorf("stats inFlight %d queued %d", st.InFlight, st.Queued)
	}
	for k, n := range st.Runs {
		if n != 0 {
			t.Errorf("stats runs[%s] = %d, want 0", k, n)
		}
	}
	h.notify(rpc.MethodCancel, map[string]any{"id": 2})
	h.response(`2`)
	h.notify(rpc.MethodCancel, map[string]any{"id": 1})
	h.response(`1`)
}

func TestServerDuplicateID(t *testing.T) {
	h := startServer(t, newFakeEngine(), rpc.Options{MaxConcurrency: 1})
	h.run(`5`, "block", nil)
	h.waitStarted()
	h.run(`5`, "run", nil)
	m, _ := h.response(`5`)
	wantError(t, m, rpc.CodeInvalidRequest, "already used")
	// A queued duplicate too.
	h.run(`"six"`, "run", nil)
	h.run(`"six"`, "run", nil)
	m, _ = h.response(`"six"`)
	wantError(t, m, rpc.CodeInvalidRequest, "already used")
	h.notify(rpc.MethodCancel, map[string]any{"id": 5})
	m, _ = h.response(`5`)
	wantError(t, m, -32800, "cancelled")
	m, _ = h.response(`"six"`)
	if m.Error != nil {
		t.Errorf("queued six: %+v", m.Error)
	}
	// Once answered, an id may be used again.
	h.run(`5`, "run", nil)
	if m, _ := h.response(`5`); m.Error != nil {
		t.Errorf("reused id: %+v", m.Error)
	}
	h.quiet(50 * time.Millisecond)
}

// TestServerReuseIDAfterResponse: a client may reuse an id as soon as it has
// read the response. Several loops answer-and-reuse their own id at once.
// (The server forgets the id before it writes the response, so a client
// that reuses an id as soon as it reads the response is never told
// "already used"; were the order reversed, the window would be narrow and
// -race would widen it enough for this test to see it.)
func TestServerReuseIDAfterResponse(t *testing.T) {
	const loops, iterations = 8, 3000
	h := startServer(t, newFakeEngine(), rpc.Options{MaxConcurrency: loops})
	route := make([]chan *message, loops)
	for i := range route {
		route[i] = make(chan *message, 1)
	}
	go func() {
		for m := range h.msgs {
			if n, err := strconv.Atoi(string(m.ID)); err == nil && n >= 0 && n < loops {
				route[n] <- m
			}
		}
	}()
	var failed atomic.Int64
	var wg sync.WaitGroup
	for l := 0; l < loops; l++ {
		wg.Add(1)
		go func(l int) {
			defer wg.Done()
			id := strconv.Itoa(l)
			for i := 0; i < iterations && failed.Load() == 0; i++ {
				h.run(id, "run", nil)
				select {
				case m := <-route[l]:
					if m.Error != nil {
						failed.Add(1)
						t.Errorf("id %s, iteration %d: reusing the id right after its response: %d %s", id, i, m.Error.Code, m.Error.Message)
					}
				case <-time.After(5 * time.Second):
					failed.Add(1)
					t.Errorf("id %s: no response", id)
				}
			}
		}(l)
	}
	wg.Wait()
}

func TestServerStats(t *testing.T) {
	h := startServer(t, newFakeEngine(), rpc.Options{MaxConcurrency: 2})
	n := 0
	send := func(fn string) {
		n++
		id := strconv.Itoa(n)
		h.run(id, fn, nil)
		h.response(id)
	}
	send("run")
	send("run")
	for _, info := range protocol.Kinds() {
		send("fail:" + string(info.Kind))
	}
	send("fail:trap")
	send("panic")
	// Not counted: invalid params.
	h.run(`"bad"`, "run", map[string]any{"limits": map[string]any{"fuel": -1}})
	h.response(`"bad"`)
	h.run(`"badarg"`, "echo", map[string]any{"args": []any{true, 1, 1, 1}})
	h.response(`"badarg"`)

	h.request(`"st"`, rpc.MethodStats, nil)
	m, _ := h.response(`"st"`)
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(m.Result, &raw)
	for _, k := range []string{"runs", "inFlight", "queued", "queuedMicrosTotal", "cache", "uptimeMs", "requests"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("stats lacks %q", k)
		}
	}
	var st rpc.StatsResult
	if err := json.Unmarshal(m.Result, &st); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"ok": 2, "trap": 2, "internal": 1}
	for _, info := range protocol.Kinds() {
		if info.Kind != protocol.KindTrap {
			want[string(info.Kind)] = 1
		}
	}
	if fmt.Sprint(st.Runs) != fmt.Sprint(want) {
		t.Errorf("runs %v\nwant %v", st.Runs, want)
	}
	// (inFlight is not checked: the server replies before it decrements it,
	// see TestServerReuseIDAfterResponse.)
	if st.Queued != 0 || st.Cache != (rpc.CacheInfo{Entries: 3, Bytes: 1234, Hits: 9, Misses: 3}) || st.UptimeMs < 0 {
		t.Errorf("stats %+v", st)
	}
	if st.Requests != uint64(n+3) {
		t.Errorf("requests %d, want %d", st.Requests, n+3)
	}
}

func TestServerStatsZero(t *testing.T) {
	h := startServer(t, newFakeEngine(), rpc.Options{MaxConcurrency: 1})
	h.request(`1`, rpc.MethodStats, nil)
	m, _ := h.response(`1`)
	var st rpc.StatsResult
	_ = json.Unmarshal(m.Result, &st)
	keys := []string{"ok"}
	for _, info := range protocol.Kinds() {
		keys = append(keys, string(info.Kind))
	}
	for _, k := range keys {
		if n, ok := st.Runs[k]; !ok || n != 0 {
			t.Errorf("runs[%s] = %d, %v; want 0 present", k, n, ok)
		}
	}
	if len(st.Runs) != len(keys) {
		t.Errorf("runs %v", st.Runs)
	}
}

func TestServerShutdown(t *testing.T) {
	eng := newFakeEngine()
	h := startServer(t, eng, rpc.Options{MaxConcurrency: 1})
	h.run(`1`, "gate", nil)
	h.waitStarted()
	h.run(`2`, "run", nil) // queued: still in flight, must finish too
	h.request(`10`, rpc.MethodShutdown, nil)
	h.quiet(100 * time.Millisecond) // shutdown waits for the runs
	h.run(`11`, "run", nil)
	m, _ := h.response(`11`)
	wantError(t, m, rpc.CodeInvalidRequest, "shutting down")
	h.request(`12`, rpc.MethodCompile, map[string]any{"module": map[string]any{"wat": "(module)"}})
	m, _ = h.response(`12`)
	wantError(t, m, rpc.CodeInvalidRequest, "shutting down")
	// stats still works.
	h.request(`13`, rpc.MethodStats, nil)
	if m, _ := h.response(`13`); m.Error != nil {
		t.Errorf("stats during shutdown: %+v", m.Error)
	}
	close(eng.gate)
	m, _ = h.response(`1`)
	if m.Error != nil {
		t.Errorf("run 1: %+v", m.Error)
	}
	m, _ = h.response(`2`)
	if m.Error != nil {
		t.Errorf("run 2: %+v", m.Error)
	}
	m, _ = h.response(`10`)
	if m.Error != nil || string(m.Result) != "null" {
		t.Errorf("shutdown: result %s error %+v", m.Result, m.Error)
	}
	h.run(`14`, "run", nil)
	m, _ = h.response(`14`)
	wantError(t, m, rpc.CodeInvalidRequest, "shutting down")
	h.notify(rpc.MethodExit, nil)
	if err := h.serveResult(2 * time.Second); err != nil {
		t.Errorf("Serve after shutdown and exit = %v, want nil", err)
	}
}

// TestServerExit: exit returns from Serve with nil after shutdown and with
// ErrExitWithoutShutdown without it, whatever the timing of the read loop.
func TestServerExit(t *testing.T) {
	for i := 0; i < 10; i++ {
		t.Run("without shutdown", func(t *testing.T) {
			h := startServer(t, newFakeEngine(), rpc.Options{MaxConcurrency: 1})
			h.notify(rpc.MethodExit, nil)
			if err := h.serveResult(2 * time.Second); !errors.Is(err, rpc.ErrExitWithoutShutdown) {
				t.Errorf("Serve = %v (%T), want ErrExitWithoutShutdown", err, err)
			}
		})
		t.Run("after shutdown", func(t *testing.T) {
			h := startServer(t, newFakeEngine(), rpc.Options{MaxConcurrency: 1})
			h.request(`1`, rpc.MethodShutdown, nil)
			m, _ := h.response(`1`)
			if m.Error != nil || string(m.Result) != "null" {
				t.Errorf("shutdown: %s %+v", m.Result, m.Error)
			}
			h.notify(rpc.MethodExit, nil)
			if err := h.serveResult(2 * time.Second); err != nil {
				t.Errorf("Serve = %v (%T), want nil", err, err)
			}
		})
	}
}

func TestServerExitCancelsRuns(t *testing.T) {
	h := startServer(t, newFakeEngine(), rpc.Options{MaxConcurrency: 1})
	h.run(`1`, "block", nil)
	h.waitStarted()
	h.run(`2`, "block", nil)
	h.notify(rpc.MethodExit, nil)
	got := map[string]bool{}
	for i := 0; i < 2; i++ {
		m := h.next(2 * time.Second)
		wantError(t, m, -32800, "cancelled")
		got[string(m.ID)] = true
	}
	if !got["1"] || !got["2"] {
		t.Errorf("answered %v", got)
	}
	h.serveResult(2 * time.Second)
}

func TestServerInputEOF(t *testing.T) {
	h := startServer(t, newFakeEngine(), rpc.Options{MaxConcurrency: 1})
	h.run(`1`, "block", nil)
	h.waitStarted()
	h.run(`2`, "block", nil) // queued
	h.run(`3`, "gate", nil)  // queued
	start := time.Now()
	h.inW.Close()
	got := map[string]bool{}
	for i := 0; i < 3; i++ {
		m := h.next(time.Second)
		wantError(t, m, -32800, "cancelled")
		if got[string(m.ID)] {
			t.Errorf("two responses to %s", m.ID)
		}
		got[string(m.ID)] = true
	}
	if err := h.serveResult(time.Second); err != nil {
		t.Errorf("Serve at EOF = %v, want nil", err)
	}
	if el := time.Since(start); el > hangFloor {
		t.Errorf("took %v", el)
	}
	if m, ok := <-h.msgs; ok {
		t.Errorf("extra message after EOF: %+v", m)
	}
}

func TestServerFramingError(t *testing.T) {
	h := startServer(t, newFakeEngine(), rpc.Options{MaxConcurrency: 1})
	h.run(`1`, "block", nil)
	h.waitStarted()
	h.run(`2`, "run", nil) // queued
	h.wmu.Lock()
	_, _ = io.WriteString(h.inW, "Content-Length: twelve\r\n\r\n{}")
	h.wmu.Unlock()
	// Both runs are answered cancelled, and the broken frame itself with
	// an error (id null) that says what was wrong.
	got := map[string]bool{}
	for i := 0; i < 3; i++ {
		m := h.next(2 * time.Second)
		if string(m.ID) == "null" {
			wantError(t, m, rpc.CodeParseError, "Content-Length")
		} else {
			wantError(t, m, -32800, "cancelled")
		}
		got[string(m.ID)] = true
	}
	if !got["1"] || !got["2"] || !got["null"] {
		t.Errorf("answered %v", got)
	}
	err := h.serveResult(2 * time.Second)
	var fe *rpc.FramingError
	if !errors.As(err, &fe) || !strings.Contains(fe.Error(), "Content-Length") {
		t.Errorf("Serve = %v, want a *FramingError about Content-Length", err)
	}
}

func TestServerOversizedAndGarbage(t *testing.T) {
	for _, framing := range []rpc.Framing{rpc.FramingContentLength, rpc.FramingNDJSON} {
		t.Run(string(framing), func(t *testing.T) {
			h := startServer(t, newFakeEngine(), rpc.Options{Framing: framing, MaxConcurrency: 1, MaxMessageBytes: 1024})
			h.sendRaw(`{"jsonrpc":"2.0","id":1,"method":"stats","params":{"pad":"` + strings.Repeat("x", 2000) + `"}}`)
			m := h.next(2 * time.Second)
			wantError(t, m, rpc.CodeInvalidRequest, "exceeds --max-message-bytes 1024")
			if string(m.ID) != "null" {
				t.Errorf("id %s", m.ID)
			}
			h.sendRaw(`{not json`)
			m = h.next(2 * time.Second)
			wantError(t, m, rpc.CodeParseError, "")
			h.sendRaw(`[{"jsonrpc":"2.0","id":2,"method":"stats"}]`)
			m = h.next(2 * time.Second)
			wantError(t, m, rpc.CodeInvalidRequest, "batch")
			h.sendRaw(`{"jsonrpc":"2.0","id":-3,"method":"stats"}`)
			m = h.next(2 * time.Second)
			wantError(t, m, rpc.CodeInvalidRequest, "id")
			h.sendRaw(`{"jsonrpc":"2.0","id":3,"result":1}`) // a response: ignored
			h.sendRaw(`{"jsonrpc":"2.0","id":4,"method":"run","params":"x"}`)
			m, _ = h.response(`4`)
			wantError(t, m, rpc.CodeInvalidParams, "params")
			h.request(`5`, rpc.MethodStats, nil)
			if m, _ := h.response(`5`); m.Error != nil {
				t.Errorf("stats after bad input: %+v", m.Error)
			}
		})
	}
}

// TestServerLargeIDs: ids are echoed exactly as sent, for every string and
// every integer in 0..2^63-1; larger integers get -32600 with id null
// (docs/protocol.md).
func TestServerLargeIDs(t *testing.T) {
	h := startServer(t, newFakeEngine(), rpc.Options{MaxConcurrency: 2})
	for _, id := range []string{`0`, `9007199254740993`, `9223372036854775807`, `""`, `"x y"`, `"18446744073709551615"`} {
		h.run(id, "run", nil)
		m := h.next(2 * time.Second)
		if string(m.ID) != id || m.Error != nil {
			t.Errorf("run with id %s: answered id %s error %+v", id, m.ID, m.Error)
		}
	}
	for _, id := range []string{`9223372036854775808`, `18446744073709551615`} {
		h.run(id, "run", nil)
		m := h.next(2 * time.Second)
		if string(m.ID) != "null" || m.Error == nil || m.Error.Code != rpc.CodeInvalidRequest {
			t.Errorf("run with id %s: answered id %s error %+v; want -32600 id null", id, m.ID, m.Error)
		}
	}
}

func TestServerPanicRecovered(t *testing.T) {
	h := startServer(t, newFakeEngine(), rpc.Options{MaxConcurrency: 1})
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
	h := startServer(t, newFakeEngine(), rpc.Options{MaxConcurrency: 2})
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
	h.quiet(100 * time.Millisecond)
}

func TestNewServerOptions(t *testing.T) {
	for _, o := range []rpc.Options{
		{Framing: "xml"},
		{MaxConcurrency: -1},
		{MaxQueue: -1},
		{MaxMessageBytes: 10},
		{Maximums: limits.HardMaximums(), Defaults: limits.Limits{Fuel: 1}},
	} {
		if _, err := rpc.NewServer(newFakeEngine(), o); err == nil {
			t.Errorf("NewServer(%+v) accepted", o)
		}
	}
}

// TestServerGoClient drives the server with the Go client.
func TestServerGoClient(t *testing.T) {
	eng := newFakeEngine()
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
	if err != nil || cr.ModuleID != "sha256:fake" {
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

// TestServerCompileHoldsNoWorker: a run waiting for its module to compile
// holds no run worker, so a run of a module already compiled is answered
// meanwhile (issue 10 item 6: a compile "never delays runs of modules
// already compiled"), and the waiting compile is cancellable.
func TestServerCompileHoldsNoWorker(t *testing.T) {
	h := startServer(t, newFakeEngine(), rpc.Options{MaxConcurrency: 1})
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
	close(h.eng.gate)
	if m, _ := h.response(`"slow"`); m.Error != nil {
		t.Errorf("the slow run after its compile: %+v", m.Error)
	}
}

// TestServeReturnsWhenParentNeverReads: with a small output high water and
// a parent that never reads, Serve returns soon after the input closes
// (the output is abandoned after DrainTimeout), having waited for every
// goroutine it started (issue 10 item 11: it did not return at all).
func TestServeReturnsWhenParentNeverReads(t *testing.T) {
	srv, err := rpc.NewServer(newFakeEngine(), rpc.Options{MaxConcurrency: 1, OutputHighWater: 1024, DrainTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	_, outW := io.Pipe() // never read
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background(), inR, outW) }()
	for i := range 4 {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"run","params":{"module":{"wat":"x"},"function":"log:2000"}}`, i)
		if _, err := fmt.Fprintf(inW, "Content-Length: %d\r\n\r\n%s", len(body), body); err != nil {
			t.Fatal(err)
		}
	}
	inW.Close()
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10 s of the input closing, with a parent that never reads")
	}
}

// TestServerInlineHammer mixes what the reading goroutine runs itself
// (quick runs with nothing else in flight), runs that outlast the inline
// grace (the reader role passes to another goroutine while the run goes
// on), cancels of such runs, stats and compiles, sent one at a time and in
// bursts from several writers: every request gets exactly one response,
// of the right kind.
func TestServerInlineHammer(t *testing.T) {
	eng := newFakeEngine()
	go func() { // block runs report their start; nobody else waits for it here
		for range eng.started {
		}
	}()
	h := startServer(t, eng, rpc.Options{MaxConcurrency: 2, MaxQueue: 100000})
	t.Cleanup(func() { close(eng.gate) })
	const n = 1500
	kinds := map[string]string{}
	send := func(i int) {
		id := strconv.Itoa(i)
		module := map[string]any{"id": "sha256:fake"}
		switch i % 6 {
		case 0, 1, 2:
			h.request(id, rpc.MethodRun, map[string]any{"module": module, "function": "run"})
		case 3:
			h.request(id, rpc.MethodRun, map[string]any{"module": module, "function": "sleep"})
		case 4:
			h.request(id, rpc.MethodRun, map[string]any{"module": module, "function": "block"})
			h.notify(rpc.MethodCancel, map[string]any{"id": i})
		case 5:
			if i%12 == 5 {
				h.request(id, rpc.MethodStats, nil)
			} else {
				h.request(id, rpc.MethodCompile, map[string]any{"module": map[string]any{"wat": "(module)"}})
			}
		}
	}
	for i := 0; i < n; i++ {
		switch i % 6 {
		case 0, 1, 2, 3:
			kinds[strconv.Itoa(i)] = "ok"
		case 4:
			kinds[strconv.Itoa(i)] = "cancelled"
		case 5:
			kinds[strconv.Itoa(i)] = "ok"
		}
	}
	count := map[string]int{}
	check := func(m *message) {
		id := string(m.ID)
		count[id]++
		switch kinds[id] {
		case "ok":
			if m.Error != nil {
				t.Errorf("request %s: %+v", id, m.Error)
			}
		case "cancelled":
			if m.Error == nil || m.Error.Code != protocol.CodeCancelled {
				t.Errorf("request %s: %+v %s, want cancelled", id, m.Error, m.Result)
			}
		default:
			t.Errorf("response to an id never sent: %s", id)
		}
	}
	// One at a time: each run is the only request in flight.
	for i := 0; i < n/3; i++ {
		send(i)
		for {
			m := h.next(10 * time.Second)
			if m.isResponse() {
				check(m)
				break
			}
		}
	}
	// In bursts, from four writers at once.
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Go(func() {
			for i := n/3 + w; i < n; i += 4 {
				send(i)
			}
		})
	}
	for got := n / 3; got < n; {
		m := h.next(10 * time.Second)
		if m.isResponse() {
			check(m)
			got++
		}
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		if c := count[strconv.Itoa(i)]; c != 1 {
			t.Errorf("request %d answered %d times", i, c)
		}
	}
	h.quiet(100 * time.Millisecond)
}

// TestServerInlineHandOffAfterQuickRuns: the reader's one watch timer is
// armed by one inline run and serves the next ones (it re-arms itself for
// the run in progress when it fires). A run that blocks right after quick
// ones, whichever of them armed the timer, still hands reading on: stats
// and its cancel are read and answered while it blocks.
func TestServerInlineHandOffAfterQuickRuns(t *testing.T) {
	h := startServer(t, newFakeEngine(), rpc.Options{MaxConcurrency: 2})
	fake := map[string]any{"id": "sha256:fake"}
	id := 0
	next := func() string { id++; return strconv.Itoa(id) }
	for round := range 20 {
		for range round % 5 {
			q := next()
			h.request(q, rpc.MethodRun, map[string]any{"module": fake, "function": "run"})
			if m, _ := h.response(q); m.Error != nil {
				t.Fatalf("quick run %s: %+v", q, m.Error)
			}
		}
		b := next()
		h.request(b, rpc.MethodRun, map[string]any{"module": fake, "function": "block"})
		h.waitStarted()
		st := next()
		h.request(st, rpc.MethodStats, nil)
		if m, _ := h.response(st); m.Error != nil {
			t.Fatalf("round %d: stats while an inline run blocks: %+v", round, m.Error)
		}
		n, _ := strconv.Atoi(b)
		h.notify(rpc.MethodCancel, map[string]any{"id": n})
		m, _ := h.response(b)
		wantError(t, m, protocol.CodeCancelled, "cancelled")
	}
	h.quiet(50 * time.Millisecond)
}

// TestServerInlineRunHandsReadingOn: a run read with nothing else in
// flight runs on the reading goroutine; while it blocks, what the parent
// sends next (stats, another run, the cancel) is still read and answered,
// because the reader role passes to another goroutine.
func TestServerInlineRunHandsReadingOn(t *testing.T) {
	h := startServer(t, newFakeEngine(), rpc.Options{MaxConcurrency: 2})
	h.request(`1`, rpc.MethodRun, map[string]any{"module": map[string]any{"id": "sha256:fake"}, "function": "block"})
	h.waitStarted()
	h.request(`2`, rpc.MethodStats, nil)
	if m, _ := h.response(`2`); m.Error != nil {
		t.Fatalf("stats while an inline run blocks: %+v", m.Error)
	}
	h.request(`3`, rpc.MethodRun, map[string]any{"module": map[string]any{"id": "sha256:fake"}, "function": "run"})
	if m, _ := h.response(`3`); m.Error != nil {
		t.Fatalf("a run while an inline run blocks: %+v", m.Error)
	}
	h.notify(rpc.MethodCancel, map[string]any{"id": 1})
	m, _ := h.response(`1`)
	wantError(t, m, protocol.CodeCancelled, "cancelled")
	h.quiet(50 * time.Millisecond)
}
