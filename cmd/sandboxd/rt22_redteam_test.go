package main

// Red team of issue 22 phase B (eval, sessions) and issue 23's
// run_snippet, through the binary make build makes: each test is an
// attack that succeeded, failing until it is fixed. Named for the attack.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
)

// TestRT22GoPanicInASessionIsNotAScriptError: `new Array(2**31).sort()`
// (js) and `list(range(1 << 40))` (starlark) make the interpreter's Go
// code panic ("makeslice: cap out of range"). The guest's guard answers a
// script error saying "the session is closed" and every later evaluation
// the same, but the sidecar reports a plain script_error (no
// instanceClosed) and keeps the dead session in its table: the caller is
// told the session is usable while no evaluation in it can ever succeed.
// Either the session goes on working or it is closed with the reason.
func TestRT22GoPanicInASessionIsNotAScriptError(t *testing.T) {
	t.Parallel()
	s := startEvalSidecar(t)
	for _, c := range []struct {
		lang        protocol.Language
		panic, next string
	}{
		{protocol.LanguageJS, "new Array(2**31).sort()", "1 + 1"},
		{protocol.LanguageStarlark, "list(range(1 << 40))", "1 + 1"},
	} {
		inst := rawSession(t, s, `"new-`+string(c.lang)+`"`, map[string]any{"language": c.lang}).Instance
		m := sessionEvalRaw(s, `"panic"`, inst, c.panic, nil)
		closed := m.Error != nil && errData(t, m)["instanceClosed"] == true
		next := sessionEvalRaw(s, `"next"`, inst, c.next, nil)
		switch {
		case closed && (next.Error == nil || next.Error.Code != protocol.CodeInstanceClosed):
			t.Errorf("%s: closed by %q, yet the next evaluation answered %s", c.lang, c.panic, next.raw)
		case !closed && next.Error != nil:
			t.Errorf("%s: %q answered %s (not closed), and the next evaluation %q then failed: %s",
				c.lang, c.panic, m.raw, c.next, next.raw)
		}
	}
}

// TestRT22ScriptErrorMaskedBySmallOutputBytes: the runtime's answer for a
// script error ({"error": {message, line, column, text}}, up to 5 KiB) is
// held to the evaluation's outputBytes, so with a small outputBytes every
// script error comes back as "the value's JSON is larger than
// limits.outputBytes" at line 0: the snippet's own message, line and
// column are lost, and the caller is told its value was too large when the
// snippet had none.
func TestRT22ScriptErrorMaskedBySmallOutputBytes(t *testing.T) {
	t.Parallel()
	s := startEvalSidecar(t)
	for _, c := range []struct {
		lang       protocol.Language
		code, want string
	}{
		{protocol.LanguageJS, "let a = ;", "SyntaxError"},
		{protocol.LanguageLua, "error('boom')", "boom"},
		{protocol.LanguageStarlark, "fail('boom')", "boom"},
	} {
		s.request(`"e"`, "eval", map[string]any{"language": c.lang, "code": c.code, "limits": map[string]any{"outputBytes": 64}})
		m := mustResponse(s, `"e"`)
		if m.Error == nil || m.Error.Code != 13 || !strings.Contains(m.Error.Message, c.want) {
			t.Errorf("%s %q with outputBytes 64: want the script error naming %q, got %s", c.lang, c.code, c.want, m.raw)
		}
	}
}

// TestRT22ValueThatFitsOutputBytesIsRefused: docs/protocol.md says the
// value's JSON must fit in outputBytes; the check is made on the
// runtime's envelope ({"value": …}, 10 bytes more), so a value whose JSON
// is exactly outputBytes (or up to 10 bytes less) is refused as too large.
func TestRT22ValueThatFitsOutputBytesIsRefused(t *testing.T) {
	t.Parallel()
	s := startEvalSidecar(t)
	value := `"12345678901"` // 13 bytes of JSON
	s.request(`"v"`, "eval", map[string]any{"language": "js", "code": value, "limits": map[string]any{"outputBytes": len(value)}})
	if r := evalResult(t, mustResponse(s, `"v"`)); string(r.Value) != value {
		t.Errorf("value %s", r.Value)
	}
}

// TestRT22EvalIgnoresServeDefaults: an operator's --default-timeout-ms
// and --default-fuel (what initialize reports as limits.defaults, "a
// call's limits when it gives none") do not apply to eval or sessions:
// an evaluation that sets no limits runs 1 s and 2^50 fuel whatever the
// operator configured, up to the maximums.
func TestRT22EvalIgnoresServeDefaults(t *testing.T) {
	t.Parallel()
	s := startEvalSidecar(t, "--default-timeout-ms", "100")
	s.request(`"spin"`, "eval", map[string]any{"language": "lua", "code": "while true do end"})
	m := mustResponse(s, `"spin"`)
	if d := errData(t, m); d["kind"] != "timeout" || d["timeoutMs"] != float64(100) {
		t.Errorf("one-shot spin under --default-timeout-ms 100: %s", m.raw)
	}
	inst := rawSession(t, s, `"sess"`, map[string]any{"language": "lua"}).Instance
	m = sessionEvalRaw(s, `"sspin"`, inst, "while true do end", nil)
	if d := errData(t, m); d["kind"] != "timeout" || d["timeoutMs"] != float64(100) {
		t.Errorf("session spin under --default-timeout-ms 100: %s", m.raw)
	}
}

