package mcpserver

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/internal/rpctest"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

func TestToolsAreListedWithTheirSchemas(t *testing.T) {
	max := limits.DefaultMaximums()
	max.Fuel = 5_000_000
	cs := session(t, newEngine(), Options{Maximums: max, Defaults: limits.Limits{}}, nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
		if tl.InputSchema == nil || tl.OutputSchema == nil || tl.Description == "" {
			t.Errorf("%s: schemas %v / %v, description %q", tl.Name, tl.InputSchema, tl.OutputSchema, tl.Description)
		}
		// the operator's maximum is in the schema, so a client sees the ceiling
		in := fmt.Sprint(tl.InputSchema)
		if !strings.Contains(in, "at most 5000000") {
			t.Errorf("%s: the input schema does not give the operator's maximum fuel:\n%s", tl.Name, in)
		}
	}
	if want := []string{"call_plugin", "run_export", "run_wasi"}; !slices.Equal(names, want) { // by name, as the SDK lists them
		t.Errorf("tools %v, want %v", names, want)
	}
}

func TestAnEngineWithoutInstancesHasNoPluginTool(t *testing.T) {
	srv, err := New(rpctest.NewEngine(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range srv.tools() {
		if tl.def.Name == "call_plugin" {
			t.Error("call_plugin is listed for an engine that keeps no instances")
		}
	}
}

func TestRunExportReturnsTypedValues(t *testing.T) {
	eng := newEngine()
	cs := session(t, eng, Options{}, nil)
	res, out := callTool(t, cs, "run_export", map[string]any{"module": map[string]any{"wat": "(module)"}, "function": "echo",
		"args": []any{-7, "-9007199254740993", 1.5, "NaN"}})
	if errorKind(t, res, out) != "" {
		t.Fatalf("echo failed: %v", out)
	}
	run := eng.lastRun()
	want := []protocol.Value{protocol.ValueI32(-7), protocol.ValueI64(-9007199254740993), protocol.ValueF32(1.5), {Type: protocol.F64, Bits: 0x7ff8000000000000}}
	if !slices.Equal(run.Args, want) {
		t.Errorf("the engine got %v, want %v", run.Args, want)
	}
	if got := fmt.Sprint(out["values"]); got != "[map[type:i32 value:-7] map[type:i64 value:-9007199254740993] map[bits:0x3fc00000 type:f32 value:1.5] map[bits:0x7ff8000000000000 type:f64 value:NaN]]" {
		t.Errorf("values %s", got)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; text != "result: I32(-7), I64(-9007199254740993), F32(1.5), F64(NaN:0x7ff8000000000000)" {
		t.Errorf("text %q", text)
	}
	if err := validates(t, exportOutputSchema(), out); err != nil {
		t.Errorf("the output does not fit the output schema: %v", err)
	}
}

func TestEveryKindComesBackAsAToolError(t *testing.T) {
	cs := session(t, newEngine(), Options{}, nil)
	for _, k := range protocol.Kinds() {
		res, out := callTool(t, cs, "run_export", map[string]any{"module": map[string]any{"wat": "(module)"}, "function": "fail:" + string(k.Kind)})
		if got := errorKind(t, res, out); got != string(k.Kind) {
			t.Errorf("fail:%s: kind %q", k.Kind, got)
		}
		e := out["error"].(map[string]any)
		if data, _ := e["data"].(map[string]any); data == nil || data["kind"] != string(k.Kind) {
			t.Errorf("fail:%s: data %v", k.Kind, e["data"])
		}
		if text := res.Content[0].(*mcp.TextContent).Text; !strings.HasPrefix(text, string(k.Kind)+": ") {
			t.Errorf("fail:%s: text %q", k.Kind, text)
		}
		if err := validates(t, exportOutputSchema(), out); err != nil {
			t.Errorf("fail:%s: the output does not fit the output schema: %v", k.Kind, err)
		}
	}
	// and the server kept serving all along
	if res, out := callTool(t, cs, "run_export", map[string]any{"module": map[string]any{"wat": "(module)"}, "function": "run"}); errorKind(t, res, out) != "" {
		t.Errorf("run after the failures: %v", out)
	}
}

func TestAPanicInTheEngineIsAToolError(t *testing.T) {
	cs := session(t, newEngine(), Options{}, nil)
	res, out := callTool(t, cs, "run_export", map[string]any{"module": map[string]any{"wat": "(module)"}, "function": "panic"})
	if kind := errorKind(t, res, out); kind != "host" {
		t.Errorf("kind %q: %v", kind, out)
	}
	if res, out := callTool(t, cs, "run_export", map[string]any{"module": map[string]any{"wat": "(module)"}, "function": "run"}); errorKind(t, res, out) != "" {
		t.Errorf("run after the panic: %v", out)
	}
}

func TestLimitsMayBeLoweredNeverRaisedPastTheMaximum(t *testing.T) {
	def, max := limits.Defaults(), limits.DefaultMaximums()
	def.Fuel, max.Fuel = 1000, 5000
	def.Timeout, max.Timeout = time.Second, 2*time.Second
	eng := newEngine()
	cs := session(t, eng, Options{Defaults: def, Maximums: max}, nil)
	call := func(l map[string]any) (*mcp.CallToolResult, map[string]any) {
		return callTool(t, cs, "run_export", map[string]any{"module": map[string]any{"wat": "(module)"}, "function": "run", "limits": l})
	}
	if res, out := call(nil); errorKind(t, res, out) != "" || eng.lastRun().Limits.Fuel != 1000 || eng.lastRun().Limits.Timeout != time.Second {
		t.Errorf("no limits: %v, the engine got %+v", out, eng.lastRun().Limits)
	}
	if res, out := call(map[string]any{"fuel": 10, "timeoutMs": 2000}); errorKind(t, res, out) != "" || eng.lastRun().Limits.Fuel != 10 || eng.lastRun().Limits.Timeout != 2*time.Second {
		t.Errorf("fuel 10, timeout 2000: %v, the engine got %+v", out, eng.lastRun().Limits)
	}
	runs := len(eng.runs)
	for _, tc := range []struct {
		limits map[string]any
		field  string
		says   string
	}{
		{map[string]any{"fuel": 5001}, "limits.fuel", "asks for 5001, more than the operator's maximum of 5000"},
		{map[string]any{"timeoutMs": 2001}, "limits.timeoutMs", "maximum of 2000"},
		{map[string]any{"memoryBytes": uint64(8) << 30}, "limits.memoryBytes", "maximum of 4294967296"},
		{map[string]any{"fuel": 0}, "limits.fuel", "must be > 0"},
		{map[string]any{"fuel": -1}, "limits.fuel", "whole number"},
		{map[string]any{"fuel": 1.5}, "limits.fuel", "whole number"},
		{map[string]any{"fuel": "10"}, "limits.fuel", "must be a whole number, got a string"},
		{map[string]any{"fuel": 1e30}, "limits.fuel", "whole number"},
		{map[string]any{"gas": 1}, "limits.gas", "unknown field"},
		{map[string]any{"varBytes": 1}, "limits.varBytes", "unknown field"}, // a plugin's only
	} {
		res, out := call(tc.limits)
		if kind := errorKind(t, res, out); kind != KindInvalidParams {
			t.Errorf("%v: kind %q", tc.limits, kind)
			continue
		}
		e := out["error"].(map[string]any)
		if e["field"] != tc.field || !strings.Contains(e["message"].(string), tc.says) {
			t.Errorf("%v: field %v, message %q; want %s, %q", tc.limits, e["field"], e["message"], tc.field, tc.says)
		}
	}
	if len(eng.runs) != runs {
		t.Errorf("refused limits reached the engine: %d runs", len(eng.runs)-runs)
	}
}

func TestModulePathsOnlyInsideTheAllowedDirectories(t *testing.T) {
	eng := newEngine()
	closed := session(t, eng, Options{}, nil)
	res, out := callTool(t, closed, "run_export", map[string]any{"module": map[string]any{"path": "/etc/passwd"}, "function": "run"})
	if kind := errorKind(t, res, out); kind != KindInvalidParams || !strings.Contains(fmt.Sprint(out), "the operator allowed no directory") {
		t.Errorf("a path with no directory allowed: %v", out)
	}
	open := session(t, eng, Options{ModuleDirs: []string{"/srv/wasm"}}, nil)
	for _, p := range []string{"relative.wasm", "../etc/passwd", "", "/a\x00b", "/etc/passwd", "/srv/wasm/../x.wasm", "/srv/wasmx/a.wasm", "/srv"} {
		res, out := callTool(t, open, "run_export", map[string]any{"module": map[string]any{"path": p}, "function": "run"})
		if kind := errorKind(t, res, out); kind != KindInvalidParams {
			t.Errorf("path %q: %v", p, out)
		}
	}
	if len(eng.sources) != 0 {
		t.Fatalf("refused paths reached the engine: %v", eng.sources)
	}
	// A path that names a file inside goes to the engine, which checks the
	// opened file against the directories (its own tests; the real
	// binary's in cmd/sandboxd).
	res, out = callTool(t, open, "run_export", map[string]any{"module": map[string]any{"path": "/srv/wasm/sub/../x.wasm"}, "function": "run"})
	if errorKind(t, res, out) != "" || eng.lastSource().Path != "/srv/wasm/sub/../x.wasm" {
		t.Errorf("an absolute path: %v, the engine got %+v", out, eng.lastSource())
	}
}

func TestModuleSources(t *testing.T) {
	eng := newEngine()
	cs := session(t, eng, Options{}, nil)
	wasm := []byte("\x00asm\x01\x00\x00\x00")
	res, out := callTool(t, cs, "run_export", map[string]any{"module": map[string]any{"base64": base64.StdEncoding.EncodeToString(wasm)}, "function": "run",
		"limits": map[string]any{"compileTimeoutMs": 1234, "compileMemoryBytes": 1 << 28}})
	src := eng.lastSource()
	if errorKind(t, res, out) != "" || string(src.Wasm) != string(wasm) || src.CompileTimeout != 1234*time.Millisecond || src.CompileMemoryBytes != 1<<28 {
		t.Errorf("base64: %v, the engine got %+v", out, src)
	}
	for _, m := range []any{
		map[string]any{}, map[string]any{"wat": "(module)", "base64": "AA=="}, map[string]any{"base64": "not base64!"},
		map[string]any{"wat": ""}, map[string]any{"wasm": "AA=="}, "(module)", nil,
	} {
		res, out := callTool(t, cs, "run_export", map[string]any{"module": m, "function": "run"})
		if kind := errorKind(t, res, out); kind != KindInvalidParams || !strings.HasPrefix(out["error"].(map[string]any)["field"].(string), "module") {
			t.Errorf("module %v: %v", m, out)
		}
	}
}

func TestRunWASIGivesTheProgramItsGrantAndStreamsItsOutput(t *testing.T) {
	eng := newEngine()
	var mu sync.Mutex
	var streamed []string
	got := make(chan struct{}, 100)
	cs := session(t, eng, Options{WASIDirs: []string{"/srv/data"}}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			streamed = append(streamed, fmt.Sprintf("%v:%s@%v", req.Params.Meta[StreamMetaKey], req.Params.Message, req.Params.Progress))
			mu.Unlock()
			got <- struct{}{}
		}})
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	params := &mcp.CallToolParams{Name: "run_wasi", Arguments: map[string]any{
		"module": map[string]any{"wat": "(module)"},
		"args":   []string{"one", "two"}, "env": map[string]string{"A": "1"}, "stdin": "in\n",
		"files": map[string]any{"/data/a.txt": "A", "/data/b.bin": map[string]any{"base64": "AAE="}},
		"dirs":  []any{map[string]any{"host": "/srv/data/x", "guest": "/x", "writable": true}},
	}}
	params.SetProgressToken("tok")
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	out := structured(t, res)
	if errorKind(t, res, out) != "" || out["exitCode"] != float64(2) || fmt.Sprint(out["stdout"]) != "map[text:onetwo]" || fmt.Sprint(out["stderr"]) != "map[text:in\n]" {
		t.Errorf("output %v", out)
	}
	if err := validates(t, wasiOutputSchema(), out); err != nil {
		t.Errorf("the output does not fit the output schema: %v", err)
	}
	w := eng.lastRun().Capabilities.WASI
	if w == nil || !slices.Equal(w.Args, []string{"one", "two"}) || w.Env["A"] != "1" || string(w.Stdin) != "in\n" ||
		string(w.Files["/data/a.txt"]) != "A" || string(w.Files["/data/b.bin"]) != "\x00\x01" ||
		len(w.Dirs) != 1 || w.Dirs[0] != (protocol.Dir{Host: "/srv/data/x", Guest: "/x", Writable: true}) {
		t.Errorf("the engine got %+v", w)
	}
	for range 2 { // stdout (two pieces, merged or not), stderr: at least two notifications
		select {
		case <-got:
		case <-ctx.Done():
			t.Fatal("no progress notifications")
		}
	}
	for {
		mu.Lock()
		all := strings.Join(streamed, " ")
		mu.Unlock()
		if strings.HasSuffix(all, "stderr:in\n@9") {
			if all != "stdout:one@3 stdout:two@6 stderr:in\n@9" && all != "stdout:onetwo@6 stderr:in\n@9" {
				t.Errorf("progress %q", all)
			}
			break
		}
		select {
		case <-got:
		case <-ctx.Done():
			t.Fatalf("progress so far %q", all)
		}
	}
}

func TestRunWASIGrantProblemsNameTheArgument(t *testing.T) {
	eng := newEngine()
	cs := session(t, eng, Options{}, nil)
	mod := map[string]any{"wat": "(module)"}
	for _, tc := range []struct {
		args  map[string]any
		field string
	}{
		{map[string]any{"args": []any{"a\x00b"}}, "args[0]"},
		{map[string]any{"args": []any{1}}, "args[0]"},
		{map[string]any{"env": map[string]any{"A=B": "1"}}, "env"},
		{map[string]any{"files": map[string]any{"relative": "x"}}, `files["relative"]`},
		{map[string]any{"files": map[string]any{"/a": map[string]any{"hex": "00"}}}, `files["/a"]`},
		{map[string]any{"dirs": []any{map[string]any{"host": "/tmp"}}}, "dirs[0].guest"},
		{map[string]any{"dirs": []any{map[string]any{"host": "/tmp", "guest": "/t", "mode": "rw"}}}, "dirs[0].mode"},
		{map[string]any{"stdin": 5}, "stdin"},
		{map[string]any{"argv": []string{}}, "argv"},
	} {
		tc.args["module"] = mod
		res, out := callTool(t, cs, "run_wasi", tc.args)
		if kind := errorKind(t, res, out); kind != KindInvalidParams || out["error"].(map[string]any)["field"] != tc.field {
			t.Errorf("%v: %v, want field %s", tc.args, out, tc.field)
		}
	}
	if len(eng.runs) != 0 {
		t.Errorf("refused grants reached the engine")
	}
}

func TestCallPlugin(t *testing.T) {
	eng := newEngine()
	cs := session(t, eng, Options{}, nil)
	res, out := callTool(t, cs, "call_plugin", map[string]any{"module": map[string]any{"wat": "plugin"}, "function": "count",
		"input": "abc", "config": map[string]string{"k": "v"}, "wasi": true, "log": true, "limits": map[string]any{"varBytes": 4096}})
	if errorKind(t, res, out) != "" || fmt.Sprint(out["output"]) != "map[text:ABC]" || fmt.Sprint(out["log"]) != "[map[level:info line:input abc]]" {
		t.Errorf("count: %v", out)
	}
	if err := validates(t, pluginOutputSchema(), out); err != nil {
		t.Errorf("the output does not fit the output schema: %v", err)
	}
	req := eng.onces[len(eng.onces)-1]
	if req.Config["k"] != "v" || req.VarBytes != 4096 || req.Capabilities.WASI == nil || !req.Capabilities.Log {
		t.Errorf("the engine got %+v", req)
	}
	res, out = callTool(t, cs, "call_plugin", map[string]any{"module": map[string]any{"wat": "plugin"}, "function": "fail", "input": "x"})
	e, _ := out["error"].(map[string]any)
	if errorKind(t, res, out) != "plugin_error" || fmt.Sprint(e["data"]) != "map[kind:plugin_error message:no x returnCode:1]" {
		t.Errorf("fail: %v", out)
	}
	res, out = callTool(t, cs, "call_plugin", map[string]any{"module": map[string]any{"wat": "(module)"}, "function": "count"})
	if errorKind(t, res, out) != KindInvalidParams || !strings.Contains(fmt.Sprint(out), "not an Extism plugin") {
		t.Errorf("not a plugin: %v", out)
	}
	res, out = callTool(t, cs, "call_plugin", map[string]any{"module": map[string]any{"wat": "plugin"}, "function": "count", "limits": map[string]any{"varBytes": protocol.MaxVarBytes + 1}})
	if errorKind(t, res, out) != KindInvalidParams || out["error"].(map[string]any)["field"] != "limits.varBytes" {
		t.Errorf("varBytes past the maximum: %v", out)
	}
}

func TestCancellationStopsTheRun(t *testing.T) {
	eng := newEngine()
	cs := session(t, eng, Options{MaxConcurrency: 1}, nil)
	for _, tc := range []struct{ tool, fn, wat string }{{"run_export", "block", "(module)"}, {"call_plugin", "block", "plugin"}} {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tc.tool, Arguments: map[string]any{"module": map[string]any{"wat": tc.wat}, "function": tc.fn}})
			errc <- err
		}()
		select {
		case <-eng.Started:
		case <-time.After(hang):
			t.Fatal("the run did not start")
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("%s: the cancelled call returned %v", tc.tool, err)
		}
		// The one run slot is free again only if the run stopped: the
		// next call would wait for it otherwise (and fail by the hang bound).
		if res, out := callTool(t, cs, "run_export", map[string]any{"module": map[string]any{"wat": "(module)"}, "function": "run"}); errorKind(t, res, out) != "" {
			t.Errorf("after the cancel: %v", out)
		}
	}
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if !slices.ContainsFunc(eng.ended, func(err error) bool { return errors.Is(err, protocol.KindCancelled) }) {
		t.Errorf("no run ended cancelled: %v", eng.ended)
	}
}

func TestCancellingCallsWaitingForASlot(t *testing.T) {
	eng := newEngine()
	cs := session(t, eng, Options{MaxConcurrency: 1}, nil)
	gated := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_export", Arguments: map[string]any{"module": map[string]any{"wat": "(module)"}, "function": "gate"}})
		gated <- err
	}()
	<-eng.Started // the slot is taken
	// a storm of calls that wait for the slot, each cancelled
	var wg sync.WaitGroup
	for range 50 {
		ctx, cancel := context.WithCancel(context.Background())
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_export", Arguments: map[string]any{"module": map[string]any{"wat": "(module)"}, "function": "run"}})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("a cancelled call returned %v", err)
			}
		}()
		cancel()
	}
	wg.Wait()
	close(eng.Gate)
	if err := <-gated; err != nil {
		t.Fatal(err)
	}
	if res, out := callTool(t, cs, "run_export", map[string]any{"module": map[string]any{"wat": "(module)"}, "function": "run"}); errorKind(t, res, out) != "" {
		t.Errorf("after the storm: %v", out)
	}
}
