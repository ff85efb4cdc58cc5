package main

// Shared machinery of the integration tests: the binaries under test
// (built once in TestMain), a raw-pipe sidecar with a strict frame parser,
// process helpers (exit status, liveness, RSS) and the helper-process mode
// used by the parent-death test.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

var (
	binPath       string // go build .
	faultsBinPath string // go build -tags sandboxd_faults .
	watDir        string // absolute path of testdata/wat
)

// helperEnv switches the test binary into a helper process (see
// helperParentMain) instead of running tests.
const helperEnv = "SANDBOXD_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "parent" {
		os.Exit(helperParentMain())
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sandboxd-itest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkdtemp:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "sandboxd")
	faultsBinPath = filepath.Join(dir, "sandboxd-faults")
	for _, b := range []struct{ out, tags string }{{binPath, ""}, {faultsBinPath, "sandboxd_faults"}} {
		args := []string{"build", "-o", b.out}
		if b.tags != "" {
			args = append(args, "-tags", b.tags)
		}
		args = append(args, ".")
		start := time.Now()
		cmd := exec.Command("go", args...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "go %s: %v\n", strings.Join(args, " "), err)
			return 1
		}
		if d := time.Since(start); d > 5*time.Second {
			fmt.Fprintf(os.Stderr, "built %s in %v\n", filepath.Base(b.out), d.Round(time.Millisecond))
		}
	}
	watDir, err = filepath.Abs(filepath.Join("..", "..", "testdata", "wat"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// fixture is the absolute path of a testdata/wat file.
func fixture(name string) string { return filepath.Join(watDir, name) }

// hugeFuel makes the deadline, not fuel, end an endless loop.
const hugeFuel = 1_000_000_000_000_000

// ---------------------------------------------------------------------------
// Small process helpers

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// exitCode of a finished command's Wait error: -1 if killed by a signal.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -2
}

// waitTimeout waits for cmd, killing it after d. It reports the exit
// code, how long the wait took and whether it had to kill.
func waitTimeout(cmd *exec.Cmd, d time.Duration) (code int, took time.Duration, killed bool) {
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return exitCode(err), time.Since(start), false
	case <-time.After(d):
		_ = cmd.Process.Kill()
		err := <-done
		return exitCode(err), time.Since(start), true
	}
}

// processGone reports whether pid no longer exists (ESRCH), treating a
// zombie as gone too (it has exited; only its reaping is pending).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) S ...: the state follows the last ')'.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] == 'Z' || b[i+2] == 'X'
	}
	return false
}

// vmRSS reads VmRSS of pid in bytes.
func vmRSS(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			if len(f) < 2 {
				break
			}
			kb, err := strconv.ParseUint(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmRSS line")
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// ---------------------------------------------------------------------------
// The Go client

// startClient spawns the sidecar through the Go client. Its stderr is kept
// and logged if the test fails; Close runs at cleanup.
func startClient(t *testing.T, bin string, args ...string) (*sandboxd.Client, *syncBuffer) {
	t.Helper()
	stderr := &syncBuffer{}
	c, err := sandboxd.Start(context.Background(), bin, sandboxd.Options{Args: args, Stderr: stderr})
	if err != nil {
		t.Fatalf("starting the sidecar: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		if t.Failed() {
			t.Logf("sidecar stderr:\n%s", stderr.String())
		}
	})
	return c, stderr
}

// modPath names a fixture by its absolute path.
func modPath(name string) rpc.ModuleSpec { return rpc.ModuleSpec{Path: sandboxd.Str(fixture(name))} }

// rawArgs turns Go values into run args.
func rawArgs(vals ...any) []json.RawMessage {
	out := make([]json.RawMessage, len(vals))
	for i, v := range vals {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		out[i] = b
	}
	return out
}

// asRPCError asserts err is a *sandboxd.Error.
func asRPCError(t *testing.T, err error) *sandboxd.Error {
	t.Helper()
	var e *sandboxd.Error
	if !errors.As(err, &e) {
		t.Fatalf("want a *sandboxd.Error, got %T: %v", err, err)
	}
	return e
}

// ctxT is a context bounded by d, cancelled at cleanup.
func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// ---------------------------------------------------------------------------
// The raw-pipe sidecar

// message is any message the sidecar writes, kept with its raw bytes.
type message struct {
	rpc.Message
	hasID bool
	raw   []byte
	at    time.Time // when the reader parsed it
}

func (m *message) isResponse() bool { return m.Method == "" && m.hasID }

// idKey is the id as sent ("null" if absent or null).
func (m *message) idKey() string {
	if !m.hasID {
		return "<none>"
	}
	return string(bytes.TrimSpace(m.ID))
}

func (m *message) kind() string {
	if m.Error == nil {
		return ""
	}
	var d struct{ Kind string }
	_ = json.Unmarshal(m.Error.Data, &d)
	return d.Kind
}

// logParams of a log notification.
type logParams struct {
	ID   json.RawMessage `json:"id"`
	Seq  int             `json:"seq"`
	Line string          `json:"line"`
}

// rawSidecar is the sidecar on plain pipes. Nothing reads its stdout until
// startReading; the reader then parses every byte strictly, so any stray
// output on stdout fails the test.
type rawSidecar struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	stderr *syncBuffer
	ndjson bool

	readOnce sync.Once
	mu       sync.Mutex
	cond     *sync.Cond
	msgs     []*message
	next     int // index of the next message take() returns
	claimed  map[*message]bool
	readErr  error // io.EOF at a clean end
	badFrame error // the first invalid frame

	waitOnce sync.Once
	waitErr  error
	waitDone chan struct{}
}

