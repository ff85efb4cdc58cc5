package sandbox_test

import (
	"context"
	"encoding/binary"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

const watPlugin = "../testdata/plugins/wat/plugin.wat"

func pluginInstance(t testing.TB, e *sandbox.Engine, path string, mutate func(*sandbox.InstanceRequest)) *sandbox.Instance {
	t.Helper()
	m, _, err := e.Compile(context.Background(), sandbox.Source{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	req := sandbox.InstanceRequest{Module: m, Limits: limits.Defaults(), Capabilities: sandbox.Capabilities{Log: true}}
	if mutate != nil {
		mutate(&req)
	}
	in, err := e.Instantiate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Release)
	return in
}

func pluginCall(t testing.TB, in *sandbox.Instance, fn string, input []byte) *sandbox.CallResult {
	t.Helper()
	res, err := in.Call(context.Background(), sandbox.CallRequest{Function: fn, Input: input})
	if err != nil {
		t.Fatalf("%s: %v", fn, err)
	}
	return res
}

func TestWATPluginGreets(t *testing.T) {
	in := pluginInstance(t, engine(t), watPlugin, nil)
	if !in.IsPlugin() {
		t.Fatal("a module importing extism:host/env is not a plugin")
	}
	for _, name := range []string{"world", "", strings.Repeat("x", 100_000)} {
		res := pluginCall(t, in, "greet", []byte(name))
		if got := string(res.PluginOutput); got != "Hello, "+name {
			t.Fatalf("greet(%d bytes) = %q…", len(name), got[:min(len(got), 40)])
		}
		if res.Values[0].I32() != 0 {
			t.Fatalf("return code %v", res.Values)
		}
	}
}

func TestWATPluginEchoesBinary(t *testing.T) {
	in := pluginInstance(t, engine(t), watPlugin, nil)
	input := make([]byte, 70_000)
	for i := range input {
		input[i] = byte(i * 7)
	}
	res := pluginCall(t, in, "echo", input)
	if string(res.PluginOutput) != string(input) {
		t.Fatal("echo changed the bytes")
	}
	if res := pluginCall(t, in, "echo", nil); len(res.PluginOutput) != 0 || res.PluginOutput == nil {
		t.Fatalf("echo of nothing = %v, want empty non-nil output", res.PluginOutput)
	}
}

func TestWATPluginVarsPersistPerInstance(t *testing.T) {
	e := engine(t)
	in := pluginInstance(t, e, watPlugin, nil)
	for want := uint64(1); want <= 3; want++ {
		res := pluginCall(t, in, "count", nil)
		if got := binary.LittleEndian.Uint64(res.PluginOutput); got != want {
			t.Fatalf("count = %d, want %d", got, want)
		}
	}
	fresh := pluginInstance(t, e, watPlugin, nil)
	if got := binary.LittleEndian.Uint64(pluginCall(t, fresh, "count", nil).PluginOutput); got != 1 {
		t.Fatalf("a new instance counts from %d, want 1", got)
	}
}

func TestWATPluginVarBytesBound(t *testing.T) {
	// The key "n" and an 8-byte value need 9 bytes, and 128 for the entry.
	in := pluginInstance(t, engine(t), watPlugin, func(r *sandbox.InstanceRequest) { r.VarBytes = 136 })
	_, err := in.Call(context.Background(), sandbox.CallRequest{Function: "count"})
	se := wantKind(t, err, sandbox.KindMemoryLimitExceeded)
	if se.Resource != sandbox.ResourceVars || se.Limit != 136 || se.Requested != 137 {
		t.Fatalf("error %+v, want resource vars, limit 136, requested 137", se)
	}
	_, err = in.Call(context.Background(), sandbox.CallRequest{Function: "count"})
	wantClosed(t, err, "memory_limit_exceeded")
}

func TestWATPluginConfig(t *testing.T) {
	in := pluginInstance(t, engine(t), watPlugin, func(r *sandbox.InstanceRequest) {
		r.Config = map[string]string{"greeting": "bonjour"}
	})
	if got := string(pluginCall(t, in, "config", nil).PluginOutput); got != "bonjour" {
		t.Fatalf("config = %q", got)
	}
	none := pluginInstance(t, engine(t), watPlugin, nil)
	if got := string(pluginCall(t, none, "config", nil).PluginOutput); got != "(none)" {
		t.Fatalf("config without the key = %q", got)
	}
}

func TestWATPluginLogsWithLevels(t *testing.T) {
	in := pluginInstance(t, engine(t), watPlugin, nil)
	var lines []string
	res, err := in.Call(context.Background(), sandbox.CallRequest{Function: "logs", Log: func(level sandbox.LogLevel, line string) {
		lines = append(lines, string(level)+":"+line)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(lines, "|") != "info:hello from info|warn:careful: warn" || res.LogLines != 2 {
		t.Fatalf("lines %q (%d)", lines, res.LogLines)
	}
	// The budget counts each line at its wire cost, level included: a
	// budget for the first line only drops the second.
	first := sandbox.LogLineCost("hello from info") + uint64(len(`,"level":"info"`))
	lines = nil
	res, err = in.Call(context.Background(), sandbox.CallRequest{Function: "logs", Limits: sandbox.CallLimits{LogBytes: first},
		Log: func(level sandbox.LogLevel, line string) { lines = append(lines, line) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 1 || !res.LogTruncated {
		t.Fatalf("with a budget of %d: lines %q truncated %v", first, lines, res.LogTruncated)
	}
}

// TestWATPluginLogWithoutTheCapability: Extism links log_* for every
// plugin, so a plugin that logs runs without the log capability; its
// lines are dropped and counted, as Extism drops them with no logger set.
func TestWATPluginLogWithoutTheCapability(t *testing.T) {
	in := pluginInstance(t, engine(t), watPlugin, func(r *sandbox.InstanceRequest) { r.Capabilities.Log = false })
	var lines []string
	res, err := in.Call(context.Background(), sandbox.CallRequest{Function: "logs",
		Log: func(level sandbox.LogLevel, line string) { lines = append(lines, line) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 0 || res.LogLines != 0 || res.LogDropped != 2 {
		t.Fatalf("lines %q, %d sent, %d dropped; want none sent and 2 dropped", lines, res.LogLines, res.LogDropped)
	}
}

func TestWATPluginErrorKeepsTheInstance(t *testing.T) {
	in := pluginInstance(t, engine(t), watPlugin, nil)
	pluginCall(t, in, "count", nil)
	_, err := in.Call(context.Background(), sandbox.CallRequest{Function: "fail"})
	se := wantKind(t, err, sandbox.KindPluginError)
	if se.Message != "it failed on purpose" || se.ReturnCode != 1 || se.Function != "fail" {
		t.Fatalf("plugin error %+v", se)
	}
	if info := se.Kind.Info(); info.ExitCode != 10 || info.RPCCode != 10 {
		t.Fatalf("plugin_error codes %+v, want 10", info)
	}
	_, err = in.Call(context.Background(), sandbox.CallRequest{Function: "rc"})
	se = wantKind(t, err, sandbox.KindPluginError)
	if se.ReturnCode != 3 || !strings.Contains(se.Message, "returned 3") {
		t.Fatalf("plugin error %+v", se)
	}
	// The instance lives on, vars and all; the error does not leak into
	// the next call.
	if got := binary.LittleEndian.Uint64(pluginCall(t, in, "count", nil).PluginOutput); got != 2 {
		t.Fatalf("count after plugin errors = %d, want 2", got)
	}
}

func TestWATPluginDeadlineClosesIt(t *testing.T) {
	in := pluginInstance(t, engine(t), watPlugin, nil)
	_, err := in.Call(context.Background(), sandbox.CallRequest{Function: "spin", Limits: sandbox.CallLimits{Timeout: 20 * time.Millisecond}})
	wantKind(t, err, sandbox.KindTimeout)
	_, err = in.Call(context.Background(), sandbox.CallRequest{Function: "greet", Input: []byte("x")})
	wantClosed(t, err, `timeout in a call of "spin"`)
}

func TestWATPluginKernelMemoryCountsTowardTheCap(t *testing.T) {
	const capBytes = 4 << 20
	in := pluginInstance(t, engine(t), watPlugin, func(r *sandbox.InstanceRequest) { r.Limits.MemoryBytes = capBytes })
	_, err := in.Call(context.Background(), sandbox.CallRequest{Function: "hog"})
	se := wantKind(t, err, sandbox.KindMemoryLimitExceeded)
	if se.Usage == nil || se.Usage.PeakMemoryBytes > capBytes || se.Usage.PeakMemoryBytes < capBytes-(2<<20) {
		t.Fatalf("usage %+v: the peak must count the kernel and stay within %d", se.Usage, capBytes)
	}
	if se.Requested <= capBytes {
		t.Fatalf("requested %d, want above the cap", se.Requested)
	}
}

func TestWATPluginOwnMemoryAndKernelShareTheCap(t *testing.T) {
	const capBytes = 1 << 20
	in := pluginInstance(t, engine(t), watPlugin, func(r *sandbox.InstanceRequest) { r.Limits.MemoryBytes = capBytes })
	// Fill the kernel with a large input (and echo's copy of it) first,
	// then let the plugin grow its own memory until refused: the sum is
	// what the cap bounds. (600 KiB, twice, does not fit: echo's alloc is
	// refused, and its output_set of that refusal's 0 is no block.)
	pluginCall(t, in, "echo", make([]byte, 400<<10))
	_, err := in.Call(context.Background(), sandbox.CallRequest{Function: "grow"})
	se := wantKind(t, err, sandbox.KindMemoryLimitExceeded)
	if se.Usage.PeakMemoryBytes > capBytes {
		t.Fatalf("peak %d over the cap %d", se.Usage.PeakMemoryBytes, capBytes)
	}
}

func TestWATPluginInputBeyondTheCap(t *testing.T) {
	in := pluginInstance(t, engine(t), watPlugin, func(r *sandbox.InstanceRequest) { r.Limits.MemoryBytes = 1 << 20 })
	_, err := in.Call(context.Background(), sandbox.CallRequest{Function: "echo", Input: make([]byte, 2<<20)})
	wantKind(t, err, sandbox.KindMemoryLimitExceeded)
	// Refused before the kernel was touched: the instance stays usable.
	if res := pluginCall(t, in, "echo", []byte("still here")); string(res.PluginOutput) != "still here" {
		t.Fatalf("echo after a refused input = %q", res.PluginOutput)
	}
}

func TestPluginImportsRefused(t *testing.T) {
	cases := map[string]struct{ imp, want string }{
		"http":         {`(import "extism:host/env" "http_request" (func (param i64 i64) (result i64)))`, "no network"},
		"user":         {`(import "extism:host/user" "my_fn" (func (param i64) (result i64)))`, "declare it in hostFunctions"},
		"unknown":      {`(import "extism:host/env" "teleport" (func))`, "no such function"},
		"signature":    {`(import "extism:host/env" "alloc" (func (param i32) (result i32)))`, "wrong signature"},
		"memory":       {`(import "extism:host/env" "memory" (memory 1))`, "only functions"},
		"other module": {`(import "extism:host/env" "alloc" (func (param i64) (result i64))) (import "env" "x" (func))`, "env::x"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			m, _, err := engine(t).Compile(context.Background(), sandbox.Source{WAT: "(module " + c.imp + ")"})
			if err != nil {
				t.Fatal(err)
			}
			_, err = engine(t).Instantiate(context.Background(), sandbox.InstanceRequest{Module: m, Limits: limits.Defaults(),
				Capabilities: sandbox.Capabilities{Log: true}})
			se := wantKind(t, err, sandbox.KindDisallowedImport)
			if !strings.Contains(se.Message, c.want) {
				t.Fatalf("message %q does not say %q", se.Message, c.want)
			}
		})
	}
}

func TestWATPluginInstancesInParallel(t *testing.T) {
	e := engine(t)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := 0; i < n; i++ {
		in := pluginInstance(t, e, watPlugin, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := uint64(1); k <= 15; k++ {
				res, err := in.Call(context.Background(), sandbox.CallRequest{Function: "count"})
				if err != nil {
					errs <- err.Error()
					return
				}
				if got := binary.LittleEndian.Uint64(res.PluginOutput); got != k {
					errs <- "count out of step: vars leaked between instances"
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
}

func TestWATPluginFileIsCommitted(t *testing.T) {
	if _, err := os.Stat(watPlugin); err != nil {
		t.Fatal(err)
	}
}

func TestWATPluginOutputBoundedByOutputBytes(t *testing.T) {
	in := pluginInstance(t, engine(t), watPlugin, nil)
	input := []byte(strings.Repeat("abcdefgh", 1000))
	res, err := in.Call(context.Background(), sandbox.CallRequest{Function: "echo", Input: input, Limits: sandbox.CallLimits{OutputBytes: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.PluginOutput) != string(input[:100]) || !res.PluginOutputTruncated {
		t.Fatalf("%d bytes, truncated %v: want the first 100 and truncated", len(res.PluginOutput), res.PluginOutputTruncated)
	}
	res = pluginCall(t, in, "echo", input)
	if len(res.PluginOutput) != len(input) || res.PluginOutputTruncated {
		t.Fatalf("under the default budget: %d bytes, truncated %v", len(res.PluginOutput), res.PluginOutputTruncated)
	}
}
