package main

// A careless or hostile parent, each attack through the real binary:
// framing (Content-Length, exact envelope keys), escaped and long ids, the
// queue bounded by bytes and back pressure, huge inputs refused early, a
// parent that stops reading or leaves stderr unread, notifications bounded
// on the wire, the WASI files layout under a deadline and a cancel, first
// contact through a pipe. Generous bounds only detect hangs; the measured
// bounds are in docs/threat-model.md.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
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

// TestLongIDsDoNotMultiplyLogNotifications: every `log` notification
// carries its run's id, and the engine's log budget charges each line for
// an id of at most 32 bytes. A parent that sent a 100 KB id got that id
// copied into every notification: a guest logging empty lines made 4,150
// notifications (415 MB queued, sidecar RSS 549 MiB) in 6 s under the
// default logBytes of 1 MiB, and a parent that did not read held them all
// in the sidecar's memory. The sidecar now charges each notification its
// real wire size, id included, against logBytes.
func TestLongIDsDoNotMultiplyLogNotifications(t *testing.T) {
	s := startWire(t)
	const logBytes = 256 << 10
	for _, id := range []string{
		`"` + strings.Repeat("i", 16<<10) + `"`,
		// < costs six bytes as the sidecar encodes it (and as sent here,
		// since wireSidecar compares ids as raw bytes).
		`"` + strings.Repeat(`\u003c`, 4<<10) + `"`,
	} {
		logs, resp := s.run(t, id, map[string]any{
			"module":       map[string]any{"wat": logGuest("", 100_000)},
			"args":         []any{0},
			"limits":       map[string]any{"logBytes": logBytes, "fuel": hugeFuel, "timeoutMs": 60_000},
			"capabilities": map[string]any{"log": true},
		}, "log")
		var res struct {
			LogLines     int  `json:"logLines"`
			LogTruncated bool `json:"logTruncated"`
		}
		if resp.err != nil || json.Unmarshal(resp.result, &res) != nil {
			t.Fatalf("want a result, got error %s", resp.err)
		}
		wire := 0
		for _, f := range logs {
			wire += f.size
		}
		t.Logf("id of %d bytes: %d notifications, %d wire bytes for logBytes %d", len(id), len(logs), wire, logBytes)
		if wire > logBytes {
			t.Errorf("id of %d bytes: %d log notifications took %d bytes on the wire, over logBytes %d", len(id), len(logs), wire, logBytes)
		}
		if res.LogLines != len(logs) || !res.LogTruncated {
			t.Errorf("result: logLines %d (sent %d), logTruncated %v; want the sent count and true", res.LogLines, len(logs), res.LogTruncated)
		}
	}
}

// alternatingWriter is a WASI guest that writes one byte to stdout, then
// one to stderr, count times: each switch of stream flushes the engine's
// coalescing, so every byte is a piece of its own.
func alternatingWriter(count int) string {
	return fmt.Sprintf(`(module
	  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
	  (memory (export "memory") 1)
	  (data (i32.const 0) "\10\00\00\00\01\00\00\00")
	  (data (i32.const 16) "x")
	  (func (export "_start") (local $i i32)
	    (loop $l
	      (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 32)))
	      (drop (call $w (i32.const 2) (i32.const 0) (i32.const 1) (i32.const 32)))
	      (local.set $i (i32.add (local.get $i) (i32.const 1)))
	      (br_if $l (i32.lt_u (local.get $i) (i32.const %d))))))`, count)
}

