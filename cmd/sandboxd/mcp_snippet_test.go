package main

// sandboxd mcp's snippet tools end to end: the binary of make build
// (SANDBOXD_BIN) with the runtimes it compiled, spawned by the Go SDK's
// client: values, input, output streamed, script errors with their
// position, hostile snippets ending in their fence, cancellation.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// startSnippetMCP is a session with make build's sandboxd mcp, whose
// runtimes are next to it.
func startSnippetMCP(t *testing.T, args ...string) *mcpClient {
	t.Helper()
	cmd := exec.Command(evalBin(t), append([]string{"mcp"}, args...)...)
	cmd.Env = append(os.Environ(), "SANDBOXD_RUNTIMES=") // the runtimes next to the binary
	return startMCPCommand(t, "", cmd)
}

func TestMCPSnippets(t *testing.T) {
	c := startSnippetMCP(t)
	if names := strings.Join(c.toolNames(t), " "); names != "call_plugin run_export run_snippet run_wasi session_close session_create session_eval" {
		t.Fatalf("tools %v", names)
	}
	for _, tc := range []struct {
		args       map[string]any
		value, out string
	}{
		{map[string]any{"language": "js", "code": "console.log('hello', input.name); ({length: input.name.length})", "input": map[string]any{"name": "Ada"}},
			"map[length:3]", "hello Ada\n"},
		{map[string]any{"language": "lua", "code": "local t = {} for i = 1, 3 do t[i] = i * i end print('lua') return t"}, "[1 4 9]", "lua\n"},
		{map[string]any{"language": "starlark", "code": "sorted(input)", "input": []int{3, 1, 2}}, "[1 2 3]", ""},
	} {
		res, out := c.call(t, "run_snippet", tc.args)
		if kindOf(t, res, out) != "" || fmt.Sprint(out["value"]) != tc.value || fmt.Sprint(out["stdout"]) != "map[text:"+tc.out+"]" {
			t.Errorf("%v: %v", tc.args, out)
		}
		if out["language"] != tc.args["language"] || out["fuelConsumed"] == float64(0) {
			t.Errorf("%v: %v", tc.args, out)
		}
	}

	// A script error: its kind, position and the language's own text.
	res, out := c.call(t, "run_snippet", map[string]any{"language": "js", "code": "console.log('first');\nlet b = ;\n"})
	if kind := kindOf(t, res, out); kind != "script_error" {
		t.Fatalf("kind %q: %v", kind, out)
	}
	data, _ := out["error"].(map[string]any)["data"].(map[string]any)
	if data["line"] != float64(2) || data["column"] != float64(9) || data["language"] != "js" || !strings.Contains(fmt.Sprint(data["text"]), "Unexpected token") {
		t.Errorf("data %v", data)
	}
	if !strings.HasPrefix(text(res), "script_error: SyntaxError") {
		t.Errorf("text %q", text(res))
	}

	// Output streams as progress when the call gives a token.
	params := &mcp.CallToolParams{Name: "run_snippet", Arguments: map[string]any{"language": "lua", "code": "print('streamed') return 1"}}
	params.SetProgressToken("lua")
	ctx, cancel := context.WithTimeout(context.Background(), mcpHang)
	defer cancel()
	if _, err := c.CallTool(ctx, params); err != nil {
		t.Fatal(err)
	}
	c.waitProgress(t, func(p *mcp.ProgressNotificationParams) bool {
		return p.ProgressToken == "lua" && p.Message == "streamed\n"
	})
}

