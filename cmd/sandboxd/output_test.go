package main

// A guest's log and output, through the real binary: notifications cost
// their wire size (log lines and WASI output, in whatever pieces and
// timing), empty lines are bounded too, logging never blocks the guest,
// and the CLI never passes a guest's control characters to the terminal.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
)

// wireFrame is one frame the sidecar wrote, with its size on the wire
// (Content-Length header included).
type wireFrame struct {
	size   int
	method string
	id     json.RawMessage // the response's id, or a log notification's params.id
	line   string          // a log notification's line
	result json.RawMessage
	err    json.RawMessage
}

// wireSidecar is `sandboxd serve` whose every output frame is measured.
type wireSidecar struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	frames chan wireFrame
	stderr bytes.Buffer
}

func startWire(t *testing.T, args ...string) *wireSidecar {
	t.Helper()
	s := &wireSidecar{frames: make(chan wireFrame, 1024)}
	s.cmd = exec.Command(binPath, append([]string{"serve"}, args...)...)
	s.cmd.Stderr = &s.stderr
	var err error
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go s.read(stdout)
	t.Cleanup(func() {
		_ = s.stdin.Close()
		if _, _, killed := waitTimeout(s.cmd, 10*time.Second); killed {
			t.Errorf("sidecar did not exit within 10 s of stdin EOF")
		}
		if t.Failed() {
			t.Logf("sidecar stderr:\n%s", s.stderr.String())
		}
	})
	return s
}

