package main

// Long-lived instances and Extism plugins through the real binary and the
// Go client: instantiate, call, release, plugin runs.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/protocol"
)

var (
	instanceCacheOnce sync.Once
	instanceCache     string
)

// instanceCacheDir is a compile cache shared by this package's sidecars,
// so the Go plugin (seconds to compile on a loaded machine) is compiled
// once per test binary. It lives next to the built binary and goes with it.
func instanceCacheDir(t *testing.T) string {
	instanceCacheOnce.Do(func() {
		instanceCache = filepath.Join(filepath.Dir(binPath), "instance-cache")
		if err := os.MkdirAll(instanceCache, 0o700); err != nil {
			t.Fatal(err)
		}
	})
	return instanceCache
}

// startPlugins starts a sidecar for instance tests.
func startPlugins(t *testing.T, args ...string) *sandboxd.Client {
	t.Helper()
	c, _ := startClient(t, binPath, append([]string{"--cache-dir", instanceCacheDir(t)}, args...)...)
	return c
}

// hangLimits bound a test's instance where its limits are not under test:
// a deadline and a compile time no loaded machine reaches.
func hangLimits(extra map[string]uint64) map[string]uint64 {
	l := map[string]uint64{"timeoutMs": 60_000, "compileTimeoutMs": 300_000}
	for k, v := range extra {
		l[k] = v
	}
	return l
}

func goPlugin(t *testing.T) protocol.ModuleSpec {
	return protocol.ModuleSpec{Path: sandboxd.Str(pluginPath(t, "go/plugin.wasm"))}
}

func watPlugin(t *testing.T) protocol.ModuleSpec {
	return protocol.ModuleSpec{Path: sandboxd.Str(pluginPath(t, "wat/plugin.wat"))}
}

// pluginCaps grant what the test plugins import.
func pluginCaps() *protocol.CapabilitySpec {
	return &protocol.CapabilitySpec{Log: true, WASI: &protocol.WASISpec{}}
}

func instantiate(t *testing.T, c *sandboxd.Client, p sandboxd.InstantiateParams) *sandboxd.Instance {
	t.Helper()
	if p.Limits == nil {
		p.Limits = hangLimits(nil)
	}
	in, err := c.Instantiate(ctxT(t, 5*time.Minute), p)
	if err != nil {
		t.Fatalf("instantiate: %v", err)
	}
	return in
}

// callOut calls a plugin function and returns its output as text.
func callOut(t *testing.T, in *sandboxd.Instance, fn string, input string) string {
	t.Helper()
	res, err := in.Call(ctxT(t, time.Minute), fn, sandboxd.CallOptions{Input: []byte(input)})
	if err != nil {
		t.Fatalf("call %s(%q): %v", fn, input, err)
	}
	if res.Output == nil {
		t.Fatalf("call %s: no output in the result", fn)
	}
	return string(*res.Output)
}