func startRaw(t *testing.T, bin string, args ...string) *rawSidecar {
	t.Helper()
	s := &rawSidecar{t: t, stderr: &syncBuffer{}, waitDone: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	for _, a := range args {
		if a == "--framing=ndjson" {
			s.ndjson = true
		}
	}
	s.cmd = exec.Command(bin, append([]string{"serve"}, args...)...)
	s.cmd.Stderr = s.stderr
	var err error
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if s.stdout, err = s.cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.stdin.Close()
		s.startReading()
		if _, _, killed := s.wait(5 * time.Second); killed {
			t.Errorf("sidecar did not exit within 5 s of stdin EOF; killed")
		}
		s.mu.Lock()
		bad := s.badFrame
		s.mu.Unlock()
		if bad != nil {
			t.Errorf("stdout carried something that is not a valid frame: %v", bad)
		}
		if t.Failed() {
			t.Logf("sidecar stderr:\n%s", s.stderr.String())
		}
	})
	return s
}

func (s *rawSidecar) pid() int { return s.cmd.Process.Pid }

// wait waits for the process (once), killing it after d.
func (s *rawSidecar) wait(d time.Duration) (code int, took time.Duration, killed bool) {
	start := time.Now()
	s.startReading()
	s.waitOnce.Do(func() {
		go func() {
			// Wait closes stdout: let the reader finish first.
			s.mu.Lock()
			for s.readErr == nil {
				s.cond.Wait()
			}
			s.mu.Unlock()
			s.waitErr = s.cmd.Wait()
			close(s.waitDone)
		}()
	})
	select {
	case <-s.waitDone:
		return exitCode(s.waitErr), time.Since(start), false
	case <-time.After(d):
		_ = s.cmd.Process.Kill()
		<-s.waitDone
		return exitCode(s.waitErr), time.Since(start), true
	}
}

// sendBytes writes raw bytes to stdin, as they are.
func (s *rawSidecar) sendBytes(b []byte) {
	s.t.Helper()
	if _, err := s.stdin.Write(b); err != nil {
		s.t.Fatalf("writing to the sidecar: %v", err)
	}
}

// sendBody frames one body in the sidecar's framing and writes it.
func (s *rawSidecar) sendBody(body []byte) {
	s.t.Helper()
	if s.ndjson {
		s.sendBytes(append(append([]byte{}, body...), '\n'))
		return
	}
	s.sendBytes([]byte(fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body)))
}