// TestOutputNotificationsAreBoundedOnTheWire: a WASI guest alternating
// one-byte writes between stdout and stderr made one `output`
// notification per byte, about 80 bytes of envelope (plus the request id)
// for each byte of output: 2,000,000 notifications for the default
// outputBytes of 1 MiB, and with a 1 KB id and a parent that did not read,
// sidecar RSS 1.1 GB after 20 s and growing. The envelopes of a run's
// output notifications now take at most outputBytes; past that the pieces
// of each stream are coalesced, and each stream still concatenates to the
// result's.
func TestOutputNotificationsAreBoundedOnTheWire(t *testing.T) {
	const outputBytes = 16 << 10
	for _, id := range []string{`"short"`, `"` + strings.Repeat("i", 1000) + `"`} {
		s := startRaw(t, binPath)
		s.request(id, "run", map[string]any{
			"module":       map[string]any{"wat": alternatingWriter(3 * outputBytes)},
			"capabilities": map[string]any{"wasi": map[string]any{}},
			"limits":       map[string]any{"outputBytes": outputBytes, "fuel": hugeFuel, "timeoutMs": 60_000},
		})
		resp, msgs := s.response(id, 60*time.Second)
		if resp.Error != nil {
			t.Fatalf("want a result, got %s", trunc(resp.raw))
		}
		var res struct {
			Stdout, Stderr  protocol.Bytes
			OutputTruncated bool `json:"outputTruncated"`
		}
		if err := json.Unmarshal(resp.Result, &res); err != nil {
			t.Fatal(err)
		}
		var wire, count int
		streams := map[string][]byte{}
		for _, m := range msgs {
			if m.Method != "output" {
				continue
			}
			var p protocol.OutputParams
			if err := json.Unmarshal(m.Params, &p); err != nil {
				t.Fatalf("bad output params: %s", trunc(m.raw))
			}
			if p.Seq != count {
				t.Fatalf("output seq %d where %d was due", p.Seq, count)
			}
			count++
			wire += len(m.raw) + len(fmt.Sprintf("Content-Length: %d\r\n\r\n", len(m.raw)))
			streams[p.Stream] = append(streams[p.Stream], p.Data...)
		}
		t.Logf("id of %d bytes: %d output notifications, %d wire bytes for outputBytes %d", len(id), count, wire, outputBytes)
		if !bytes.Equal(streams["stdout"], res.Stdout) || !bytes.Equal(streams["stderr"], res.Stderr) {
			t.Errorf("the pieces (%d, %d bytes) are not the result's streams (%d, %d bytes)",
				len(streams["stdout"]), len(streams["stderr"]), len(res.Stdout), len(res.Stderr))
		}
		// The engine charges each one-byte piece its wire size
		// (sandbox.OutputPieceCost), so the streams stop well short of
		// outputBytes (output_test.go).
		if len(res.Stdout) == 0 || len(res.Stdout) > outputBytes || len(res.Stderr) == 0 || len(res.Stderr) > outputBytes || !res.OutputTruncated {
			t.Errorf("result: stdout %d, stderr %d bytes, outputTruncated %v; want 1 to %d each, true",
				len(res.Stdout), len(res.Stderr), res.OutputTruncated, outputBytes)
		}
		// The data of both streams, the envelopes up to outputBytes, and
		// the coalesced pieces' envelopes (each carries at least its own
		// size of data).
		if bound := 5 * outputBytes; wire > bound {
			t.Errorf("id of %d bytes: %d output notifications took %d bytes on the wire, over %d (5 × outputBytes)", len(id), count, wire, bound)
		}
	}
}