// TestInstancePlugins runs the Go PDK plugin and the WAT plugin through
// instantiate and call: input, output, vars, config, levelled logs, the
// plugin's own error (the instance stays), binary bytes both ways.
func TestInstancePlugins(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mod  func(*testing.T) protocol.ModuleSpec
		logs []string // level: line of the logs function
	}{
		{"go", goPlugin, []string{"debug: a debug line", "info: an info line", "warn: a warn line", "error: an error line"}},
		{"wat", watPlugin, []string{"info: hello from info", "warn: careful: warn"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := startPlugins(t)
			p := sandboxd.InstantiateParams{Module: tc.mod(t), Capabilities: pluginCaps(), Config: map[string]string{"greeting": "hi there"}}
			in := instantiate(t, c, p)
			if !in.Result.Plugin || !strings.HasPrefix(in.ID, "inst-") || in.Result.ModuleID == "" {
				t.Fatalf("instantiate result %+v", in.Result)
			}
			if got := callOut(t, in, "greet", "Ada"); got != "Hello, Ada!" && got != "Hello, Ada" {
				t.Fatalf("greet: %q", got)
			}
			// The Go plugin outputs the count in decimal, the WAT plugin as
			// a little-endian u64.
			counted := func(n int) string {
				if tc.name == "wat" {
					return string([]byte{byte(n), 0, 0, 0, 0, 0, 0, 0})
				}
				return fmt.Sprint(n)
			}
			for want := 1; want <= 3; want++ {
				if got := callOut(t, in, "count", ""); got != counted(want) {
					t.Fatalf("count call %d: %q", want, got)
				}
			}
			if got := callOut(t, in, "config", ""); got != "hi there" {
				t.Fatalf("config: %q", got)
			}
			var lines []string
			res, err := in.Call(ctxT(t, time.Minute), "logs", sandboxd.CallOptions{Input: []byte{},
				Log: func(seq int, level, line string) { lines = append(lines, level+": "+line) }})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(lines, "|") != strings.Join(tc.logs, "|") || res.LogLines != len(tc.logs) {
				t.Fatalf("logs: %q (logLines %d), want %q", lines, res.LogLines, tc.logs)
			}

			_, err = in.Call(ctxT(t, time.Minute), "fail", sandboxd.CallOptions{Input: []byte("boom")})
			var pe *sandboxd.PluginError
			if !errors.As(err, &pe) || pe.Function != "fail" || pe.ReturnCode != 1 || !strings.Contains(pe.Message, "on purpose") {
				t.Fatalf("fail: want a PluginError with the plugin's message, got %T %v", err, err)
			}
			if asRPCError(t, err).Code != 10 || sandboxd.InstanceClosed(err) {
				t.Fatalf("fail: code %d, instanceClosed %v", asRPCError(t, err).Code, sandboxd.InstanceClosed(err))
			}
			if tc.name == "go" && pe.Message != "failed on purpose: boom" {
				t.Fatalf("fail: message %q", pe.Message)
			}
			// The instance is still usable, its state intact.
			if got := callOut(t, in, "count", ""); got != counted(4) {
				t.Fatalf("count after the plugin error: %q", got)
			}

			bin := []byte{0xff, 0x00, 'a', 0xc3, 0x28, 0x80}
			res, err = in.Call(ctxT(t, time.Minute), "echo", sandboxd.CallOptions{Input: bin})
			if err != nil || res.Output == nil || string(*res.Output) != string(bin) {
				t.Fatalf("echo: %v, %v", res, err)
			}

			// A new instance of the same module starts its vars afresh.
			other := instantiate(t, c, p)
			if other.ID == in.ID {
				t.Fatalf("two instances named %s", in.ID)
			}
			if got := callOut(t, other, "count", ""); got != counted(1) {
				t.Fatalf("count on a new instance: %q", got)
			}
			if err := in.Release(ctxT(t, time.Minute)); err != nil {
				t.Fatal(err)
			}
			_, err = in.Call(ctxT(t, time.Minute), "greet", sandboxd.CallOptions{})
			var ce *sandboxd.InstanceClosedError
			if !errors.As(err, &ce) || ce.Instance != in.ID || ce.Reason != "released" || !errors.Is(err, sandboxd.ErrInstanceClosed) {
				t.Fatalf("call after release: %T %v", err, err)
			}
		})
	}
}

// TestInstanceFencesCloseTheInstance: the deadline stops an endless
// plugin function and the memory cap a hog; each closes its instance, and
// a later call gets -32001 naming why.
func TestInstanceFencesCloseTheInstance(t *testing.T) {
	t.Parallel()
	c := startPlugins(t)
	for _, tc := range []struct {
		fn, kind string
		limits   map[string]uint64
		call     map[string]uint64
	}{
		{"spin", "timeout", nil, map[string]uint64{"timeoutMs": 200, "fuel": hugeFuel}},
		{"hog", "memory_limit_exceeded", map[string]uint64{"memoryBytes": 32 << 20}, nil},
	} {
		in := instantiate(t, c, sandboxd.InstantiateParams{Module: goPlugin(t), Capabilities: pluginCaps(), Limits: hangLimits(tc.limits)})
		_, err := in.Call(ctxT(t, time.Minute), tc.fn, sandboxd.CallOptions{Limits: tc.call})
		if e := asRPCError(t, err); e.Kind() != tc.kind || !sandboxd.InstanceClosed(err) {
			t.Fatalf("%s: %v (kind %q, instanceClosed %v), want %s and the instance closed", tc.fn, err, e.Kind(), sandboxd.InstanceClosed(err), tc.kind)
		}
		_, err = in.Call(ctxT(t, time.Minute), "greet", sandboxd.CallOptions{})
		var ce *sandboxd.InstanceClosedError
		want := fmt.Sprintf("closed after %s in a call of %q", tc.kind, tc.fn)
		if !errors.As(err, &ce) || ce.Reason != want || asRPCError(t, err).Code != protocol.CodeInstanceClosed {
			t.Fatalf("after %s: %v, want -32001 %q", tc.fn, err, want)
		}
	}
}

