package main

// sandboxd mcp's answers, on the real binary and engine, spoken to line
// by line as no SDK client would: their size against the output they
// carry, against the client input they quote, and the answers owed when
// stdin ends.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

const mcpInitialize = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// rawMCP is a sandboxd mcp spoken to line by line.
type rawMCP struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *syncBuffer
}

// startRawMCP starts cmd (a sandboxd mcp) and initializes the session.
// Cleanup closes its stdin: it must exit 0 by itself.
func startRawMCP(t *testing.T, cmd *exec.Cmd) *rawMCP {
	t.Helper()
	in, out, stderr := startPiped(t, cmd)
	c := &rawMCP{t: t, cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20), stderr: stderr}
	t.Cleanup(func() {
		_ = in.Close()
		go io.Copy(io.Discard, c.out) // what is still owed
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			if err != nil || strings.Contains(stderr.String(), "panic") {
				t.Errorf("sandboxd mcp: %v\nstderr:\n%s", err, stderr.String())
			}
		case <-time.After(mcpHang):
			_ = cmd.Process.Kill()
			t.Errorf("sandboxd mcp still running after its stdin closed\nstderr:\n%s", stderr.String())
		}
	})
	c.send(mcpInitialize)
	if _, m := c.answer(0); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return c
}

func (c *rawMCP) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		c.t.Fatalf("writing: %v\nstderr:\n%s", err, c.stderr.String())
	}
}