// TestContentLengthIsOneUnsignedNumber: a header block with two
// Content-Length headers that disagree was read by the last one, and
// "+46" was read as 46. Anything between parent and sidecar that reads the
// first header (a proxy, a logger, a recorder) splits the stream elsewhere
// than the sidecar, so a message it inspected is not the one that runs. As
// in HTTP, a Content-Length is digits only, and headers that disagree make
// the stream unreadable: exit 2, naming both values.
func TestContentLengthIsOneUnsignedNumber(t *testing.T) {
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize"}`
	stats := `{"jsonrpc":"2.0","id":2,"method":"stats"}`
	for _, tc := range []struct{ name, input, want string }{
		{"conflicting", fmt.Sprintf("Content-Length: 5\r\nContent-Length: %d\r\n\r\n%s", len(init), init), "conflicting Content-Length headers"},
		{"sign", fmt.Sprintf("Content-Length: +%d\r\n\r\n%s", len(init), init), "invalid Content-Length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startRaw(t, binPath)
			s.sendBytes([]byte(tc.input))
			s.sendBody([]byte(stats))
			_ = s.stdin.Close()
			code, _, killed := s.wait(30 * time.Second)
			if killed || code != exitServeFraming {
				t.Errorf("exit %d (killed %v), want %d", code, killed, exitServeFraming)
			}
			for _, m := range s.all() {
				if m.Error == nil {
					t.Errorf("a message was served: %s", trunc(m.raw))
				}
			}
			if e := s.stderr.String(); !strings.Contains(e, tc.want) {
				t.Errorf("stderr does not say %q: %q", tc.want, e)
			}
		})
	}
	// The same value twice is one length.
	s := startRaw(t, binPath)
	s.sendBytes([]byte(fmt.Sprintf("Content-Length: %d\r\ncontent-length: %d\r\n\r\n%s", len(init), len(init), init)))
	if r, _ := s.response("1", 30*time.Second); r.Error != nil {
		t.Errorf("a repeated equal Content-Length: want initialize served, got %s", trunc(r.raw))
	}
}

// TestEnvelopeKeysAreExact: JSON-RPC's member names are case-sensitive,
// but the envelope was decoded by encoding/json, which matches struct
// fields case-insensitively and lets the last match win. So
// {"method":"stats","Method":"shutdown"} shut the sidecar down (anything
// that checked "method" on the way saw stats), "ID" answered as an id and
// "PARAMS" replaced "params". Only the exact names count now; other
// members are ignored.
func TestEnvelopeKeysAreExact(t *testing.T) {
	s := startRaw(t, binPath)
	s.sendBody([]byte(`{"jsonrpc":"2.0","id":1,"method":"stats","Method":"shutdown"}`))
	if r, _ := s.response("1", 30*time.Second); r.Error != nil || !strings.Contains(string(r.Result), `"runs"`) {
		t.Errorf(`"method":"stats","Method":"shutdown": want the stats, got %s`, trunc(r.raw))
	}
	// A notification (it has no "id"), whatever "ID" says: not answered.
	s.sendBody([]byte(`{"jsonrpc":"2.0","ID":2,"method":"initialize"}`))
	add := `{"wat":"(module (func (export \"add\") (param i32 i32) (result i32) local.get 0 local.get 1 i32.add))"}`
	s.sendBody([]byte(`{"jsonrpc":"2.0","id":3,"method":"run","params":{"module":` + add + `,"function":"add","args":[1,2]},` +
		`"PARAMS":{"module":` + add + `,"function":"add","args":[40,2]}}`))
	r, msgs := s.response("3", 30*time.Second)
	if r.Error != nil || !strings.Contains(string(r.Result), `"value":3`) {
		t.Errorf(`"params" then "PARAMS": want add(1, 2) = 3 (the server not shut down, "params" used), got %s`, trunc(r.raw))
	}
	for _, m := range msgs {
		if m.idKey() == "2" {
			t.Errorf(`a message with "ID" but no "id" was answered: %s`, trunc(m.raw))
		}
	}
}

// TestUnreadStderrDoesNotStallTheSidecar: a parent that pipes the
// sidecar's stderr and never reads it (subprocess.PIPE, forgotten) filled
// the pipe with the warnings its own input caused (here: notifications
// the sidecar ignores, one line each), and then every log call blocked:
// requests went unanswered and the sidecar never exited after stdin EOF.
// Diagnostics now go through a bounded buffer; past it, lines are dropped
// and counted.
func TestUnreadStderrDoesNotStallTheSidecar(t *testing.T) {
	cmd := exec.Command(binPath, "serve", "--framing=ndjson")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe() // never read
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	go func() {
		var b bytes.Buffer
		for range 5000 {
			b.WriteString(`{"jsonrpc":"2.0","method":"no/such/notification"}` + "\n")
		}
		b.WriteString(`{"jsonrpc":"2.0","id":1,"method":"stats"}` + "\n")
		_, _ = stdin.Write(b.Bytes())
	}()
	answered := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		answered <- line
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-answered:
		if !strings.Contains(line, `"runs"`) {
			t.Fatalf("want the stats, got %q", line)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("stats not answered within 30 s while nobody reads stderr")
	}
	_ = stdin.Close()
	if code, _, killed := waitTimeout(cmd, 10*time.Second); killed || code != 0 {
		t.Errorf("after stdin EOF: exit %d, killed %v; want 0 within 10 s", code, killed)
	}
}

