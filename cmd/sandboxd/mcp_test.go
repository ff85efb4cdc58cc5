package main

// sandboxd mcp end to end: the real binary, spawned by the Go SDK's own
// client (mcp.CommandTransport), under both protocol generations the SDK
// speaks (2026-07-28's discover, and initialize as 2025-11-25 and
// earlier clients do).

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/internal/mcpserver"
)

// mcpHang bounds every wait: a hang fails, nothing is timed.
const mcpHang = time.Minute

// mcpClient is a session with a sandboxd mcp spawned with args, and what
// it streamed as progress.
type mcpClient struct {
	*mcp.ClientSession
	cmd *exec.Cmd

	mu       sync.Mutex
	progress []*mcp.ProgressNotificationParams
	notify   chan struct{}
}

func startMCP(t *testing.T, version string, args ...string) *mcpClient {
	t.Helper()
	cmd := exec.Command(binPath, append([]string{"mcp"}, args...)...)
	cmd.Env = append(os.Environ(), "SANDBOXD_RUNTIMES=") // none next to the test's binary: no snippet tools
	return startMCPCommand(t, version, cmd)
}

func startMCPCommand(t *testing.T, version string, cmd *exec.Cmd) *mcpClient {
	t.Helper()
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	c := &mcpClient{cmd: cmd, notify: make(chan struct{}, 1)}
	client := mcp.NewClient(&mcp.Implementation{Name: "sandboxd-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			c.mu.Lock()
			c.progress = append(c.progress, req.Params)
			c.mu.Unlock()
			select {
			case c.notify <- struct{}{}:
			default:
			}
		}})
	ctx, cancel := context.WithTimeout(context.Background(), mcpHang)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connecting to %v: %v\nstderr:\n%s", cmd.Args, err, stderr.String())
	}
	c.ClientSession = cs
	t.Cleanup(func() {
		// Closing stdin ends the server: it must exit 0 by itself.
		if err := cs.Close(); err != nil {
			t.Errorf("closing the session: %v\nstderr:\n%s", err, stderr.String())
		}
		if cmd.ProcessState != nil && cmd.ProcessState.ExitCode() != 0 {
			t.Errorf("sandboxd mcp exited %d\nstderr:\n%s", cmd.ProcessState.ExitCode(), stderr.String())
		}
		if strings.Contains(stderr.String(), "panic") || strings.Contains(stderr.String(), "RUST_BACKTRACE") {
			t.Errorf("stderr:\n%s", stderr.String())
		}
	})
	return c
}

// call calls a tool and returns its result and structured output.
func (c *mcpClient) call(t *testing.T, tool string, args any) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), mcpHang)
	defer cancel()
	res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res, mcpStructured(t, res)
}

func mcpStructured(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	var out map[string]any
	b, err := json.Marshal(res.StructuredContent)
	if err == nil {
		err = json.Unmarshal(b, &out)
	}
	if err != nil || out == nil {
		t.Fatalf("structured content %v: %v", res.StructuredContent, err)
	}
	return out
}

// kindOf is a result's error kind, "" for a success; isError and the
// structured error must agree.
func kindOf(t *testing.T, res *mcp.CallToolResult, out map[string]any) string {
	t.Helper()
	e, _ := out["error"].(map[string]any)
	if res.IsError != (e != nil) {
		t.Fatalf("isError %v, structured %v", res.IsError, out)
	}
	if e == nil {
		return ""
	}
	return fmt.Sprint(e["kind"])
}

// toolNames lists the tools, each checked to have its schemas.
func (c *mcpClient) toolNames(t *testing.T) []string {
	t.Helper()
	tools, err := c.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		if tl.OutputSchema == nil || tl.InputSchema == nil {
			t.Errorf("%s has no schemas", tl.Name)
		}
	}
	return names
}

// text is a result's text content.
func text(res *mcp.CallToolResult) string {
	if len(res.Content) == 0 {
		return ""
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); ok {
		return tc.Text
	}
	return ""
}

// waitProgress waits until a progress notification satisfies ok.
func (c *mcpClient) waitProgress(t *testing.T, ok func(*mcp.ProgressNotificationParams) bool) {
	t.Helper()
	deadline := time.After(mcpHang)
	for {
		c.mu.Lock()
		for _, p := range c.progress {
			if ok(p) {
				c.mu.Unlock()
				return
			}
		}
		c.mu.Unlock()
		select {
		case <-c.notify:
		case <-deadline:
			t.Fatal("the progress notification never came")
		}
	}
}

var wasiDir = filepath.Join("..", "..", "testdata", "wasi")