// request sends {"jsonrpc":"2.0","id":id,"method":method,"params":params};
// id is raw JSON (e.g. `7` or `"a"`); params nil leaves them out.
func (s *rawSidecar) request(id, method string, params any) {
	s.t.Helper()
	m := map[string]any{"jsonrpc": "2.0", "method": method}
	if id != "" {
		m["id"] = json.RawMessage(id)
	}
	if params != nil {
		m["params"] = params
	}
	b, err := json.Marshal(m)
	if err != nil {
		s.t.Fatal(err)
	}
	s.sendBody(b)
}

func (s *rawSidecar) notify(method string, params any) { s.request("", method, params) }

// startReading starts the strict reader of stdout (idempotent).
func (s *rawSidecar) startReading() {
	s.readOnce.Do(func() {
		go s.readLoop()
	})
}

func (s *rawSidecar) readLoop() {
	r := bufio.NewReaderSize(s.stdout, 1<<20)
	for {
		body, err := readFrame(r, s.ndjson)
		if err == nil {
			var m message
			err = parseMessage(body, &m)
			m.at = time.Now()
			if err == nil {
				s.mu.Lock()
				s.msgs = append(s.msgs, &m)
				s.cond.Broadcast()
				s.mu.Unlock()
				continue
			}
		}
		s.mu.Lock()
		if !errors.Is(err, io.EOF) && s.badFrame == nil {
			s.badFrame = err
		}
		s.readErr = err
		if s.readErr == nil {
			s.readErr = io.EOF
		}
		s.cond.Broadcast()
		s.mu.Unlock()
		// Drain whatever follows so the sidecar never blocks on us.
		_, _ = io.Copy(io.Discard, r)
		return
	}
}

// readFrame reads one frame strictly: for Content-Length, header lines
// must be "Name: value" with exactly one valid Content-Length.
func readFrame(r *bufio.Reader, ndjson bool) ([]byte, error) {
	if ndjson {
		line, err := r.ReadBytes('\n')
		if err != nil {
			if len(line) == 0 && err == io.EOF {
				return nil, io.EOF
			}
			return nil, fmt.Errorf("ndjson: partial line %q at end of output: %v", trunc(line), err)
		}
		return line[:len(line)-1], nil
	}
	length := -1
	for lines := 0; ; lines++ {
		line, err := r.ReadString('\n')
		if err != nil {
			if lines == 0 && line == "" && err == io.EOF {
				return nil, io.EOF
			}
			return nil, fmt.Errorf("end of output inside a header (%q): %v", line, err)
		}
		if !strings.HasSuffix(line, "\r\n") {
			return nil, fmt.Errorf("header line %q does not end in CRLF", line)
		}
		text := strings.TrimSuffix(line, "\r\n")
		if text == "" {
			if lines == 0 {
				return nil, errors.New("empty header block")
			}
			break
		}
		name, value, ok := strings.Cut(text, ":")
		if !ok {
			return nil, fmt.Errorf("malformed header line %q", trunc([]byte(text)))
		}
		if strings.EqualFold(strings.TrimSpace(name), "Content-Length") {
			if length >= 0 {
				return nil, errors.New("two Content-Length headers")
			}
			n, err := strconv.Atoi(strings.TrimSpace(value))
			if err != nil || n < 0 {
				return nil, fmt.Errorf("bad Content-Length %q", value)
			}
			length = n
		}
	}
	if length < 0 {
		return nil, errors.New("frame without Content-Length")
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("short body (%d bytes declared): %v", length, err)
	}
	return body, nil
}

// parseMessage checks a body is one JSON-RPC 2.0 object from the server.
func parseMessage(body []byte, m *message) error {
	if !json.Valid(body) {
		return fmt.Errorf("body is not valid JSON: %q", trunc(body))
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("body is not a JSON object: %q", trunc(body))
	}
	if err := json.Unmarshal(body, m); err != nil {
		return fmt.Errorf("body does not decode as a message: %v: %q", err, trunc(body))
	}
	if m.JSONRPC != "2.0" {
		return fmt.Errorf(`message without "jsonrpc":"2.0": %q`, trunc(body))
	}
	_, m.hasID = env["id"]
	_, hasResult := env["result"]
	switch {
	case m.Method != "" && m.hasID && m.Method != protocol.MethodHostCall: // host/call is the one request it sends
		return fmt.Errorf("the server sent a request: %q", trunc(body))
	case m.Method == "" && !m.hasID:
		return fmt.Errorf("message with neither method nor id: %q", trunc(body))
	case m.Method == "" && hasResult == (m.Error != nil):
		return fmt.Errorf("a response needs exactly one of result and error: %q", trunc(body))
	}
	m.raw = body
	return nil
}