// requestManyFiles sends run id of a WASI guest that exits 3, granted n
// empty files, under lim (nil: the defaults).
func requestManyFiles(s *rawSidecar, id string, n int, lim map[string]any) {
	files := make(map[string]string, n)
	for i := range n {
		files[fmt.Sprintf("/f%d", i)] = ""
	}
	params := map[string]any{
		"module": map[string]any{"wat": `(module (import "wasi_snapshot_preview1" "proc_exit" (func $e (param i32)))
		  (memory (export "memory") 1) (func (export "_start") (call $e (i32.const 3))))`},
		"capabilities": map[string]any{"wasi": map[string]any{"files": files}},
	}
	if lim != nil {
		params["limits"] = lim
	}
	s.request(id, "run", params)
}

// TestWASIFilesLayoutHonoursTheTimeout: the lay-out of a files grant did
// not count against timeoutMs: 60,000 empty files under timeoutMs 100 were
// all written (22 s on a loaded machine), then the guest ran and exited 3.
// The lay-out now stops at timeoutMs with timeout, so a run takes at most
// twice it.
func TestWASIFilesLayoutHonoursTheTimeout(t *testing.T) {
	s := startRaw(t, binPath, "--framing=ndjson")
	requestManyFiles(s, `1`, 60_000, map[string]any{"timeoutMs": 100, "memoryBytes": 1 << 30}) // the grant keeps a page per file
	if r, _ := s.response("1", 120*time.Second); r.kind() != "timeout" {
		t.Errorf("want the run answered timeout, got %s", trunc(r.raw))
	}
}

// TestWASIFilesLayoutIsCancellable: capabilities.wasi.files is written to
// disk, one file at a time, before the run's store exists, and the loop
// did not look at the run's context: 60,000 empty files (a 1 MB message)
// kept a cancel unanswered for 64 s and the sidecar alive 21 s after
// stdin EOF (the drain bound is 1 s). The lay-out now stops when the run
// is cancelled, so the end of input ends it. The input ends once files
// appear (the sidecar's TMPDIR is the test's): the vetting and sorting of
// 200,000 paths before the lay-out looks at no context, and at load 15 it
// outlasted the 1 s drain, which failed the test without a bug. The run's
// timeout is a minute, so a lay-out blind to the cancel keeps the sidecar
// alive past the 30 s bound.
func TestWASIFilesLayoutIsCancellable(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	s := startRaw(t, binPath, "--framing=ndjson")
	requestManyFiles(s, `1`, protocol.MaxWASIFiles, map[string]any{"timeoutMs": 60_000, "memoryBytes": 1 << 30}) // the grant keeps a page per file
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(5 * time.Millisecond) {
		trees, _ := filepath.Glob(filepath.Join(tmp, "sandboxd-*", "files-*", "f*"))
		if len(trees) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no file of the grant was laid out within 2 minutes")
		}
	}
	_ = s.stdin.Close()
	code, _, killed := s.wait(30 * time.Second)
	if killed || code != 0 {
		t.Fatalf("stdin EOF while the files were laid out: exit %d, killed %v; want exit 0 well within 30 s", code, killed)
	}
	if r, _ := s.response("1", time.Second); r.kind() != "cancelled" {
		t.Errorf("want the run answered cancelled, got %s", trunc(r.raw))
	}
}