func absPath(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// The protocol versions the tests speak: the Go SDK's latest (discover)
// and what the TypeScript SDK 1.32 sends (initialize), and an older one.
var mcpVersions = []string{"", "2025-11-25", "2025-06-18"}

func TestMCPEveryToolEndToEnd(t *testing.T) {
	wasi := absPath(t, wasiDir)
	plugin, err := os.ReadFile(filepath.Join("..", "..", "testdata", "plugins", "wat", "plugin.wat"))
	if err != nil {
		t.Fatal(err)
	}
	for _, version := range mcpVersions {
		t.Run("version="+version, func(t *testing.T) {
			c := startMCP(t, version, "--allow-path-dir", wasi)
			names := c.toolNames(t)
			if strings.Join(names, " ") != "call_plugin run_export run_wasi" {
				t.Errorf("tools %v", names)
			}

			res, out := c.call(t, "run_export", map[string]any{"module": map[string]any{"wat": string(mustRead(t, fixture("well_behaved.wat")))},
				"function": "add", "args": []any{2, 40}})
			if kindOf(t, res, out) != "" || fmt.Sprint(out["values"]) != "[map[type:i32 value:42]]" || text(res) != "result: I32(42)" {
				t.Errorf("add: %v %q", out, text(res))
			}

			res, out = c.call(t, "run_wasi", map[string]any{"module": map[string]any{"path": filepath.Join(wasi, "guest_c.wasm")},
				"args": []string{"cat", "/data/in.txt"}, "files": map[string]any{"/data/in.txt": "from a file\n"}})
			if kindOf(t, res, out) != "" || out["exitCode"] != float64(0) || fmt.Sprint(out["stdout"]) != "map[text:from a file\n]" {
				t.Errorf("run_wasi cat: %v", out)
			}
			if !strings.Contains(text(res), "exit code 0") || !strings.Contains(text(res), "from a file") {
				t.Errorf("run_wasi text %q", text(res))
			}

			res, out = c.call(t, "run_wasi", map[string]any{"module": map[string]any{"path": filepath.Join(wasi, "guest_c.wasm")},
				"args": []string{"echo"}, "stdin": map[string]any{"base64": base64.StdEncoding.EncodeToString([]byte("abc"))}})
			if kindOf(t, res, out) != "" || fmt.Sprint(out["stdout"]) != "map[text:abc]" || fmt.Sprint(out["stderr"]) != "map[text:3 bytes\n]" {
				t.Errorf("run_wasi echo: %v", out)
			}

			res, out = c.call(t, "call_plugin", map[string]any{"module": map[string]any{"wat": string(plugin)}, "function": "greet", "input": "Ada"})
			if kindOf(t, res, out) != "" || fmt.Sprint(out["output"]) != "map[text:Hello, Ada]" || text(res) != "output: Hello, Ada" {
				t.Errorf("greet: %v %q", out, text(res))
			}
			res, out = c.call(t, "call_plugin", map[string]any{"module": map[string]any{"wat": string(plugin)}, "function": "config",
				"config": map[string]string{"greeting": "hej"}})
			if kindOf(t, res, out) != "" || fmt.Sprint(out["output"]) != "map[text:hej]" {
				t.Errorf("config: %v", out)
			}
			res, out = c.call(t, "call_plugin", map[string]any{"module": map[string]any{"wat": string(plugin)}, "function": "fail"})
			if kind := kindOf(t, res, out); kind != "plugin_error" || !strings.Contains(text(res), "it failed on purpose") {
				t.Errorf("fail: %s %v", kind, out)
			}
		})
	}
}

func TestMCPGoPluginWithWASI(t *testing.T) {
	c := startMCP(t, "", "--allow-path-dir", absPath(t, filepath.Join("..", "..", "testdata", "plugins")))
	res, out := c.call(t, "call_plugin", map[string]any{"module": map[string]any{"path": absPath(t, filepath.Join("..", "..", "testdata", "plugins", "go", "plugin.wasm"))},
		"function": "greet", "input": "Go", "wasi": true})
	if kindOf(t, res, out) != "" || !strings.Contains(fmt.Sprint(out["output"]), "Go") {
		t.Errorf("the Go PDK plugin: %v", out)
	}
}

func TestMCPFenceErrorsAreTyped(t *testing.T) {
	c := startMCP(t, "", "--max-memory-bytes", "4194304", "--max-timeout-ms", "60000")
	wat := func(name string) map[string]any { return map[string]any{"wat": string(mustRead(t, fixture(name)))} }
	for _, tc := range []struct {
		name string
		args map[string]any
		kind string
		says string
	}{
		{"fuel", map[string]any{"module": wat("infinite_loop.wat"), "function": "run", "limits": map[string]any{"fuel": 100000}}, "fuel_exhausted", "100000"},
		{"timeout", map[string]any{"module": wat("infinite_loop.wat"), "function": "run", "limits": map[string]any{"timeoutMs": 50}}, "timeout", "50 ms"},
		{"memory", map[string]any{"module": wat("memory_bomb.wat"), "function": "run"}, "memory_limit_exceeded", ""},
		{"trap", map[string]any{"module": wat("traps.wat"), "function": "unreachable"}, "trap", "unreachable"},
		{"import", map[string]any{"module": wat("logger.wat"), "function": "run"}, "disallowed_import", "host"},
		{"export", map[string]any{"module": wat("well_behaved.wat"), "function": "nope"}, "export", "nope"},
		{"invalid", map[string]any{"module": map[string]any{"wat": "(module"}, "function": "run"}, "invalid_module", ""},
		{"over the max", map[string]any{"module": wat("well_behaved.wat"), "function": "add", "limits": map[string]any{"memoryBytes": 8 << 20}}, mcpserver.KindInvalidParams, "maximum of 4194304"},
	} {
		res, out := c.call(t, "run_export", tc.args)
		if kind := kindOf(t, res, out); kind != tc.kind || !strings.Contains(text(res), tc.says) || !strings.HasPrefix(text(res), tc.kind+": ") {
			t.Errorf("%s: kind %q, text %q; want %s saying %q", tc.name, kind, text(res), tc.kind, tc.says)
		}
	}
	// A WASI program that allocates until malloc fails under the 4 MiB
	// cap: the denied growth is the failure (whatever the program did
	// next), and its output until it stopped comes with it.
	res, out := c.call(t, "run_wasi", map[string]any{"module": map[string]any{"base64": base64.StdEncoding.EncodeToString(mustRead(t, filepath.Join(wasiDir, "guest_c.wasm")))},
		"args": []string{"hog"}})
	if kindOf(t, res, out) != "memory_limit_exceeded" || !strings.Contains(fmt.Sprint(out["stderr"]), "malloc failed") || !strings.Contains(text(res), "malloc failed") {
		t.Errorf("hog: %v", out)
	}
}

// logThenSpin logs one line, then spins forever.
const logThenSpin = `(module (import "host" "log" (func $log (param i32 i32))) (memory (export "memory") 1)
  (data (i32.const 0) "spinning")
  (func (export "spin") (call $log (i32.const 0) (i32.const 8)) (loop $l (br $l))))`

// A cancelled call stops its run at once: with one run slot and the
// runs' deadline at ten minutes, the next call could not run otherwise
// (and the test would fail by its hang bound). The run is seen to have
// started by what it streamed.
func TestMCPCancelStopsARunningGuest(t *testing.T) {
	for _, version := range []string{"", "2025-06-18"} {
		c := startMCP(t, version, "--max-concurrency", "1", "--default-timeout-ms", "600000")
		for _, tc := range []struct {
			tool    string
			args    map[string]any
			started string // a progress message it sends once running
		}{
			{"run_export", map[string]any{"module": map[string]any{"wat": logThenSpin}, "function": "spin", "capabilities": map[string]any{"log": true}}, "spinning\n"},
			{"run_wasi", map[string]any{"module": map[string]any{"base64": base64.StdEncoding.EncodeToString(mustRead(t, filepath.Join(wasiDir, "guest_c.wasm")))},
				"args": []string{"tick", "1000000", "1"}}, "tick 1\n"},
		} {
			ctx, cancel := context.WithCancel(context.Background())
			params := &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args}
			params.SetProgressToken(tc.tool + version)
			errc := make(chan error, 1)
			go func() {
				_, err := c.CallTool(ctx, params)
				errc <- err
			}()
			c.waitProgress(t, func(p *mcp.ProgressNotificationParams) bool {
				return p.ProgressToken == tc.tool+version && strings.HasPrefix(p.Message, tc.started)
			})
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Errorf("%s: the cancelled call returned %v", tc.tool, err)
			}
			res, out := c.call(t, "run_export", map[string]any{"module": map[string]any{"wat": string(mustRead(t, fixture("well_behaved.wat")))}, "function": "add", "args": []any{1, 2}})
			if kindOf(t, res, out) != "" {
				t.Errorf("%s: the call after the cancel: %v", tc.tool, out)
			}
		}
	}
}