// Hostile snippets end in their fence as tool errors, and the server
// keeps serving; a call may not ask past the operator's maximums; a
// cancelled snippet stops.
func TestMCPHostileSnippets(t *testing.T) {
	c := startSnippetMCP(t, "--max-concurrency", "1", "--max-timeout-ms", "60000")
	for _, tc := range []struct {
		args map[string]any
		kind string
	}{
		{map[string]any{"language": "js", "code": "while (true) {}", "limits": map[string]any{"timeoutMs": 200}}, "timeout"},
		{map[string]any{"language": "lua", "code": "while true do end", "limits": map[string]any{"fuel": 10_000_000}}, "fuel_exhausted"},
		{map[string]any{"language": "js", "code": "let s = 'x'; while (true) s += s"}, "memory_limit_exceeded"},
		{map[string]any{"language": "lua", "code": `local s = "x" while true do s = s .. s end`, "limits": map[string]any{"memoryBytes": 16 << 20}}, "memory_limit_exceeded"},
		{map[string]any{"language": "js", "code": "1", "limits": map[string]any{"timeoutMs": 60001}}, "invalid_params"},
		{map[string]any{"language": "python", "code": "1"}, "invalid_params"},
	} {
		res, out := c.call(t, "run_snippet", tc.args)
		if kind := kindOf(t, res, out); kind != tc.kind {
			t.Errorf("%v: kind %q, want %q: %v", tc.args, kind, tc.kind, out)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	params := &mcp.CallToolParams{Name: "run_snippet", Arguments: map[string]any{"language": "js",
		"code": "console.log('spinning'); while (true) {}", "limits": map[string]any{"timeoutMs": 60000}}}
	params.SetProgressToken("spin")
	errc := make(chan error, 1)
	go func() {
		_, err := c.CallTool(ctx, params)
		errc <- err
	}()
	c.waitProgress(t, func(p *mcp.ProgressNotificationParams) bool {
		return p.ProgressToken == "spin" && p.Message == "spinning\n"
	})
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("the cancelled call returned %v", err)
	}
	// One run slot: this call runs only once the spinning snippet stopped
	// (a minute's deadline otherwise, past the hang bound).
	if res, out := c.call(t, "run_snippet", map[string]any{"language": "js", "code": "[1, 2].length"}); kindOf(t, res, out) != "" || out["value"] != float64(2) {
		t.Errorf("after the cancel: %v", out)
	}
}

// A session keeps its state from one evaluation to the next; a script
// error leaves it usable, a fence closes it; a closed session's calls are
// session_closed; past --max-instances, too_many_sessions.
func TestMCPSessions(t *testing.T) {
	c := startSnippetMCP(t, "--max-instances", "2")
	res, out := c.call(t, "session_create", map[string]any{"language": "js"})
	if kindOf(t, res, out) != "" || out["language"] != "js" {
		t.Fatalf("session_create: %v", out)
	}
	js := out["session"].(string)
	eval := func(session, code string, limits map[string]any) (*mcp.CallToolResult, map[string]any) {
		args := map[string]any{"session": session, "code": code}
		if limits != nil {
			args["limits"] = limits
		}
		return c.call(t, "session_eval", args)
	}
	if res, out := eval(js, "var n = 40; function add(x) { return n + x }", nil); kindOf(t, res, out) != "" {
		t.Fatalf("define: %v", out)
	}
	if res, out := eval(js, "add(2)", nil); kindOf(t, res, out) != "" || out["value"] != float64(42) {
		t.Errorf("the state: %v", out)
	}
	if res, out := eval(js, "throw new Error('boom')", nil); kindOf(t, res, out) != "script_error" {
		t.Errorf("a script error: %v", out)
	}
	if res, out := eval(js, "n += 1; add(1)", nil); kindOf(t, res, out) != "" || out["value"] != float64(42) {
		t.Errorf("after the script error: %v", out)
	}

	res, out = c.call(t, "session_create", map[string]any{"language": "lua"})
	lua, _ := out["session"].(string)
	if kindOf(t, res, out) != "" {
		t.Fatalf("a second session: %v", out)
	}
	if res, out := c.call(t, "session_create", map[string]any{"language": "starlark"}); kindOf(t, res, out) != "too_many_sessions" {
		t.Errorf("a third session past --max-instances 2: %v", out)
	}

	// A fence closes the session, and says so.
	res, out = eval(lua, "while true do end", map[string]any{"timeoutMs": 100})
	if kindOf(t, res, out) != "timeout" {
		t.Fatalf("the loop: %v", out)
	}
	if data, _ := out["error"].(map[string]any)["data"].(map[string]any); data["instanceClosed"] != true {
		t.Errorf("the fence's data %v: want instanceClosed", data)
	}
	if res, out := eval(lua, "return 1", nil); kindOf(t, res, out) != "session_closed" {
		t.Errorf("after the fence: %v", out)
	}

	if res, out := c.call(t, "session_close", map[string]any{"session": js}); kindOf(t, res, out) != "" || out["session"] != js {
		t.Errorf("session_close: %v", out)
	}
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"session_eval", map[string]any{"session": js, "code": "add(1)"}},
		{"session_close", map[string]any{"session": js}},
	} {
		res, out := c.call(t, tc.tool, tc.args)
		if kindOf(t, res, out) != "session_closed" || !strings.Contains(text(res), "is closed: released") {
			t.Errorf("%s of a closed session: %v", tc.tool, out)
		}
	}
	// The sessions' slots are free again: two new ones fit.
	for _, lang := range []string{"starlark", "js"} {
		if res, out := c.call(t, "session_create", map[string]any{"language": lang}); kindOf(t, res, out) != "" {
			t.Errorf("a new %s session: %v", lang, out)
		}
	}
}

// The operator's --default-* flags are a snippet's defaults, in
// run_snippet and in a session, and the schemas say so; memoryBytes is
// the larger of the operator's and the language's (red team rt22,
// finding 4: run_snippet ran its language's 1000 ms and its schema said
// "default 1000").
func TestMCPSnippetsTakeTheOperatorsDefaults(t *testing.T) {
	c := startSnippetMCP(t, "--default-timeout-ms", "100", "--default-memory-bytes", "50331648")
	res, out := c.call(t, "run_snippet", map[string]any{"language": "lua", "code": "while true do end"})
	if d, _ := out["error"].(map[string]any)["data"].(map[string]any); kindOf(t, res, out) != "timeout" || d["timeoutMs"] != float64(100) {
		t.Errorf("run_snippet spinning under --default-timeout-ms 100: %v", out)
	}
	res, out = c.call(t, "session_create", map[string]any{"language": "lua"})
	if kindOf(t, res, out) != "" {
		t.Fatalf("session_create: %v", out)
	}
	res, out = c.call(t, "session_eval", map[string]any{"session": out["session"], "code": "while true do end"})
	if d, _ := out["error"].(map[string]any)["data"].(map[string]any); kindOf(t, res, out) != "timeout" || d["timeoutMs"] != float64(100) {
		t.Errorf("a session's evaluation spinning under --default-timeout-ms 100: %v", out)
	}

	tools, err := c.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{ // the limits' descriptions, in part
		"timeoutMs":   "default 100,",
		"memoryBytes": "default js 67108864, lua 50331648, starlark 50331648,",
	}
	for _, tl := range tools.Tools {
		if tl.Name != "run_snippet" && tl.Name != "session_create" {
			continue
		}
		schema, err := json.Marshal(tl.InputSchema)
		if err != nil {
			t.Fatal(err)
		}
		var in struct {
			Properties struct {
				Limits struct {
					Properties map[string]struct {
						Description string `json:"description"`
					} `json:"properties"`
				} `json:"limits"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(schema, &in); err != nil {
			t.Fatal(err)
		}
		for name, part := range want {
			if d := in.Properties.Limits.Properties[name].Description; !strings.Contains(d, part) {
				t.Errorf("%s: limits.%s says %q, want it to say %q", tl.Name, name, d, part)
			}
		}
	}
}