// read parses every frame strictly; a bad one ends reading with a frame
// whose method is "!bad" and whose line says what was wrong.
func (s *wireSidecar) read(stdout io.Reader) {
	defer close(s.frames)
	bad := func(format string, args ...any) {
		s.frames <- wireFrame{method: "!bad", line: fmt.Sprintf(format, args...)}
		_, _ = io.Copy(io.Discard, stdout)
	}
	r := bufio.NewReaderSize(stdout, 1<<20)
	for {
		header, err := r.ReadString('\n')
		if err != nil {
			return
		}
		n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(header, "Content-Length:")))
		if err != nil {
			bad("unexpected header %q", header)
			return
		}
		blank, err := r.ReadString('\n')
		if err != nil || blank != "\r\n" {
			bad("header not followed by a blank line: %q", blank)
			return
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			bad("short body: %v", err)
			return
		}
		var m struct {
			Method string          `json:"method"`
			ID     json.RawMessage `json:"id"`
			Params struct {
				ID   json.RawMessage `json:"id"`
				Line string          `json:"line"`
			} `json:"params"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(body, &m); err != nil {
			bad("frame is not JSON: %v", err)
			return
		}
		f := wireFrame{size: len(header) + len(blank) + n, method: m.Method, id: m.ID, result: m.Result, err: m.Error}
		if m.Method != "" { // a notification names its run in params
			f.id = m.Params.ID
		}
		if m.Method == "log" {
			f.line = m.Params.Line
		}
		s.frames <- f
	}
}

// run sends one run request and collects its notifications, which must
// all be of method note ("log" or "output"), and its response.
func (s *wireSidecar) run(t *testing.T, id string, params map[string]any, note string) (notes []wireFrame, resp wireFrame) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "method": "run", "params": params})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(s.stdin, "Content-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(120 * time.Second) // only a hang detector
	for {
		select {
		case f, ok := <-s.frames:
			if !ok {
				t.Fatalf("run %s: the sidecar closed stdout before answering", id)
			}
			if f.method == "!bad" {
				t.Fatalf("run %s: %s", id, f.line)
			}
			if string(f.id) != id {
				t.Fatalf("run %s: unexpected %q frame for id %s", id, f.method, f.id)
			}
			switch f.method {
			case "":
				return notes, f
			case note:
				notes = append(notes, f)
			default:
				t.Fatalf("run %s: unexpected notification %q", id, f.method)
			}
		case <-deadline:
			t.Fatalf("run %s: no response within 120 s", id)
		}
	}
}

// logGuest calls host::log(0, len) count times; the line's bytes are the
// ones at address 0, set by a data segment.
func logGuest(data string, count int) string {
	return fmt.Sprintf(`(module (import "host" "log" (func $log (param i32 i32)))
	  (memory (export "memory") 1)
	  (data (i32.const 0) "%s")
	  (func (export "run") (param $len i32) (local $i i32)
	    (loop $l
	      (call $log (i32.const 0) (local.get $len))
	      (local.set $i (i32.add (local.get $i) (i32.const 1)))
	      (br_if $l (i32.lt_u (local.get $i) (i32.const %d))))))`, data, count)
}

// watBytes writes b as a WAT string literal.
func watBytes(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		fmt.Fprintf(&sb, "\\%02x", c)
	}
	return sb.String()
}

// TestLogNotificationsCostTheirWireSize: whatever a
// guest logs (100,000 empty lines, lines of NULs that JSON escapes to six
// bytes each, every byte value), the bytes of its log notifications on the
// wire stay within logBytes, every frame within its line's LogLineCost,
// and the result says the log was truncated.
func TestLogNotificationsCostTheirWireSize(t *testing.T) {
	s := startWire(t)
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	// An id of 32 encoded bytes: the longest LogLineOverhead covers.
	id := `"` + strings.Repeat("i", 30) + `"`
	for _, tc := range []struct {
		name     string
		data     string
		len      int
		count    int
		logBytes uint64
	}{
		{"empty lines", "", 0, 100_000, 4096},
		{"empty lines, logBytes 1", "", 0, 100_000, 1},
		{"lines of NULs", "", 1000, 10_000, 64 << 10},
		{"every byte value", watBytes(every), 256, 10_000, 64 << 10},
		{"maximal lines of NULs", "", 1 << 16, 1000, 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs, resp := s.run(t, id, map[string]any{
				"module":       map[string]any{"wat": logGuest(tc.data, tc.count)},
				"args":         []any{tc.len},
				"limits":       map[string]any{"logBytes": tc.logBytes, "fuel": hugeFuel, "timeoutMs": 60_000},
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
				if uint64(f.size) > sandbox.LogLineCost(f.line) {
					t.Errorf("a notification of %d bytes for a line that costs %d", f.size, sandbox.LogLineCost(f.line))
					break
				}
			}
			t.Logf("%d notifications, %d wire bytes for logBytes %d (guest called host::log %d times)",
				len(logs), wire, tc.logBytes, tc.count)
			if uint64(wire) > tc.logBytes {
				t.Errorf("%d log notifications took %d bytes on the wire, over logBytes %d", len(logs), wire, tc.logBytes)
			}
			if res.LogLines != len(logs) || !res.LogTruncated {
				t.Errorf("result: logLines %d (sent %d), logTruncated %v; want the sent count and true",
					res.LogLines, len(logs), res.LogTruncated)
			}
		})
	}
}

// TestDefaultLogBytesBoundsEmptyLines: the operator's --default-log-bytes
// bounds a run that gives no logBytes of its own, empty lines included.
func TestDefaultLogBytesBoundsEmptyLines(t *testing.T) {
	s := startWire(t, "--default-log-bytes", "1")
	logs, resp := s.run(t, `1`, map[string]any{
		"module":       map[string]any{"wat": logGuest("", 100_000)},
		"args":         []any{0},
		"limits":       map[string]any{"fuel": hugeFuel, "timeoutMs": 60_000},
		"capabilities": map[string]any{"log": true},
	}, "log")
	if len(logs) != 0 || !strings.Contains(string(resp.result), `"logLines":0,"logTruncated":true`) {
		t.Errorf("--default-log-bytes 1: %d notifications, result %s %s; want none and logTruncated",
			len(logs), resp.result, resp.err)
	}
}

// hostileText is what a guest prints to take over a terminal: clear the
// screen and retitle the window (ESC, BEL), end the line and forge a
// result, return the carriage, a C1 CSI, a right-to-left override, a line
// separator, DEL, and a backslash so the escaping must stay unambiguous.
const hostileText = "\x1b[2J\x1b]0;owned\x07\nresult: I32(42)\r\u009b31m\u202e\u2028\x7f\\ é ok"

// hostileEscaped is hostileText as the CLI must print it.
const hostileEscaped = `\x1b[2J\x1b]0;owned\x07\nresult: I32(42)\r\u009b31m\u202e\u2028\x7f\\ é ok`

// terminalSafe fails unless s holds no byte or rune a terminal acts on,
// other than the newlines that end the CLI's own lines.
func terminalSafe(t *testing.T, what, s string) {
	t.Helper()
	for i, r := range s {
		if r != '\n' && (r == 0xfffd || r < 0x20 || (r >= 0x7f && r <= 0x9f) || r == 0x2028 || r == 0x2029 ||
			r == 0x061c || r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)) {
			t.Errorf("%s: raw %U at byte %d: %q", what, r, i, s)
			return
		}
	}
}

func writeWAT(t *testing.T, wat string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "guest.wat")
	if err := os.WriteFile(path, []byte(wat), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCLIEscapesGuestText: a guest's log line and a
// module's import name reach the terminal escaped, in text and --json
// mode, so they cannot drive the terminal or forge a "result:" line; the
// JSON still decodes to the exact text.
func TestCLIEscapesGuestText(t *testing.T) {
	logger := writeWAT(t, fmt.Sprintf(`(module (import "host" "log" (func $log (param i32 i32)))
	  (memory (export "memory") 1)
	  (data (i32.const 0) "%s")
	  (func (export "run") (call $log (i32.const 0) (i32.const %d))))`, watBytes([]byte(hostileText)), len(hostileText)))

	r := runCLI(t, logger, "--allow-log")
	wantCode(t, r, 0)
	if want := "[guest log] " + hostileEscaped + "\nresult: ()\n"; r.stdout != want {
		t.Errorf("stdout:\n%q\nwant\n%q", r.stdout, want)
	}
	terminalSafe(t, "text stdout", r.stdout)

	r = runCLI(t, logger, "--allow-log", "--json")
	wantCode(t, r, 0)
	oneJSONObject(t, r.stdout)
	if !strings.Contains(r.stderr, "[guest log] "+hostileEscaped+"\n") {
		t.Errorf("--json stderr does not carry the escaped line: %q", r.stderr)
	}
	terminalSafe(t, "--json stderr", r.stderr)

	// An import name is the module's text too, quoted by disallowed_import.
	importer := writeWAT(t, fmt.Sprintf(`(module (import "host" "%s" (func)) (func (export "run")))`, watBytes([]byte(hostileText))))
	r = runCLI(t, importer)
	wantCode(t, r, 5)
	if !strings.Contains(r.stderr, "host::"+hostileEscaped+" is not allowed") || r.stdout != "" {
		t.Errorf("disallowed_import, text mode: %s", r)
	}
	terminalSafe(t, "text stderr", r.stderr)

	r = runCLI(t, importer, "--json")
	wantCode(t, r, 5)
	var e struct {
		Error struct {
			Message string `json:"message"`
			Data    struct {
				Name string `json:"name"`
			} `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(oneJSONObject(t, r.stdout), &e); err != nil {
		t.Fatal(err)
	}
	if e.Error.Data.Name != hostileText || !strings.Contains(e.Error.Message, hostileText) {
		t.Errorf("--json must carry the exact name: data.name %q, message %q", e.Error.Data.Name, e.Error.Message)
	}
	terminalSafe(t, "--json stdout", r.stdout)
}