// A long run's output streams as progress, stream by stream, before the
// answer; the answer holds all of it.
func TestMCPProgressStreamsOutput(t *testing.T) {
	c := startMCP(t, "")
	params := &mcp.CallToolParams{Name: "run_wasi", Arguments: map[string]any{
		"module": map[string]any{"base64": base64.StdEncoding.EncodeToString(mustRead(t, filepath.Join(wasiDir, "guest_c.wasm")))},
		"args":   []string{"tick", "5", "20"}}}
	params.SetProgressToken(42)
	ctx, cancel := context.WithTimeout(context.Background(), mcpHang)
	defer cancel()
	res, err := c.CallTool(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	out := mcpStructured(t, res)
	want := "tick 1\ntick 2\ntick 3\ntick 4\ntick 5\n"
	if fmt.Sprint(out["stdout"]) != "map[text:"+want+"]" {
		t.Fatalf("stdout %v", out["stdout"])
	}
	c.waitProgress(t, func(p *mcp.ProgressNotificationParams) bool { return p.Progress == float64(len(want)) })
	c.mu.Lock()
	defer c.mu.Unlock()
	var streamed strings.Builder
	last := 0.0
	for _, p := range c.progress {
		if p.Meta[mcpserver.StreamMetaKey] != "stdout" || p.Progress <= last {
			t.Errorf("progress %+v after %v", p, last)
		}
		last = p.Progress
		streamed.WriteString(p.Message)
	}
	if streamed.String() != want || len(c.progress) < 2 {
		t.Errorf("%d notifications streamed %q", len(c.progress), streamed.String())
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