// statefulWAT keeps a global and memory between calls: push(v) appends v
// and returns how many values came before; at(i) reads one back; spin
// never returns; work(n) loops n times and returns.
const statefulWAT = `(module
  (memory 1)
  (global $n (mut i32) (i32.const 0))
  (func (export "push") (param $v i32) (result i32)
    (i32.store (i32.mul (global.get $n) (i32.const 4)) (local.get $v))
    (global.set $n (i32.add (global.get $n) (i32.const 1)))
    (i32.sub (global.get $n) (i32.const 1)))
  (func (export "at") (param $i i32) (result i32)
    (i32.load (i32.mul (local.get $i) (i32.const 4))))
  (func (export "count") (result i32) (global.get $n))
  (func (export "spin") (loop $l (br $l)))
  (func (export "work") (param $k i64) (result i64)
    (local $i i64)
    (loop $l
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br_if $l (i64.lt_u (local.get $i) (local.get $k))))
    (local.get $i)))`

func i32Of(t *testing.T, res *sandboxd.CallResult) int {
	t.Helper()
	if len(res.Values) != 1 {
		t.Fatalf("values %+v", res.Values)
	}
	var n int
	if _, err := fmt.Sscan(string(res.Values[0].Value), &n); err != nil {
		t.Fatalf("value %s: %v", res.Values[0].Value, err)
	}
	return n
}

// TestInstancePlainModuleKeepsState: a module without the ABI; the second
// call sees the first call's global and memory writes.
func TestInstancePlainModuleKeepsState(t *testing.T) {
	t.Parallel()
	c := startPlugins(t)
	in := instantiate(t, c, sandboxd.InstantiateParams{Module: protocol.ModuleSpec{WAT: sandboxd.Str(statefulWAT)}})
	if in.Result.Plugin {
		t.Fatal("a plain module reported as a plugin")
	}
	ctx := ctxT(t, time.Minute)
	for i, v := range []int{41, 42} {
		res, err := in.Call(ctx, "push", sandboxd.CallOptions{Args: rawArgs(v)})
		if err != nil || i32Of(t, res) != i || res.Output != nil {
			t.Fatalf("push(%d): %+v, %v", v, res, err)
		}
	}
	res, err := in.Call(ctx, "at", sandboxd.CallOptions{Args: rawArgs(0)})
	if err != nil || i32Of(t, res) != 41 {
		t.Fatalf("at(0) after two calls: %+v, %v (the memory write of the first call is gone)", res, err)
	}
	_, err = in.Call(ctx, "push", sandboxd.CallOptions{Args: rawArgs(1), Input: []byte("x")})
	if e := asRPCError(t, err); e.Code != protocol.CodeInvalidParams || !strings.HasPrefix(e.Message, `input: "push" is not a plugin function`) {
		t.Fatalf("input for a plain function: %v", err)
	}
	_, err = in.Call(ctx, "nope", sandboxd.CallOptions{})
	if e := asRPCError(t, err); e.Kind() != "export" || sandboxd.InstanceClosed(err) {
		t.Fatalf("missing export: %v", err)
	}
	if res, err := in.Call(ctx, "count", sandboxd.CallOptions{}); err != nil || i32Of(t, res) != 2 {
		t.Fatalf("count after an export error: %+v, %v", res, err)
	}
}