// call sends a tools/call of tool with args (JSON text) under id.
func (c *rawMCP) call(id int, tool, args string) {
	c.t.Helper()
	c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%s,"arguments":%s}}`, id, jsonText(tool), args))
}

// answer reads up to the answer of id (notifications are skipped) and
// returns it as written and decoded.
func (c *rawMCP) answer(id int) ([]byte, map[string]any) {
	c.t.Helper()
	for {
		line, err := c.out.ReadBytes('\n')
		if err != nil {
			c.t.Fatalf("reading the answer of %d: %v\nstderr:\n%s", id, err, c.stderr.String())
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			c.t.Fatalf("a line that is not JSON: %.200q", line)
		}
		if m["id"] == float64(id) {
			return line, m
		}
		if m["id"] == nil && m["error"] != nil {
			c.t.Fatalf("refused: %.300s", line)
		}
	}
}

func jsonText(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// nulsWAT is a WASI program that writes n NUL bytes to stdout in one
// fd_write.
func nulsWAT(n int) string {
	return fmt.Sprintf(`(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") %d)
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const %d))
    (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))`, (n+16)/65536+1, n)
}

// mcpAnswerSlack is what an answer takes besides its guest's output as
// the structured content carries it (docs/mcp.md, "What an answer
// holds").
const mcpAnswerSlack = 32 << 10

// TestMCPAnswersHoldTheOutputOnce: a run_wasi guest printing 2 MiB of
// NULs, under the default limits (outputBytes 1 MiB: cut there) and
// asking for 4 MiB, is answered in at most the output's size on the wire
// (base64: 4/3 of its bytes) plus mcpAnswerSlack; the output is there
// once, in base64. Before: 15.4 MB for 2 MiB (the text content repeated
// it, six bytes a NUL).
func TestMCPAnswersHoldTheOutputOnce(t *testing.T) {
	cmd := exec.Command(binPath, "mcp")
	cmd.Env = append(os.Environ(), "SANDBOXD_RUNTIMES=")
	c := startRawMCP(t, cmd)
	wat := jsonText(nulsWAT(2 << 20))
	for i, outputBytes := range []int{int(limits.Defaults().OutputBytes), 4 << 20} {
		args := `{"module":{"wat":` + wat + `}}`
		kept := min(outputBytes, 2<<20)
		if i > 0 {
			args = fmt.Sprintf(`{"module":{"wat":%s},"limits":{"outputBytes":%d}}`, wat, outputBytes)
		}
		c.call(i+1, "run_wasi", args)
		line, m := c.answer(i + 1)
		wire, _ := protocol.Bytes(make([]byte, kept)).MarshalJSON()
		if len(line) > len(wire)+mcpAnswerSlack {
			t.Errorf("outputBytes %d: an answer of %d bytes for %d of output on the wire", outputBytes, len(line), len(wire))
		}
		res, _ := m["result"].(map[string]any)
		sc, _ := res["structuredContent"].(map[string]any)
		stdout, _ := sc["stdout"].(map[string]any)
		got, err := base64.StdEncoding.DecodeString(fmt.Sprint(stdout["base64"]))
		if err != nil || len(got) != kept || strings.Trim(string(got), "\x00") != "" || sc["outputTruncated"] != (kept < 2<<20) {
			t.Errorf("outputBytes %d: stdout of %d bytes (%v), %.300s", outputBytes, len(got), err, line)
		}
		if text := fmt.Sprint(res["content"].([]any)[0].(map[string]any)["text"]); !strings.Contains(text, "not text (base64 in structuredContent.stdout)") {
			t.Errorf("outputBytes %d: text %q", outputBytes, text)
		}
		t.Logf("outputBytes %d: %d bytes kept, an answer of %d bytes", outputBytes, kept, len(line))
	}
}

// TestMCPErrorsQuoteTheInputBriefly: a 4 MB tool name, method, params
// array or argument value is answered in less than 16 KiB (the SDK's
// errors quoted them whole: a 12, 4 and 20 MB answer), and the server
// keeps serving.
func TestMCPErrorsQuoteTheInputBriefly(t *testing.T) {
	cmd := exec.Command(binPath, "mcp")
	cmd.Env = append(os.Environ(), "SANDBOXD_RUNTIMES=")
	c := startRawMCP(t, cmd)
	big := jsonText(strings.Repeat("\"\x00<a", 1<<20)) // 4 MiB that JSON escapes to 15
	module := `{"wat":"(module (func (export \"f\") (result i32) i32.const 7))"}`
	for i, tc := range []struct{ name, line, says string }{
		{"tool name", `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":` + big + `,"arguments":{}}}`, "unknown tool"},
		{"method", `{"jsonrpc":"2.0","id":%d,"method":` + big + `,"params":{}}`, "method not found"},
		{"params array", `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":[` + big + `]}`, "params must be an object"},
		{"name of another type", `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":[` + big + `],"arguments":{}}}`, "name must be a string"},
		{"function", `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run_export","arguments":{"module":` + module + `,"function":` + big + `}}}`, "export"},
		{"an unknown argument", `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run_export","arguments":{` + big + `:1}}}`, "unknown field"},
		{"a limit's name", `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run_export","arguments":{"module":` + module + `,"function":"f","limits":{` + big + `:1}}}}`, "unknown field"},
		{"wat", `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run_export","arguments":{"module":{"wat":` + big + `},"function":"f"}}}`, "invalid_module"},
		{"env", `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run_wasi","arguments":{"module":` + module + `,"env":{` + big + `:` + big + `}}}}`, "env"},
	} {
		c.send(fmt.Sprintf(tc.line, i+1))
		line, _ := c.answer(i + 1)
		switch {
		case len(line) > maxRefusalBytes:
			t.Errorf("%s: an answer of %d bytes: %.300s", tc.name, len(line), line)
		case !bytes.Contains(line, []byte(tc.says)):
			t.Errorf("%s: %.600s; want it to say %q", tc.name, line, tc.says)
		}
	}
	c.call(100, "run_export", `{"module":`+module+`,"function":"f"}`)
	if line, m := c.answer(100); !strings.Contains(fmt.Sprint(m["result"]), "value:7") {
		t.Errorf("after the refusals: %.300s", line)
	}
}

