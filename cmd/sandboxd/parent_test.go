package main

// A careless or hostile parent (issue 10, items 8-11) and first contact
// through a pipe (issue 15): each attack through the real binary, with
// generous bounds only to detect hangs. Measured bounds: docs/threat-model.md.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/rpc"
)

// stringID decodes a message's id as a JSON string ("" if it is not one).
func stringID(m *message) string {
	var s string
	_ = json.Unmarshal(m.ID, &s)
	return s
}

// Issue 10 item 8: an args array of millions of elements is refused before
// its elements are decoded, naming the field, at a cost of a small
// multiple of the message's size. (Before: 30 M elements took 3.4 GB and
// the run was answered as an export error after decoding them all.)
func TestParentHugeArgsRefusedEarly(t *testing.T) {
	s := startRaw(t, binPath)
	const n = 5_000_000
	var body bytes.Buffer
	fmt.Fprintf(&body, `{"jsonrpc":"2.0","id":1,"method":"run","params":{"module":{"path":%q},"function":"add","args":[0`, fixture("well_behaved.wat"))
	body.WriteString(strings.Repeat(",0", n-1))
	body.WriteString(`]}}`)
	s.sendBody(body.Bytes())
	s.request("2", "stats", nil)
	r, _ := s.response("1", 60*time.Second)
	if r.Error == nil || r.Error.Code != rpc.CodeInvalidParams || !strings.Contains(r.Error.Message, "args") || !strings.Contains(r.Error.Message, "1000") {
		t.Errorf("want -32602 naming args and the 1000-parameter limit, got %s", trunc(r.raw))
	}
	s.response("2", 30*time.Second)
	peak := vmHWM(t, s.pid())
	t.Logf("a %d-byte message of %d args: peak RSS %s", body.Len(), n, mib(peak))
	if peak > 256<<20 {
		t.Errorf("peak RSS %s decoding a %s message: want < 256 MiB", mib(peak), mib(uint64(body.Len())))
	}
}

// Issue 10 item 8: the queue is bounded in bytes: past --max-queue-bytes a
// request is answered busy, and what was admitted still runs.
func TestParentQueueBoundedByBytes(t *testing.T) {
	s := startRaw(t, binPath, "--max-concurrency", "1", "--max-message-bytes", "4194304", "--max-queue-bytes", "8388608")
	s.request(`"spin"`, "run", runParams(fixture("infinite_loop.wat"), "", nil, map[string]uint64{"fuel": hugeFuel, "timeoutMs": 60000}, nil))
	s.waitRunning(1, 0)
	wat := `(module (func (export "add") (param i32 i32) (result i32) local.get 0 local.get 1 i32.add)) ;; ` + strings.Repeat("x", 3<<20)
	for i := range 4 {
		s.request(strconv.Itoa(i), "run", map[string]any{"module": map[string]any{"wat": wat}, "function": "add", "args": []int{i, 1}})
	}
	for _, id := range []string{"2", "3"} {
		r, _ := s.response(id, 30*time.Second)
		var d struct {
			MaxQueueBytes int64 `json:"maxQueueBytes"`
			QueuedBytes   int64 `json:"queuedBytes"`
		}
		if r.Error == nil || r.Error.Code != rpc.CodeBusy || json.Unmarshal(r.Error.Data, &d) != nil || d.MaxQueueBytes != 8<<20 || d.QueuedBytes < 6<<20 {
			t.Errorf("run %s: want busy (-32000) with maxQueueBytes 8388608 and about 6 MiB queued, got %s", id, trunc(r.raw))
		}
	}
	s.notify("$/cancelRequest", map[string]any{"id": "spin"})
	for i, id := range []string{"0", "1"} {
		r, _ := s.response(id, 30*time.Second)
		if r.Error != nil || !strings.Contains(string(r.Result), fmt.Sprintf(`"value":%d`, i+1)) {
			t.Errorf("admitted run %s: want %d, got %s", id, i+1, trunc(r.raw))
		}
	}
}

