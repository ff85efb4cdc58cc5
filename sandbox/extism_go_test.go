package sandbox_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
)

// goPlugin is built from testdata/plugins/go with Extism's Go PDK v1.1.3
// (make plugins). Go plugins import WASI, so they need the wasi grant.
const goPlugin = "../testdata/plugins/go/plugin.wasm"

var (
	goPluginOnce sync.Once
	goPluginMod  *sandbox.Module
	goPluginErr  error
)

func goPluginModule(t testing.TB) *sandbox.Module {
	t.Helper()
	goPluginOnce.Do(func() {
		goPluginMod, _, goPluginErr = engine(t).Compile(context.Background(), sandbox.Source{Path: goPlugin})
	})
	if goPluginErr != nil {
		t.Fatal(goPluginErr)
	}
	return goPluginMod
}

func goPluginInstance(t testing.TB, mutate func(*sandbox.InstanceRequest)) *sandbox.Instance {
	t.Helper()
	req := sandbox.InstanceRequest{Module: goPluginModule(t), Limits: hangLimits(),
		Capabilities: sandbox.Capabilities{Log: true, WASI: &sandbox.WASI{}}}
	if mutate != nil {
		mutate(&req)
	}
	in, err := engine(t).Instantiate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Release)
	return in
}

func TestGoPluginNeedsWASI(t *testing.T) {
	_, err := engine(t).Instantiate(context.Background(), sandbox.InstanceRequest{Module: goPluginModule(t), Limits: hangLimits(),
		Capabilities: sandbox.Capabilities{Log: true}})
	se := wantKind(t, err, sandbox.KindDisallowedImport)
	if se.Module != sandbox.WASIModule {
		t.Fatalf("refusal %+v, want the WASI imports named", se)
	}
}

func TestGoPluginGreets(t *testing.T) {
	in := goPluginInstance(t, nil)
	for _, name := range []string{"Ada", "", "名前"} {
		if got := string(pluginCall(t, in, "greet", []byte(name)).PluginOutput); got != "Hello, "+name+"!" {
			t.Fatalf("greet(%q) = %q", name, got)
		}
	}
}

func TestGoPluginEchoesBinary(t *testing.T) {
	in := goPluginInstance(t, nil)
	input := make([]byte, 256*1024+3)
	for i := range input {
		input[i] = byte(i*31 + i>>8)
	}
	if got := pluginCall(t, in, "echo", input).PluginOutput; !bytes.Equal(got, input) {
		t.Fatalf("echo returned %d bytes that differ from the %d sent", len(got), len(input))
	}
}

func TestGoPluginCounterPersistsPerInstance(t *testing.T) {
	in := goPluginInstance(t, nil)
	for _, want := range []string{"1", "2", "3"} {
		if got := string(pluginCall(t, in, "count", nil).PluginOutput); got != want {
			t.Fatalf("count = %q, want %q", got, want)
		}
	}
	fresh := goPluginInstance(t, nil)
	if got := string(pluginCall(t, fresh, "count", nil).PluginOutput); got != "1" {
		t.Fatalf("a new instance counts from %q, want 1", got)
	}
}

func TestGoPluginConfig(t *testing.T) {
	in := goPluginInstance(t, func(r *sandbox.InstanceRequest) { r.Config = map[string]string{"greeting": "salut"} })
	if got := string(pluginCall(t, in, "config", nil).PluginOutput); got != "salut" {
		t.Fatalf("config = %q", got)
	}
	none := goPluginInstance(t, nil)
	_, err := none.Call(context.Background(), sandbox.CallRequest{Function: "config"})
	if se := wantKind(t, err, sandbox.KindPluginError); se.Message != "no greeting in the config" {
		t.Fatalf("message %q", se.Message)
	}
}

func TestGoPluginLogsWithLevels(t *testing.T) {
	in := goPluginInstance(t, nil)
	var got []string
	_, err := in.Call(context.Background(), sandbox.CallRequest{Function: "logs", Log: func(level sandbox.LogLevel, line string) {
		got = append(got, string(level)+": "+line)
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := "debug: a debug line|info: an info line|warn: a warn line|error: an error line"
	if strings.Join(got, "|") != want {
		t.Fatalf("lines %q, want %q", got, want)
	}
}

func TestGoPluginErrorKeepsTheInstance(t *testing.T) {
	in := goPluginInstance(t, nil)
	pluginCall(t, in, "count", nil)
	_, err := in.Call(context.Background(), sandbox.CallRequest{Function: "fail", Input: []byte("input 7")})
	se := wantKind(t, err, sandbox.KindPluginError)
	if se.Message != "failed on purpose: input 7" || se.ReturnCode != 1 {
		t.Fatalf("plugin error %+v", se)
	}
	if got := string(pluginCall(t, in, "count", nil).PluginOutput); got != "2" {
		t.Fatalf("count after a plugin error = %q, want 2", got)
	}
}

func TestGoPluginInfiniteLoopStoppedByItsDeadline(t *testing.T) {
	in := goPluginInstance(t, nil)
	pluginCall(t, in, "count", nil)
	_, err := in.Call(context.Background(), sandbox.CallRequest{Function: "spin", Limits: sandbox.CallLimits{Timeout: 50 * time.Millisecond, Fuel: 1 << 50}})
	wantKind(t, err, sandbox.KindTimeout)
	_, err = in.Call(context.Background(), sandbox.CallRequest{Function: "count"})
	wantClosed(t, err, `closed after timeout in a call of "spin"`)
}

func TestGoPluginMemoryHogStoppedByTheCap(t *testing.T) {
	const capBytes = 32 << 20
	in := goPluginInstance(t, func(r *sandbox.InstanceRequest) { r.Limits.MemoryBytes = capBytes })
	_, err := in.Call(context.Background(), sandbox.CallRequest{Function: "hog"})
	se := wantKind(t, err, sandbox.KindMemoryLimitExceeded)
	if se.Usage == nil || se.Usage.PeakMemoryBytes > capBytes {
		t.Fatalf("usage %+v over the cap %d", se.Usage, capBytes)
	}
	_, err = in.Call(context.Background(), sandbox.CallRequest{Function: "greet"})
	wantClosed(t, err, "memory_limit_exceeded")
}