// TestRT22MCPClientNeverReadingGrowsTheServer: an MCP client writes
// run_snippet calls whose snippets print 20 MiB each (outputBytes up to
// the 64 MiB maximum) and reads nothing. The queue bound counts only
// calls not yet answered: answers waiting to be written are not bounded,
// so the server's memory grows with every call (measured: past 4 GB in
// 25 s; 22 GB once the client began to read). The sidecar's
// --output-high-water holds the same attack on eval to about 700 MB.
// The bound checked here is generous: 1.5 GiB.
func TestRT22MCPClientNeverReadingGrowsTheServer(t *testing.T) {
	const bound = 1536 << 20
	cmd := exec.Command(evalBin(t), "mcp")
	cmd.Env = append(os.Environ(), "SANDBOXD_RUNTIMES=")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe() // never read until the end
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	w := bufio.NewWriter(stdin)
	send := func(m map[string]any) error {
		b, _ := json.Marshal(m)
		if _, err := w.Write(append(b, '\n')); err != nil {
			return err
		}
		return w.Flush()
	}
	_ = send(map[string]any{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "rt22", "version": "0"}}})
	_ = send(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized", "params": map[string]any{}})
	go func() {
		for i := 1; i <= 100; i++ {
			if send(map[string]any{"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": map[string]any{
				"name": "run_snippet", "arguments": map[string]any{"language": "js",
					"code":   "const s = 'z'.repeat(1 << 20); for (let i = 0; i < 20; i++) console.log(s); 1",
					"limits": map[string]any{"timeoutMs": 10000, "outputBytes": 1 << 26}}}}) != nil {
				return
			}
		}
	}()
	var peak uint64
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		rss, err := vmRSS(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		peak = max(peak, rss)
		if rss > bound {
			break
		}
	}
	_ = cmd.Process.Kill()
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	if peak > bound {
		t.Errorf("a client that never reads grew the server to %s (bound %s)", mib(peak), mib(bound))
	}
	fmt.Fprintf(os.Stderr, "peak RSS %s\n", mib(peak))
}

// TestRT22SessionEvalElapsedNegative: an evaluation that waited for its
// turn in a session behind a long one reports elapsedMicros negative
// (measured: -2500902 for an eval queued 2.5 s): snippet.evaluate takes
// the turn's wait (res.Queued) off a time measured after that wait.
func TestRT22SessionEvalElapsedNegative(t *testing.T) {
	t.Parallel()
	s := startEvalSidecar(t)
	inst := rawSession(t, s, `"new"`, map[string]any{"language": "lua"}).Instance
	s.request(`"long"`, "eval", map[string]any{"instance": inst, "code": "local t = os.clock() while os.clock() - t < 0.5 do end return 1",
		"limits": map[string]any{"timeoutMs": 60000}})
	s.request(`"behind"`, "eval", map[string]any{"instance": inst, "code": "return 2"})
	evalResult(t, mustResponse(s, `"long"`))
	r := evalResult(t, mustResponse(s, `"behind"`))
	if r.ElapsedMicros < 0 || r.QueuedMicros <= 0 {
		t.Errorf("an evaluation that waited for its turn: elapsedMicros %d, queuedMicros %d", r.ElapsedMicros, r.QueuedMicros)
	}
}

// TestRT22SnippetBricksAJSSession: one line of a snippet —
// Object.freeze(globalThis), or a non-configurable `input` — makes every
// later evaluation in the session a script error ("TypeError: Cannot
// redefine property: input", line 0), since the runtime defines the
// global input before each evaluation: a snippet author disables the
// parent's session for good, and it is neither usable nor closed (not
// even a fence can close it: no code runs). Lua and Starlark held
// (setmetatable(_G, …) with __newindex, rebinding input).
func TestRT22SnippetBricksAJSSession(t *testing.T) {
	t.Parallel()
	s := startEvalSidecar(t)
	for _, brick := range []string{"Object.freeze(globalThis); 1",
		"Object.defineProperty(globalThis, 'input', {value: 0, writable: false, configurable: false}); 1"} {
		inst := rawSession(t, s, `"new"`, map[string]any{"language": "js"}).Instance
		evalResult(t, sessionEvalRaw(s, `"brick"`, inst, brick, nil))
		m := sessionEvalRaw(s, `"next"`, inst, "1 + 1", map[string]any{"input": 3})
		if m.Error != nil && (m.Error.Code != protocol.CodeInstanceClosed) {
			t.Errorf("after %q: the next evaluation 1 + 1 failed, and the session is not closed: %s", brick, m.raw)
		}
	}
}

// TestRT22MCPRunSnippetIgnoresDefaults: `sandboxd mcp -h` says "A call's
// limits default to the --default-* flags"; run_snippet's do not: under
// --default-timeout-ms 100 a spinning snippet without limits runs its
// language's 1000 ms (and the input schema advertises "default 1000").
func TestRT22MCPRunSnippetIgnoresDefaults(t *testing.T) {
	c := startSnippetMCP(t, "--default-timeout-ms", "100")
	res, out := c.call(t, "run_snippet", map[string]any{"language": "lua", "code": "while true do end"})
	e, _ := out["error"].(map[string]any)
	d, _ := e["data"].(map[string]any)
	if kindOf(t, res, out) != "timeout" || d["timeoutMs"] != float64(100) {
		t.Errorf("run_snippet spin under --default-timeout-ms 100: %v", out)
	}
}