// TestMCPAnswersEveryCallWhenStdinEnds: `printf '<initialize>\n
// <tools/call>\n' | sandboxd mcp`. The input ends before the SDK has
// handled the calls, and the SDK dropped every answer it had not written
// when the transport reported the end: 1 run in 20 answered. Now each of
// 20 runs answers both, as `sandboxd serve` does, and exits 0 within the
// drain bound.
func TestMCPAnswersEveryCallWhenStdinEnds(t *testing.T) {
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_export","arguments":{"module":{"wat":"(module (func (export \"f\") (result i32) i32.const 7))"},"function":"f"}}}`
	results := 0
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), mcpHang)
		cmd := exec.CommandContext(ctx, binPath, "mcp")
		cmd.Env = append(os.Environ(), "SANDBOXD_RUNTIMES=")
		cmd.Stdin = strings.NewReader(mcpInitialize + "\n" + call + "\n")
		var stdout bytes.Buffer
		stderr := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = &stdout, stderr
		start := time.Now()
		err := cmd.Run()
		took := time.Since(start)
		cancel()
		if err != nil {
			t.Fatalf("run %d: %v\nstderr:\n%s", i, err, stderr.String())
		}
		answered := map[float64]map[string]any{}
		for _, line := range bytes.Split(bytes.TrimSpace(stdout.Bytes()), []byte("\n")) {
			var m map[string]any
			if json.Unmarshal(line, &m) == nil {
				if id, ok := m["id"].(float64); ok {
					answered[id] = m
				}
			}
		}
		res, _ := answered[1]["result"].(map[string]any)
		switch {
		case answered[0]["result"] == nil || res == nil:
			t.Fatalf("run %d: answered %v (%d bytes written)\nstderr:\n%s", i, answered, stdout.Len(), stderr.String())
		case strings.Contains(fmt.Sprint(res["structuredContent"]), "value:7"):
			results++
		case !strings.Contains(fmt.Sprint(res["structuredContent"]), "kind:cancelled"):
			// a call still running half a second after the end is cancelled
			t.Errorf("run %d: the call's answer %v", i, res)
		}
		if took > 10*time.Second {
			t.Errorf("run %d took %v", i, took)
		}
	}
	if results == 0 {
		t.Errorf("no run answered the call with its result (each was cancelled)")
	}
	t.Logf("%d of 20 calls answered with their result, the rest cancelled", results)

	// Large answers, read steadily but taking seconds: every one comes
	// whole and the server exits 0. Before, the output was abandoned a
	// second after the end whatever the client read (answers lost, one
	// cut mid-line, exit 1 "write /dev/stdout: i/o timeout").
	const calls, outputBytes = 4, 8 << 20
	input := mcpInitialize + "\n"
	for id := 1; id <= calls; id++ {
		input += fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run_wasi","arguments":{"module":{"wat":%s},"limits":{"outputBytes":%d}}}}`+"\n",
			id, jsonText(nulsWAT(outputBytes)), outputBytes)
	}
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), mcpHang)
		cmd := exec.CommandContext(ctx, binPath, "mcp")
		cmd.Env = append(os.Environ(), "SANDBOXD_RUNTIMES=")
		cmd.Stdin = strings.NewReader(input)
		stderr := &syncBuffer{}
		cmd.Stderr = stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		answered, cut := map[float64]bool{}, 0
		r := bufio.NewReaderSize(pacedReader{stdout}, 1<<20)
		for {
			var line []byte
			for {
				piece, err := r.ReadSlice('\n')
				line = append(line, piece...)
				if err != bufio.ErrBufferFull {
					if err != nil && len(line) > 0 {
						cut = len(line)
					}
					break
				}
			}
			if len(line) == 0 || cut > 0 {
				break
			}
			var m map[string]any
			if json.Unmarshal(line, &m) == nil && m["result"] != nil {
				if id, ok := m["id"].(float64); ok {
					answered[id] = true
				}
			}
		}
		err = cmd.Wait()
		cancel()
		if err != nil || cut > 0 || len(answered) != calls+1 {
			t.Errorf("large answers, run %d: %d of %d answered, a line cut after %d bytes, exit %v\nstderr:\n%s", i, len(answered), calls+1, cut, err, stderr.String())
		}
	}
}

// pacedReader reads 32 KiB every 2 ms at most: a client that keeps
// reading, more slowly than the server writes.
type pacedReader struct{ r io.Reader }

func (p pacedReader) Read(b []byte) (int, error) {
	time.Sleep(2 * time.Millisecond)
	return p.r.Read(b[:min(len(b), 32<<10)])
}