// Issue 10 item 8: a parent that writes requests and never reads is
// stopped by back-pressure: the sidecar stops reading once its output
// passes the high water, so the parent's writes block instead of the
// sidecar's memory growing. (Before: 1 M initialize requests pushed RSS to
// 1.22 GB.)
func TestParentNotReadingBackPressure(t *testing.T) {
	cmd := exec.Command(binPath, "serve")
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe() // not read until the writes have stalled
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	pid := cmd.Process.Pid
	const total = 300_000
	req := []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize"}`)
	frame := []byte(fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(req), req))
	var written atomic.Int64
	done := make(chan error, 1)
	go func() {
		batch := bytes.Repeat(frame, 1000)
		for written.Load() < total {
			if _, err := stdin.Write(batch); err != nil {
				done <- err
				return
			}
			written.Add(1000)
		}
		done <- stdin.Close()
	}()
	// Wait until the writes stop making progress (blocked by the full
	// pipe), or every request is written.
	last, still := int64(-1), 0
	deadline := time.Now().Add(120 * time.Second)
	for still < 10 && time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("the sidecar read all %d requests without the parent reading (%v); peak RSS %s", written.Load(), err, mib(vmHWM(t, pid)))
		case <-time.After(100 * time.Millisecond):
		}
		if n := written.Load(); n == last {
			still++
		} else {
			last, still = n, 0
		}
		if peak := vmHWM(t, pid); peak > 512<<20 {
			t.Fatalf("peak RSS %s after %d unread requests", mib(peak), written.Load())
		}
	}
	peak := vmHWM(t, pid)
	t.Logf("writes stopped after %d of %d requests; peak RSS %s", last, total, mib(peak))
	if peak > 256<<20 {
		t.Errorf("peak RSS %s with the parent not reading: want < 256 MiB (64 MiB high water)", mib(peak))
	}
	// Reading again resumes the session: the rest is read and answered.
	answered := make(chan int, 1)
	go func() {
		data, _ := io.ReadAll(stdout)
		answered <- bytes.Count(data, []byte(`"serverInfo"`))
	}()
	if err := <-done; err != nil {
		t.Fatalf("writing after reading resumed: %v", err)
	}
	select { // stdout ends when the sidecar exits; Wait may close it only then
	case n := <-answered:
		if n != total {
			t.Errorf("%d of %d initialize requests answered", n, total)
		}
	case <-time.After(120 * time.Second):
		t.Fatalf("the sidecar did not finish within 120 s of its input ending")
	}
	if code, _, killed := waitTimeout(cmd, 30*time.Second); killed || code != exitServeOK {
		t.Fatalf("exit %d (killed %v) after the input ended; stderr:\n%s", code, killed, stderr.String())
	}
}

// Issue 10 item 9: ids are compared by value, so string ids with JSON
// escapes or <, >, & run and are answered with the same value (before:
// -32603, never run); $/cancelRequest finds a run by the id's value too.
func TestParentEscapedIDs(t *testing.T) {
	s := startRaw(t, binPath)
	ids := map[string]string{ // raw id -> its value
		`"\u0041"`: "A", `"a\/b"`: "a/b", `"<"`: "<", `">&"`: ">&", `"\u00e9t\u00e9"`: "été", `"\"q\""`: `"q"`,
	}
	for raw := range ids {
		s.sendBody([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"run","params":{"module":{"path":%q},"function":"add","args":[2,40]}}`, raw, fixture("well_behaved.wat"))))
	}
	// A run whose id has escapes, cancelled by the plain spelling of it.
	s.sendBody([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":"\u0073pin","method":"run","params":{"module":{"path":%q},"limits":{"fuel":%d,"timeoutMs":60000}}}`, fixture("infinite_loop.wat"), uint64(hugeFuel))))
	s.waitRunning(1, 0)
	s.notify("$/cancelRequest", map[string]any{"id": "spin"})
	values := map[string]bool{}
	for _, v := range ids {
		values[v] = true
	}
	got := map[string]*message{}
	ok := s.waitUntil(60*time.Second, func() bool {
		for _, m := range s.msgs {
			if v := stringID(m); m.isResponse() && (v == "spin" || values[v]) {
				got[v] = m
			}
		}
		return len(got) >= len(ids)+1
	})
	s.mu.Unlock()
	if !ok {
		t.Fatalf("answered %d of %d runs", len(got), len(ids)+1)
	}
	for raw, val := range ids {
		m := got[val]
		if m == nil || m.Error != nil || !strings.Contains(string(m.Result), `"value":42`) {
			t.Errorf("id %s: want the result 42 under id %q, got %v", raw, val, m)
		}
	}
	if m := got["spin"]; m == nil || m.Error == nil || m.Error.Code != rpc.CodeCancelled {
		t.Errorf(`id "\u0073pin" cancelled as "spin": want -32800, got %v`, m)
	}
}

// Issue 10 item 10: a Content-Length over --max-message-bytes is answered
// at once, before any of its body arrives (before: only after the whole
// body was skipped, so 10^12 was never answered). The body is then
// skipped; a parent that ends its input inside it gets exit 2 and a
// stderr line saying so.
func TestParentHugeContentLengthAnsweredAtOnce(t *testing.T) {
	s := startRaw(t, binPath)
	s.sendBytes([]byte("Content-Length: 1000000000000\r\n\r\n{\"jsonrpc\""))
	m := s.mustTake(30 * time.Second)
	if m.Error == nil || m.Error.Code != rpc.CodeInvalidRequest || !strings.Contains(m.Error.Message, "1000000000000") || !strings.Contains(m.Error.Message, "--max-message-bytes") {
		t.Errorf("want -32600 naming the length and --max-message-bytes, got %s", m.raw)
	}
	_ = s.stdin.Close()
	code, _, killed := s.wait(30 * time.Second)
	if killed || code != exitServeFraming {
		t.Errorf("exit %d (killed %v), want %d", code, killed, exitServeFraming)
	}
	if e := s.stderr.String(); !strings.Contains(e, "oversized message body") {
		t.Errorf("stderr does not explain the end: %q", e)
	}
}