func trunc(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// waitUntil locks s.mu and waits, at most d, until done reports true or
// the output ends. It returns with s.mu held, and whether done held.
func (s *rawSidecar) waitUntil(d time.Duration, done func() bool) bool {
	s.startReading()
	deadline := time.Now().Add(d)
	timer := time.AfterFunc(d, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer timer.Stop()
	s.mu.Lock()
	for !done() {
		if s.readErr != nil || !time.Now().Before(deadline) {
			return false
		}
		s.cond.Wait()
	}
	return true
}

// take returns the next message, waiting at most d (nil at EOF/timeout).
func (s *rawSidecar) take(d time.Duration) *message {
	s.t.Helper()
	ok := s.waitUntil(d, func() bool { return s.next < len(s.msgs) })
	defer s.mu.Unlock()
	if !ok {
		return nil
	}
	m := s.msgs[s.next]
	s.next++
	return m
}

// mustTake is take that fails the test on timeout or EOF.
func (s *rawSidecar) mustTake(d time.Duration) *message {
	s.t.Helper()
	m := s.take(d)
	if m == nil {
		s.t.Fatalf("no message from the sidecar within %v", d)
	}
	return m
}

// response waits for the response with the given raw id, searching every
// message read so far (not only those after take's cursor). Each response
// is returned once; a second call for the same id finds a duplicate, if
// any. The second result is every message read up to then, in order.
func (s *rawSidecar) response(id string, d time.Duration) (*message, []*message) {
	s.t.Helper()
	var found *message
	ok := s.waitUntil(d, func() bool { found = s.claimResponse(id); return found != nil })
	defer s.mu.Unlock()
	if !ok {
		s.t.Fatalf("no response with id %s within %v (%d messages read; end of output: %v)", id, d, len(s.msgs), s.readErr)
	}
	return found, append([]*message(nil), s.msgs...)
}

// claimResponse returns the first response with the raw id that no earlier
// call claimed, marking it claimed, or nil (s.mu held, as in waitUntil's
// condition).
func (s *rawSidecar) claimResponse(id string) *message {
	if s.claimed == nil {
		s.claimed = map[*message]bool{}
	}
	for _, m := range s.msgs {
		if m.isResponse() && m.idKey() == id && !s.claimed[m] {
			s.claimed[m] = true
			return m
		}
	}
	return nil
}

// all returns every message read so far (the ones take already returned too).
func (s *rawSidecar) all() []*message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*message(nil), s.msgs...)
}

// responsesByID counts the responses read so far by raw id.
func (s *rawSidecar) responsesByID() map[string]int {
	seen := map[string]int{}
	for _, m := range s.all() {
		if m.isResponse() {
			seen[m.idKey()]++
		}
	}
	return seen
}

// statsRaw asks for stats and decodes them.
func (s *rawSidecar) statsRaw(id string) statsResult {
	s.t.Helper()
	s.request(id, "stats", nil)
	m, _ := s.response(id, 10*time.Second)
	var st statsResult
	if m.Error != nil || json.Unmarshal(m.Result, &st) != nil {
		s.t.Fatalf("stats failed: %s", m.raw)
	}
	return st
}

type statsResult struct {
	Runs     map[string]uint64 `json:"runs"`
	InFlight int               `json:"inFlight"`
	Queued   int               `json:"queued"`
	Requests uint64            `json:"requests"`
}