// TestInstancesConcurrentAndIsolated: many instances called in parallel
// each see only their own state; one instance's timeout leaves the others
// as they were.
func TestInstancesConcurrentAndIsolated(t *testing.T) {
	t.Parallel()
	c := startPlugins(t, "--max-concurrency", "4")
	const instances, calls = 8, 25
	ins := make([]*sandboxd.Instance, instances)
	for i := range ins {
		ins[i] = instantiate(t, c, sandboxd.InstantiateParams{Module: protocol.ModuleSpec{WAT: sandboxd.Str(statefulWAT)}})
	}
	var wg sync.WaitGroup
	errs := make(chan error, instances+1)
	for i, in := range ins {
		wg.Go(func() {
			ctx := ctxT(t, 2*time.Minute)
			for k := range calls {
				res, err := in.Call(ctx, "push", sandboxd.CallOptions{Args: rawArgs(i*1000 + k)})
				if err != nil {
					errs <- err
					return
				}
				if n := i32Of(t, res); n != k {
					errs <- fmt.Errorf("instance %d: push %d came after %d values", i, k, n)
					return
				}
			}
		})
	}
	victim := instantiate(t, c, sandboxd.InstantiateParams{Module: protocol.ModuleSpec{WAT: sandboxd.Str(statefulWAT)}})
	wg.Go(func() {
		_, err := victim.Call(ctxT(t, time.Minute), "spin", sandboxd.CallOptions{Limits: map[string]uint64{"timeoutMs": 100, "fuel": hugeFuel}})
		if e := asRPCError(t, err); e.Kind() != "timeout" {
			errs <- fmt.Errorf("spin: %v", err)
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, in := range ins {
		for _, k := range []int{0, calls - 1} {
			res, err := in.Call(ctxT(t, time.Minute), "at", sandboxd.CallOptions{Args: rawArgs(k)})
			if err != nil || i32Of(t, res) != i*1000+k {
				t.Fatalf("instance %d at(%d): %+v, %v", i, k, res, err)
			}
		}
	}
}

// TestInstanceMaxInstances: past --max-instances, instantiate is -32002
// with the counts; releasing one makes room.
func TestInstanceMaxInstances(t *testing.T) {
	t.Parallel()
	c := startPlugins(t, "--max-instances", "2")
	mod := sandboxd.InstantiateParams{Module: protocol.ModuleSpec{WAT: sandboxd.Str(statefulWAT)}}
	a := instantiate(t, c, mod)
	instantiate(t, c, mod)
	_, err := c.Instantiate(ctxT(t, time.Minute), mod)
	var tm *sandboxd.TooManyInstancesError
	if !errors.As(err, &tm) || tm.Instances != 2 || tm.MaxInstances != 2 ||
		asRPCError(t, err).Message != "too many instances: 2 are live (the maximum is 2); release one" {
		t.Fatalf("third instantiate: %T %v", err, err)
	}
	if err := a.Release(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	instantiate(t, c, mod)
	st, err := c.Stats(ctxT(t, time.Minute))
	if err != nil || st.Instances == nil || *st.Instances != (protocol.InstancesInfo{Live: 2, Max: 2, Created: 3}) {
		t.Fatalf("stats.instances: %+v, %v", st.Instances, err)
	}
}

// TestInstanceIdleEviction: an instance without a call for --instance-idle
// is evicted, counted in stats, and a later call says so.
func TestInstanceIdleEviction(t *testing.T) {
	t.Parallel()
	c := startPlugins(t, "--instance-idle", "100ms")
	in := instantiate(t, c, sandboxd.InstantiateParams{Module: protocol.ModuleSpec{WAT: sandboxd.Str(statefulWAT)}})
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := c.Stats(ctxT(t, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if st.Instances.Evicted == 1 && st.Instances.Live == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never evicted: %+v", st.Instances)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, err := in.Call(ctxT(t, time.Minute), "count", sandboxd.CallOptions{})
	var ce *sandboxd.InstanceClosedError
	if !errors.As(err, &ce) || !strings.HasPrefix(ce.Reason, "evicted after ") {
		t.Fatalf("call after eviction: %v", err)
	}
}

// TestPluginRun: `run` of a plugin instantiates, calls and releases in one
// request, with input and config; input on a plain module is -32602.
func TestPluginRun(t *testing.T) {
	t.Parallel()
	c := startPlugins(t)
	in := &protocol.Bytes{}
	*in = protocol.Bytes("Ada")
	res, err := c.Run(ctxT(t, 5*time.Minute), sandboxd.RunParams{Module: goPlugin(t), Function: "greet", Input: in,
		Capabilities: pluginCaps(), Limits: hangLimits(nil)}, nil)
	if err != nil || res.Output == nil || string(*res.Output) != "Hello, Ada!" || res.ModuleID == "" {
		t.Fatalf("plugin run: %+v, %v", res, err)
	}
	res, err = c.Run(ctxT(t, time.Minute), sandboxd.RunParams{Module: watPlugin(t), Function: "config",
		Config: map[string]string{"greeting": "hey"}, Capabilities: pluginCaps(), Limits: hangLimits(nil)}, nil)
	if err != nil || res.Output == nil || string(*res.Output) != "hey" {
		t.Fatalf("plugin run with config: %+v, %v", res, err)
	}
	_, err = c.Run(ctxT(t, time.Minute), sandboxd.RunParams{Module: watPlugin(t), Function: "fail",
		Capabilities: pluginCaps(), Limits: hangLimits(nil)}, nil)
	if e := asRPCError(t, err); e.Kind() != "plugin_error" || e.Code != 10 {
		t.Fatalf("plugin run of fail: %v", err)
	}
	_, err = c.Run(ctxT(t, time.Minute), sandboxd.RunParams{Module: modPath("well_behaved.wat"), Function: "add",
		Args: rawArgs(1, 2), Input: in}, nil)
	if e := asRPCError(t, err); e.Code != protocol.CodeInvalidParams || !strings.HasPrefix(e.Message, "input: ") {
		t.Fatalf("input on a plain run: %v", err)
	}
	st, err := c.Stats(ctxT(t, time.Minute))
	if err != nil || st.Instances == nil || st.Instances.Live != 0 {
		t.Fatalf("a plugin run left an instance: %+v, %v", st.Instances, err)
	}
}

// TestInstanceInitialize: initialize reports the instance settings and the
// ABI functions served.
func TestInstanceInitialize(t *testing.T) {
	t.Parallel()
	c := startPlugins(t, "--max-instances", "7", "--instance-idle", "90s")
	var res protocol.InitializeResult
	if err := c.Call(context.Background(), "initialize", map[string]any{}, &res); err != nil {
		t.Fatal(err)
	}
	if res.MaxInstances != 7 || res.InstanceIdleMs != 90_000 || !slices.Contains(res.Capabilities.Extism, "var_set") || slices.Contains(res.Capabilities.Extism, "http_request") {
		t.Fatalf("initialize: maxInstances %d, instanceIdleMs %d, extism %v", res.MaxInstances, res.InstanceIdleMs, res.Capabilities.Extism)
	}
}

// TestServeInstanceFlags: the instance flags are validated and documented.
func TestServeInstanceFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--max-instances", "0"}, {"--instance-idle", "-1s"}, {"--instance-idle", "soon"}} {
		var stderr strings.Builder
		code := serveMain(args, strings.NewReader(""), &strings.Builder{}, &stderr)
		if code != exitServeNoShutdown || !strings.Contains(stderr.String(), strings.TrimPrefix(args[0], "--")) {
			t.Fatalf("serve %v: exit %d, stderr %q", args, code, stderr.String())
		}
	}
	var out strings.Builder
	serveMain([]string{"--help"}, strings.NewReader(""), &out, &out)
	for _, want := range []string{"-max-instances int", "(default 64)", "-instance-idle duration", "(default 10m0s)", "-max-store-instances"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("serve --help lacks %q:\n%s", want, out.String())
		}
	}
}
