package mcpserver

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// answerSlack is what an answer may take besides the guest's output as
// the structured content carries it: the text content (maxTextBytes),
// the error (its message and data's texts, bounded in answer.go), the
// other fields and the envelope.
const answerSlack = maxTextBytes + maxErrorTextBytes + 2*maxErrorDataText + 4<<10

// bytesWire is what data costs in the structured content (protocol.Bytes).
func bytesWire(data []byte) int {
	b, _ := protocol.Bytes(data).MarshalJSON()
	return len(b)
}

// answerOf sends a tools/call of tool with args and returns its answer
// as written (the progress notifications before it are skipped) and
// decoded.
func answerOf(t *testing.T, c *rawClient, id int, tool string, args map[string]any) ([]byte, map[string]any) {
	t.Helper()
	call, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": map[string]any{"name": tool, "arguments": args}})
	c.send(string(call))
	for {
		line := c.readLine()
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("a line that is not JSON: %.200q", line)
		}
		if m["id"] == float64(id) {
			return line, m
		}
		if m["id"] == nil && m["error"] != nil {
			t.Fatalf("the call was refused: %.300s", line)
		}
	}
}

// A guest's output is in the answer once, in the structured content,
// where bytes that are not worth sending as text (NULs: six bytes each
// as \u0000) go as base64; the text content holds a bounded rendering.
// So an answer is at most its output's wire size plus answerSlack, for
// every tool that returns output or logs.
func TestAnAnswerHoldsTheOutputOnce(t *testing.T) {
	eng := newSnippetEngine()
	srv, err := New(eng, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := newRawClient(t, srv)
	out := limits.Defaults().OutputBytes // the default, cut at it
	mib := make([]byte, out)
	c.send(`{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"session_create","arguments":{"language":"js"}}}`)
	session := fmt.Sprint(c.read()["result"].(map[string]any)["structuredContent"].(map[string]any)["session"])
	mod := map[string]any{"wat": "(module)"}
	nulLogs := 0
	for range 1000 {
		nulLogs += wireLen(strings.Repeat("\x00", 100)) + 3
	}
	for i, tc := range []struct {
		name, tool string
		args       map[string]any
		output     int // the wire size of the guest's output in the structured content
		field      string
		isError    bool
	}{
		{"run_wasi stdout", "run_wasi", map[string]any{"module": mod, "args": []string{"zeros:2097152"}}, bytesWire(mib), "stdout", false},
		{"run_wasi both streams", "run_wasi", map[string]any{"module": mod, "args": []string{"zeros:2097152", "2>zeros:2097152"}}, 2 * bytesWire(mib), "stderr", false},
		{"run_snippet", "run_snippet", map[string]any{"language": "js", "code": "zeros:2097152"}, 2 * bytesWire(mib), "stdout", false},
		{"run_snippet failing", "run_snippet", map[string]any{"language": "js", "code": "zeros-error:2097152"}, 2 * bytesWire(mib), "stdout", true},
		{"session_eval", "session_eval", map[string]any{"session": session, "code": "zeros:2097152"}, 2 * bytesWire(mib), "stdout", false},
		{"call_plugin", "call_plugin", map[string]any{"module": map[string]any{"wat": "plugin"}, "function": "zeros", "input": "2097152"}, bytesWire(mib), "output", false},
		{"run_export log", "run_export", map[string]any{"module": mod, "function": "nullog:1000"}, nulLogs, "log", false},
	} {
		line, m := answerOf(t, c, i+1, tc.tool, tc.args)
		res, _ := m["result"].(map[string]any)
		if res == nil || (res["isError"] == true) != tc.isError {
			t.Errorf("%s: %.300s", tc.name, line)
			continue
		}
		if len(line) > tc.output+answerSlack {
			t.Errorf("%s: an answer of %d bytes for %d of output on the wire; want at most %d more", tc.name, len(line), tc.output, answerSlack)
		}
		if len(line) < tc.output {
			t.Errorf("%s: an answer of %d bytes, less than its output (%d): %.300s", tc.name, len(line), tc.output, line)
		}
		sc := res["structuredContent"].(map[string]any)
		if tc.field != "log" {
			// base64, the whole of it
			b64, _ := sc[tc.field].(map[string]any)["base64"].(string)
			if got, err := base64.StdEncoding.DecodeString(b64); err != nil || len(got) != int(out) || strings.Trim(string(got), "\x00") != "" {
				t.Errorf("%s: %s is not the output in base64 (%d bytes, %v)", tc.name, tc.field, len(got), err)
			}
		}
		text := res["content"].([]any)[0].(map[string]any)["text"].(string)
		if w := wireLen(text); w > maxTextBytes {
			t.Errorf("%s: text content of %d bytes on the wire", tc.name, w)
		}
		if !strings.Contains(text, "structuredContent."+tc.field) {
			t.Errorf("%s: the text does not say where the output is: %.500q", tc.name, text)
		}
	}
	// Output that fits is shown whole in the text too.
	_, m := answerOf(t, c, 50, "run_wasi", map[string]any{"module": mod, "args": []string{"hello", "2>oops"}})
	text := m["result"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"]
	if text != "exit code 2\n--- stdout ---\nhello\n--- stderr ---\noops" {
		t.Errorf("a small output's text: %q", text)
	}
	// Text output too long for the text: its first bytes, and where the rest is.
	long := strings.Repeat("a", 20000)
	_, m = answerOf(t, c, 51, "run_wasi", map[string]any{"module": mod, "args": []string{long}})
	text = m["result"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"]
	if s := fmt.Sprint(text); !strings.HasPrefix(s, "exit code 1\n--- stdout (the first 2045 of 20000 bytes; all of them in structuredContent.stdout) ---\naaa") || !strings.HasSuffix(s, "a…") {
		t.Errorf("a long output's text: %.200q", text)
	}
}

// The server's memory for one call is a small multiple of the answer's
// bound: what it allocates in all while answering a run_wasi call whose
// guest fills outputBytes (8 MiB) with NULs on both streams.
func TestTheMemoryOfACallIsBoundedByItsAnswer(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector allocates for itself")
	}
	const outputBytes = 8 << 20
	srv, err := New(newEngine(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := newRawClient(t, srv)
	call := func(id int) int64 {
		c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run_wasi","arguments":{"module":{"wat":"(module)"},"args":["zeros:%d","2>zeros:%d"],"limits":{"outputBytes":%d}}}}`,
			id, outputBytes, outputBytes, outputBytes))
		return discardLine(t, c.r)
	}
	call(1) // warm up
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	n := call(2)
	runtime.ReadMemStats(&after)
	bound := 2*bytesWire(make([]byte, outputBytes)) + answerSlack
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("answer %d bytes (bound %d); allocated %d bytes (%.1f × the bound)", n, bound, alloc, float64(alloc)/float64(bound))
	if n > int64(bound) {
		t.Errorf("an answer of %d bytes, past its bound %d", n, bound)
	}
	// The guest's output (2 × 8 MiB, the fake engine's) and the answer's
	// encodings: the base64, the SDK's encoding of the result, its copy
	// into the message.
	if alloc > uint64(8*bound) {
		t.Errorf("one call allocated %d bytes, more than 8 × its answer's bound (%d)", alloc, bound)
	}
}

// discardLine reads the next line without keeping it, and returns its
// length.
func discardLine(t *testing.T, r *bufio.Reader) int64 {
	t.Helper()
	var n int64
	for {
		chunk, err := r.ReadSlice('\n')
		n += int64(len(chunk))
		switch err {
		case nil:
			return n
		case bufio.ErrBufferFull:
			continue
		default:
			if err == io.EOF {
				t.Fatal("the server closed its output")
			}
			t.Fatal(err)
		}
	}
}