// waitRunning polls stats until inFlight and queued reach the given values.
func (s *rawSidecar) waitRunning(inFlight, queued int) {
	s.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; ; i++ {
		st := s.statsRaw(fmt.Sprintf(`"wait-%d"`, i))
		if st.InFlight == inFlight && st.Queued == queued {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("stats never showed inFlight=%d queued=%d (last %+v)", inFlight, queued, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runParams builds the params of a raw run request.
func runParams(path, function string, args []any, lim map[string]uint64, caps map[string]any) map[string]any {
	p := map[string]any{"module": map[string]string{"path": path}}
	if function != "" {
		p["function"] = function
	}
	if args != nil {
		p["args"] = args
	}
	if lim != nil {
		p["limits"] = lim
	}
	if caps != nil {
		p["capabilities"] = caps
	}
	return p
}

// checkLogOrder checks that, in msgs (in arrival order), every log
// notification of run id precedes its response and that seq counts 0, 1, …
// It returns the lines.
func checkLogOrder(t *testing.T, msgs []*message, id string) []string {
	t.Helper()
	var lines []string
	responded := false
	for _, m := range msgs {
		if m.isResponse() && m.idKey() == id {
			if responded {
				t.Errorf("run %s answered twice", id)
			}
			responded = true
			continue
		}
		if m.Method != "log" {
			continue
		}
		var p logParams
		if err := json.Unmarshal(m.Params, &p); err != nil {
			t.Fatalf("bad log params: %s", m.raw)
		}
		if string(bytes.TrimSpace(p.ID)) != id {
			continue
		}
		if responded {
			t.Errorf("run %s: log seq %d arrived after its response", id, p.Seq)
		}
		if p.Seq != len(lines) {
			t.Errorf("run %s: log seq %d arrived where %d was due", id, p.Seq, len(lines))
		}
		lines = append(lines, p.Line)
	}
	if !responded {
		t.Errorf("run %s: no response among %d messages", id, len(msgs))
	}
	return lines
}

// ---------------------------------------------------------------------------
// Helper-process mode: the parent that dies (faults_test.go)

const (
	helperBinEnv     = "SANDBOXD_TEST_BIN"
	helperPIDFileEnv = "SANDBOXD_TEST_PIDFILE"
	helperLoopEnv    = "SANDBOXD_TEST_LOOP"
)

// helperParentMain spawns the sidecar on pipes, starts an endless run with
// timeoutMs 500, waits (via stats) until it is executing, writes the
// sidecar's PID to the PID file and then blocks until it is killed.
func helperParentMain() int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "helper: "+format+"\n", args...)
		return 3
	}
	cmd := exec.Command(os.Getenv(helperBinEnv), "serve", "--framing=ndjson", "--max-concurrency", "1")
	cmd.Stderr = os.Stderr // a file, so nothing copies it
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fail("%v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fail("%v", err)
	}
	if err := cmd.Start(); err != nil {
		return fail("%v", err)
	}
	send := func(s string) error { _, err := io.WriteString(stdin, s+"\n"); return err }
	run := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"run","params":{"module":{"path":%q},"limits":{"fuel":%d,"timeoutMs":500}}}`,
		os.Getenv(helperLoopEnv), uint64(hugeFuel))
	if err := send(run); err != nil {
		return fail("%v", err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	// The module compiles first, in a child process: on a loaded machine
	// that takes a while, so the bound is a minute (a hang bound).
	deadline := time.Now().Add(time.Minute)
	for i := 0; ; i++ {
		if time.Now().After(deadline) {
			return fail("the run never showed as in flight")
		}
		if err := send(fmt.Sprintf(`{"jsonrpc":"2.0","id":"s%d","method":"stats"}`, i)); err != nil {
			return fail("%v", err)
		}
		if !sc.Scan() {
			return fail("sidecar output ended: %v", sc.Err())
		}
		var m struct {
			Result struct {
				InFlight int `json:"inFlight"`
			} `json:"result"`
		}
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Result.InFlight == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	pidFile := os.Getenv(helperPIDFileEnv)
	if err := os.WriteFile(pidFile+".tmp", []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		return fail("%v", err)
	}
	if err := os.Rename(pidFile+".tmp", pidFile); err != nil {
		return fail("%v", err)
	}
	time.Sleep(time.Hour) // until SIGKILL
	return 0
}
