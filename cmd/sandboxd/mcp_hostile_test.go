package main

// sandboxd mcp against a hostile agent, on the real binary and engine:
// path tricks, oversized arguments, an unknown tool, a client that
// vanishes mid-run. Each call gets one answer naming the problem, the
// answer stays small whatever the argument's size, and the server keeps
// serving.

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/internal/mcpserver"
)

// maxRefusalBytes bounds the answer to a refused call, however large
// its arguments: messages quote the caller's input clipped.
const maxRefusalBytes = 16 << 10

func TestMCPModulePathTricksNameTheArgument(t *testing.T) {
	dir := t.TempDir()
	guest := mustRead(t, filepath.Join(wasiDir, "guest_c.wasm"))
	if err := os.WriteFile(filepath.Join(dir, "guest.wasm"), guest, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "passwd")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := startMCP(t, "", "--allow-path-dir", dir)
	for _, tc := range []struct{ path, says string }{
		{"/etc/passwd", "outside the directories the operator allowed"},
		{dir + "/../../etc/passwd", "outside the directories the operator allowed"},
		{dir + "x/guest.wasm", "outside the directories the operator allowed"},
		{filepath.Join(dir, "passwd"), "outside the directories"},   // a link inside that leads out: the engine's check
		{filepath.Join(dir, "fifo"), "not a regular file (a FIFO)"}, // never opened for reading: no hang
		{filepath.Join(dir, "sub"), "not a regular file (a directory)"},
		{filepath.Join(dir, "missing.wasm"), "cannot open"},
		{"relative.wasm", "must be an absolute file path"},
	} {
		res, out := c.call(t, "run_wasi", map[string]any{"module": map[string]any{"path": tc.path}})
		e, _ := out["error"].(map[string]any)
		if kindOf(t, res, out) != mcpserver.KindInvalidParams || e["field"] != "module.path" || !strings.Contains(text(res), tc.says) {
			t.Errorf("path %q: %v; want invalid_params naming module.path, saying %q", tc.path, out, tc.says)
		}
	}
	res, out := c.call(t, "run_wasi", map[string]any{"module": map[string]any{"path": filepath.Join(dir, "sub", "..", "guest.wasm")}, "args": []string{"args", "ok"}})
	if kindOf(t, res, out) != "" || fmt.Sprint(out["stdout"]) != "map[text:ok\n]" {
		t.Errorf("a path inside: %v", out)
	}
}

func TestMCPOversizedArgumentsAreRefusedBriefly(t *testing.T) {
	host := t.TempDir()
	c := startMCP(t, "", "--allow-dir", host)
	guestB64 := map[string]any{"base64": b64(mustRead(t, filepath.Join(wasiDir, "guest_c.wasm")))}
	for _, tc := range []struct {
		name, tool  string
		args        map[string]any
		kind, field string
		says        string
	}{
		// a WAT error quotes the failing line: 17 MiB on one line
		{"wat on one line", "run_export", map[string]any{"module": map[string]any{"wat": strings.Repeat("a", 17<<20)}, "function": "f"}, "invalid_module", "", "invalid WAT"},
		{"file key", "run_wasi", map[string]any{"module": guestB64, "files": map[string]any{"/" + strings.Repeat("k", 1<<20): "v"}}, mcpserver.KindInvalidParams, "", "at most 4096"},
		{"function name", "run_export", map[string]any{"module": map[string]any{"wat": `(module (func (export "f")))`}, "function": strings.Repeat("f", 1<<20)}, "export", "", "not found"},
		{"stdin past the memory cap", "run_wasi", map[string]any{"module": guestB64, "stdin": map[string]any{"base64": b64(make([]byte, 20<<20))}}, "memory_limit_exceeded", "", "at most the memory cap"},
		{"fuel not a whole number", "run_export", map[string]any{"module": map[string]any{"wat": "(module)"}, "function": "f", "limits": map[string]any{"fuel": 1.5}}, mcpserver.KindInvalidParams, "limits.fuel", "whole number"},
		{"args not an array", "run_wasi", map[string]any{"module": guestB64, "args": "echo"}, mcpserver.KindInvalidParams, "args", "must be an array"},
		{"dirs outside --allow-dir", "run_wasi", map[string]any{"module": guestB64, "dirs": []any{map[string]any{"host": "/etc", "guest": "/etc"}}}, mcpserver.KindInvalidParams, "dirs[0].host", "/etc"},
	} {
		res, out := c.call(t, tc.tool, tc.args)
		body, _ := json.Marshal(res)
		e, _ := out["error"].(map[string]any)
		switch kind := kindOf(t, res, out); {
		case kind != tc.kind || !strings.Contains(text(res), tc.says):
			t.Errorf("%s: %.500s; want %s saying %q", tc.name, body, tc.kind, tc.says)
		case tc.field != "" && e["field"] != tc.field:
			t.Errorf("%s: field %v, want %s", tc.name, e["field"], tc.field)
		case len(body) > maxRefusalBytes:
			t.Errorf("%s: an answer of %d bytes: %.300s", tc.name, len(body), body)
		}
	}
	// An unknown tool is a protocol error (MCP's -32602), not a result;
	// the session goes on.
	ctx, cancel := context.WithTimeout(context.Background(), mcpHang)
	defer cancel()
	if _, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "rm_rf", Arguments: map[string]any{}}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
		t.Errorf("an unknown tool: %v", err)
	}
	res, out := c.call(t, "run_export", map[string]any{"module": map[string]any{"wat": `(module (func (export "f") (result i32) i32.const 7))`}, "function": "f"})
	if kindOf(t, res, out) != "" || fmt.Sprint(out["values"]) != "[map[type:i32 value:7]]" {
		t.Errorf("after the refusals: %v", out)
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// startPiped starts cmd with pipes to its stdin and from its stdout, and
// its stderr kept.
func startPiped(t *testing.T, cmd *exec.Cmd) (io.WriteCloser, io.ReadCloser, *syncBuffer) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return stdin, stdout, stderr
}

// A client that vanishes while its call spins (stdin closed, its answer
// never read): the run is cancelled and the server exits 0, within the
// hang bound though the run's deadline is ten minutes.
func TestMCPClientVanishingMidRun(t *testing.T) {
	cmd := exec.Command(binPath, "mcp", "--default-timeout-ms", "600000")
	stdin, stdout, stderr := startPiped(t, cmd)
	lines := bufio.NewReader(stdout)
	send := func(msg string) {
		if _, err := io.WriteString(stdin, msg+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if _, err := lines.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	call, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{
		"_meta": map[string]any{"progressToken": "p"}, "name": "run_export",
		"arguments": map[string]any{"module": map[string]any{"wat": logThenSpin}, "function": "spin", "capabilities": map[string]any{"log": true}}}})
	send(string(call))
	// the run has started when its log line streams
	if line, err := lines.ReadString('\n'); err != nil || !strings.Contains(line, "spinning") {
		t.Fatalf("waiting for the run to start: %q, %v", line, err)
	}
	_ = stdin.Close() // the client is gone: it reads nothing more either
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil || strings.Contains(stderr.String(), "panic") {
			t.Errorf("sandboxd mcp: %v\nstderr:\n%s", err, stderr.String())
		}
	case <-time.After(mcpHang):
		_ = cmd.Process.Kill()
		t.Fatalf("sandboxd mcp still running after its client vanished\nstderr:\n%s", stderr.String())
	}
}