func TestEscapeText(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, é, 日本, 🙂":     "plain text, é, 日本, 🙂",
		"tab\tcr\rlf\nnul\x00":     `tab\tcr\rlf\nnul\x00`,
		"bad \xff\xfe utf-8":       `bad \xff\xfe utf-8`,
		"\u0085\u061c\u200e\u200f": `\u0085\u061c\u200e\u200f`,
		"\u202a\u202e\u2066\u2069": `\u202a\u202e\u2066\u2069`,
		`C:\dir`:                   `C:\\dir`,
	} {
		if got := escapeText(in); got != want {
			t.Errorf("escapeText(%q) = %q, want %q", in, got, want)
		}
	}
	in := "{\"a\":\"x\u009b\u202e\x7f\u00e9\"}"
	got := escapeJSON([]byte(in))
	var a, b map[string]string
	if json.Unmarshal([]byte(in), &a) != nil || json.Unmarshal(got, &b) != nil || a["a"] != b["a"] || string(got) != `{"a":"x\u009b\u202e\u007fé"}` {
		t.Errorf("escapeJSON(%q) = %q", in, got)
	}
}

// TestCLILogNeverBlocksTheGuest: host::log only queues in the CLI too.
// With stdout a pipe that nobody reads for 3 s, a guest logging 2 MB (far
// more than a pipe holds) still finishes inside its 1.5 s deadline, and
// every line is printed afterwards, before the result. (Printed from the
// guest's thread, the lines would hold it in host::log until the reader
// came back, past its deadline: exit 3.)
func TestCLILogNeverBlocksTheGuest(t *testing.T) {
	cmd := exec.Command(binPath, "run", fixture("log_flood.wat"), "--invoke", "flood", "--arg", "2000",
		"--allow-log", "--log-bytes", "4194304", "--timeout-ms", "1500")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the stall: twice the guest's deadline
	out, err := io.ReadAll(stdout)
	if err != nil {
		t.Fatal(err)
	}
	code, _, killed := waitTimeout(cmd, 60*time.Second)
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if killed || code != 0 || len(lines) != 2001 || lines[2000] != "result: ()" || lines[0] != "[guest log] "+strings.Repeat("x", 1000) {
		t.Errorf("exit %d (killed %v), %d stdout lines ending %q; stderr %q", code, killed, len(lines), lines[len(lines)-1], stderr.String())
	}
}