// Issue 10 item 11: shutdown cannot hang. With a small output high water
// and a parent that never reads, the sidecar exits soon after its input
// closes (the output is abandoned after the drain timeout) instead of
// waiting forever for workers that wait for the output.
func TestParentNeverReadsExitAfterEOF(t *testing.T) {
	cmd := exec.Command(binPath, "serve", "--max-concurrency", "1", "--output-high-water", "4096")
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe() // never read
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": i, "method": "run", "params": runParams(fixture("log_flood.wat"), "", nil,
			map[string]uint64{"timeoutMs": 2000}, map[string]any{"log": true})})
		fmt.Fprintf(stdin, "Content-Length: %d\r\n\r\n%s", len(b), b)
	}
	time.Sleep(300 * time.Millisecond) // the attack: runs log while nobody reads
	_ = stdin.Close()
	code, took, killed := waitTimeout(cmd, 30*time.Second)
	t.Logf("exit %d %v after stdin EOF with a parent that never reads", code, took.Round(time.Millisecond))
	if killed {
		t.Fatalf("the sidecar did not exit within 30 s of stdin EOF with a parent that never reads; stderr:\n%s", stderr.String())
	}
	if code != exitServeOK {
		t.Errorf("exit %d, want 0; stderr:\n%s", code, stderr.String())
	}
}

// Issue 15: piping into serve. When shutdown arrives before the end of
// input, admitted runs finish (bounded by their own limits) and are
// answered before exit; without shutdown the end of input cancels them
// (TestSidecarStdinEOF).
func TestServePipedShutdownFinishesRuns(t *testing.T) {
	s := startRaw(t, binPath, "--max-concurrency", "1")
	var in bytes.Buffer
	frame := func(id, method string, params any) {
		m := map[string]any{"jsonrpc": "2.0", "method": method}
		if id != "" {
			m["id"] = json.RawMessage(id)
		}
		if params != nil {
			m["params"] = params
		}
		b, _ := json.Marshal(m)
		fmt.Fprintf(&in, "Content-Length: %d\r\n\r\n%s", len(b), b)
	}
	frame("1", "run", runParams(fixture("well_behaved.wat"), "add", []any{2, 2}, map[string]uint64{"fuel": 4}, nil))
	frame("2", "run", runParams(fixture("infinite_loop.wat"), "", nil, map[string]uint64{"fuel": hugeFuel, "timeoutMs": 300}, nil))
	frame("3", "run", runParams(fixture("well_behaved.wat"), "add", []any{40, 2}, nil, nil))
	frame("4", "shutdown", nil)
	frame("5", "run", runParams(fixture("well_behaved.wat"), "add", []any{1, 1}, nil, nil))
	frame("", "exit", nil)
	s.sendBytes(in.Bytes())
	_ = s.stdin.Close()
	code, _, killed := s.wait(60 * time.Second)
	if killed || code != exitServeOK {
		t.Errorf("exit %d (killed %v), want 0", code, killed)
	}
	want := map[string]string{"1": `"value":4`, "3": `"value":42`}
	for id, part := range want {
		r, _ := s.response(id, time.Second)
		if r.Error != nil || !strings.Contains(string(r.Result), part) {
			t.Errorf("run %s: want a result with %s, got %s", id, part, r.raw)
		}
	}
	if r, _ := s.response("2", time.Second); r.kind() != "timeout" {
		t.Errorf("run 2: want its own timeout, got %s", r.raw)
	}
	if r, _ := s.response("4", time.Second); r.Error != nil || string(bytes.TrimSpace(r.Result)) != "null" {
		t.Errorf("shutdown: want null, got %s", r.raw)
	}
	if r, _ := s.response("5", time.Second); r.Error == nil || r.Error.Code != rpc.CodeInvalidRequest {
		t.Errorf("run after shutdown: want -32600, got %s", r.raw)
	}
}

// Issue 15: ndjson sent to a Content-Length sidecar is named at once, in an
// error frame and on stderr, pointing at --framing=ndjson (before: the
// sidecar waited for a header that never came).
func TestServeNDJSONToContentLength(t *testing.T) {
	s := startRaw(t, binPath)
	s.sendBytes([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize"}` + "\n"))
	m := s.mustTake(30 * time.Second)
	if m.Error == nil || !strings.Contains(m.Error.Message, "--framing=ndjson") {
		t.Errorf("want an error frame naming --framing=ndjson, got %s", m.raw)
	}
	code, _, killed := s.wait(30 * time.Second)
	if killed || code != exitServeFraming {
		t.Errorf("exit %d (killed %v), want %d", code, killed, exitServeFraming)
	}
	if e := s.stderr.String(); !strings.Contains(e, "--framing=ndjson") {
		t.Errorf("stderr does not name --framing=ndjson: %q", e)
	}
}