// writerGuest is a WASI command that, count times, writes len bytes of
// value b to fd 1, or to fd 1 and 2 in turn when alternate is set, and
// sleeps 2 ms after each write when sleep is set.
func writerGuest(b byte, length, count int, alternate, sleep bool) string {
	mask, nap := 0, ""
	if alternate {
		mask = 1
	}
	if sleep {
		nap = `(drop (call $poll (i32.const 64) (i32.const 128) (i32.const 1) (i32.const 192)))`
	}
	return fmt.Sprintf(`(module
	  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
	  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
	  (memory (export "memory") 2)
	  (func (export "_start") (local $i i32)
	    (i32.store (i32.const 0) (i32.const 1024))      ;; iovec: the bytes at 1024
	    (i32.store (i32.const 4) (i32.const %[2]d))
	    (memory.fill (i32.const 1024) (i32.const %[1]d) (i32.const %[2]d))
	    (i32.store (i32.const 80) (i32.const 1))         ;; subscription at 64: monotonic clock
	    (i64.store (i32.const 88) (i64.const 2000000))  ;; relative, 2 ms
	    (loop $l
	      (drop (call $write (i32.add (i32.const 1) (i32.and (local.get $i) (i32.const %[4]d)))
	        (i32.const 0) (i32.const 1) (i32.const 8)))
	      %[5]s
	      (local.set $i (i32.add (local.get $i) (i32.const 1)))
	      (br_if $l (i32.lt_u (local.get $i) (i32.const %[3]d))))))`, b, length, count, mask, nap)
}

// TestWASIOutputCostsItsWireSize: a guest that writes a byte at a time
// while switching streams or sleeping (one notification per byte before,
// ~130 wire bytes each) or writes bytes JSON escapes to six (NUL) cannot
// make its output notifications exceed sandbox.OutputWireBudget per
// stream, nor the result's stdout and stderr the same again; the result
// says the output was cut. Ordinary output in big writes is not cut.
func TestWASIOutputCostsItsWireSize(t *testing.T) {
	s := startWire(t)
	id := `"` + strings.Repeat("w", 30) + `"` // the longest id the overhead covers
	for _, tc := range []struct {
		name        string
		b           byte
		length      int
		count       int
		alternate   bool
		sleep       bool
		outputBytes uint64
		truncated   bool
	}{
		{"a byte per stream switch", 'a', 1, 200_000, true, false, 64 << 10, true},
		{"a NUL per stream switch", 0, 1, 200_000, true, false, 64 << 10, true},
		{"a byte per 2 ms sleep", 'a', 1, 400, false, true, 256, true},
		{"16 KiB writes of NUL", 0, 16 << 10, 64, false, false, 1 << 20, true},
		{"16 KiB writes of <", '<', 16 << 10, 64, true, false, 1 << 20, true},
		{"16 KiB writes of text", 'a', 16 << 10, 64, false, false, 1 << 20, false},
		{"16 KiB writes of text, both streams", 'a', 16 << 10, 128, true, false, 1 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			outputs, resp := s.run(t, id, map[string]any{
				"module":       map[string]any{"wat": writerGuest(tc.b, tc.length, tc.count, tc.alternate, tc.sleep)},
				"limits":       map[string]any{"outputBytes": tc.outputBytes, "fuel": hugeFuel, "timeoutMs": 110_000},
				"capabilities": map[string]any{"wasi": true},
			}, "output")
			var res struct {
				ExitCode        int             `json:"exitCode"`
				Stdout          json.RawMessage `json:"stdout"`
				Stderr          json.RawMessage `json:"stderr"`
				OutputTruncated bool            `json:"outputTruncated"`
			}
			if resp.err != nil || json.Unmarshal(resp.result, &res) != nil {
				t.Fatalf("want a result, got error %s", resp.err)
			}
			wire := 0
			for _, f := range outputs {
				wire += f.size
			}
			rss := vmHWM(t, s.cmd.Process.Pid)
			budget := sandbox.OutputWireBudget(tc.outputBytes)
			t.Logf("guest wrote %d×%d bytes: %d notifications, %d wire bytes, result frame %d bytes (outputBytes %d, budget %d per stream), sidecar peak RSS %s, %v",
				tc.count, tc.length, len(outputs), wire, resp.size, tc.outputBytes, budget, mib(rss), time.Since(start).Round(time.Millisecond))
			if uint64(wire) > 2*budget {
				t.Errorf("%d output notifications took %d bytes on the wire, over 2 × %d", len(outputs), wire, budget)
			}
			// The result frame: the two streams (each within its budget)
			// plus the rest of a run result.
			if fields := len(res.Stdout) + len(res.Stderr); uint64(fields) > 2*budget {
				t.Errorf("the result's stdout and stderr take %d bytes, over 2 × %d", fields, budget)
			}
			if res.OutputTruncated != tc.truncated {
				t.Errorf("outputTruncated %v, want %v", res.OutputTruncated, tc.truncated)
			}
			if !tc.truncated {
				want := tc.count * tc.length
				got := len(wireBytes(t, res.Stdout)) + len(wireBytes(t, res.Stderr))
				if got != want {
					t.Errorf("the result holds %d bytes of output, want all %d", got, want)
				}
			}
		})
	}
}
