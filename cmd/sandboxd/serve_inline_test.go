package main

// Through the real binary: a run read with nothing
// else in flight is prepared, run and answered by the goroutine that read
// it (leader/follower: another takes over reading after 100 µs). While a
// guest spins on that path the sidecar must keep reading: stats,
// $/cancelRequest, shutdown, exit and the end of input all act on the
// running guest as the protocol says, every request gets exactly one
// response, log notifications precede their run's response, and a parent
// that stops reading stops the sidecar's reading instead of growing it.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// spinWAT spins until a fence stops it; sent as text so that, once
// cached, its runs take the inline path.
const spinWAT = `(module (func (export "run") (loop $l (br $l))))`

// loggerWAT logs args[0] lines, then returns args[0].
const loggerWAT = `(module (import "host" "log" (func $log (param i32 i32)))
  (memory (export "memory") 1) (data (i32.const 0) "line")
  (func (export "run") (param $n i32) (result i32) (local $i i32)
    (block $done (loop $l
      (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
      (call $log (i32.const 0) (i32.const 4))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l)))
    (local.get $n)))`

func watRun(text string, args []any, lim map[string]uint64, caps map[string]any) map[string]any {
	p := runParams("", "run", args, lim, caps)
	p["module"] = map[string]string{"wat": text}
	return p
}

// startInlineSpin caches spinWAT, then starts one spinning run alone (so
// the reader runs it) that only a cancel, the end or its 60 s deadline
// can stop, and checks that the sidecar still reads: stats answer.
func startInlineSpin(t *testing.T, s *rawSidecar, id string) {
	t.Helper()
	s.request(`"warm"`, "run", watRun(spinWAT, nil, map[string]uint64{"fuel": 1000}, nil))
	if r, _ := s.response(`"warm"`, 30*time.Second); r.kind() != "fuel_exhausted" {
		t.Fatalf("warm-up run: %s", trunc(r.raw))
	}
	s.request(id, "run", watRun(spinWAT, nil, map[string]uint64{"fuel": hugeFuel, "timeoutMs": 60000}, nil))
	s.waitRunning(1, 0) // stats answered while the guest spins on the reader
}

func TestInlineSpinKeepsReading(t *testing.T) {
	t.Run("cancel", func(t *testing.T) {
		s := startRaw(t, binPath)
		startInlineSpin(t, s, "1")
		s.notify("$/cancelRequest", map[string]any{"id": 1})
		r, _ := s.response("1", 20*time.Second)
		if r.Error == nil || r.Error.Code != -32800 {
			t.Fatalf("cancelled spin: want -32800, got %s", trunc(r.raw))
		}
		// The sidecar serves on, inline again.
		s.request("2", "run", watRun(spinWAT, nil, map[string]uint64{"fuel": 5000}, nil))
		if r, _ := s.response("2", 20*time.Second); r.kind() != "fuel_exhausted" {
			t.Fatalf("next run: %s", trunc(r.raw))
		}
	})
	t.Run("eof", func(t *testing.T) {
		s := startRaw(t, binPath)
		startInlineSpin(t, s, "1")
		_ = s.stdin.Close()
		code, _, killed := s.wait(20 * time.Second)
		if killed || code != 0 {
			t.Fatalf("stdin EOF during an inline run: exit %d, killed %v; want 0", code, killed)
		}
		r, _ := s.response("1", time.Second)
		if r.Error == nil || r.Error.Code != -32800 {
			t.Fatalf("run at EOF: want -32800, got %s", trunc(r.raw))
		}
	})
	t.Run("exit", func(t *testing.T) {
		s := startRaw(t, binPath)
		startInlineSpin(t, s, "1")
		s.notify("exit", nil)
		code, _, killed := s.wait(20 * time.Second)
		if killed || code != 1 {
			t.Fatalf("exit without shutdown during an inline run: exit %d, killed %v; want 1", code, killed)
		}
		r, _ := s.response("1", time.Second)
		if r.Error == nil || r.Error.Code != -32800 {
			t.Fatalf("run at exit: want -32800, got %s", trunc(r.raw))
		}
	})
	t.Run("shutdown", func(t *testing.T) {
		s := startRaw(t, binPath)
		s.request(`"warm"`, "run", watRun(spinWAT, nil, map[string]uint64{"fuel": 1000}, nil))
		s.response(`"warm"`, 30*time.Second)
		s.request("1", "run", watRun(spinWAT, nil, map[string]uint64{"fuel": hugeFuel, "timeoutMs": 300}, nil))
		s.request("2", "shutdown", nil)
		s.request("3", "run", watRun(spinWAT, nil, map[string]uint64{"fuel": 1000}, nil))
		r3, _ := s.response("3", 20*time.Second)
		if r3.Error == nil || r3.Error.Code != -32600 {
			t.Errorf("run after shutdown: want -32600, got %s", trunc(r3.raw))
		}
		r2, msgs := s.response("2", 20*time.Second)
		if r2.Error != nil || string(r2.Result) != "null" {
			t.Fatalf("shutdown: %s", trunc(r2.raw))
		}
		var order []string
		for _, m := range msgs {
			if m.isResponse() {
				order = append(order, m.idKey())
			}
		}
		if i1, i2 := indexOf(order, "1"), indexOf(order, "2"); i1 < 0 || i1 > i2 {
			t.Fatalf("the run admitted before shutdown must be answered before it: responses in order %v", order)
		}
		if r1, _ := s.response("1", time.Second); r1.kind() != "timeout" {
			t.Errorf("run admitted before shutdown: want its own timeout, got %s", trunc(r1.raw))
		}
		s.notify("exit", nil)
		if code, _, killed := s.wait(20 * time.Second); killed || code != 0 {
			t.Fatalf("exit after shutdown: %d, killed %v", code, killed)
		}
	})
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// TestInlineHammer: runs that log, spins that are cancelled,
// stats, compiles and duplicate ids, from four writers at once, some
// alone and some pipelined: every request is answered exactly once, with
// the outcome its kind says, and every log line of a run precedes its
// response in seq order.
// SANDBOXD_REDTEAM_BIN runs it against another build, e.g. one built
// with -race.
func TestInlineHammer(t *testing.T) {
	bin := binPath
	if b := os.Getenv("SANDBOXD_REDTEAM_BIN"); b != "" {
		bin = b
	}
	s := startRaw(t, bin, "--max-concurrency", "2")
	defer func() {
		_ = s.stdin.Close()
		s.wait(20 * time.Second)
		if strings.Contains(s.stderr.String(), "DATA RACE") {
			t.Errorf("the race detector reported:\n%s", s.stderr.String())
		}
	}()
	s.request(`"warm"`, "run", watRun(loggerWAT, []any{0}, nil, map[string]any{"log": true}))
	s.response(`"warm"`, 30*time.Second)
	s.request(`"warm2"`, "run", watRun(spinWAT, nil, map[string]uint64{"fuel": 1000}, nil))
	s.response(`"warm2"`, 30*time.Second)
	const n = 600
	want := make([]string, n) // the outcome of request i
	var mu sync.Mutex         // orders the writes of a request and its cancel
	send := func(i int) {
		id := strconv.Itoa(i)
		mu.Lock()
		defer mu.Unlock()
		switch i % 5 {
		case 0, 1:
			s.request(id, "run", watRun(loggerWAT, []any{i % 7}, nil, map[string]any{"log": true}))
		case 2:
			s.request(id, "run", watRun(spinWAT, nil, map[string]uint64{"fuel": hugeFuel, "timeoutMs": 30000}, nil))
			s.notify("$/cancelRequest", map[string]any{"id": i})
		case 3:
			s.request(id, "stats", nil)
		case 4:
			s.request(id, "compile", map[string]any{"module": map[string]string{"wat": fmt.Sprintf(`(module (func (export "f%d")))`, i%20)}})
		}
	}
	for i := range n {
		switch i % 5 {
		case 0, 1, 3, 4:
			want[i] = "ok"
		case 2:
			want[i] = "cancelled"
		}
	}
	// Alone: each request waits for its answer.
	for i := 0; i < n/3; i++ {
		send(i)
		s.response(strconv.Itoa(i), 30*time.Second)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := n/3 + w; i < n; i += 4 {
				send(i)
			}
		})
	}
	wg.Wait()
	for i := n / 3; i < n; i++ {
		s.response(strconv.Itoa(i), 60*time.Second)
	}
	s.request(`"last"`, "stats", nil)
	s.response(`"last"`, 30*time.Second)
	msgs := s.all()
	count := map[string]int{}
	for _, m := range msgs {
		if m.isResponse() {
			count[m.idKey()]++
		}
	}
	for i := range n {
		id := strconv.Itoa(i)
		if count[id] != 1 {
			t.Errorf("request %s answered %d times", id, count[id])
			continue
		}
		var r *message
		for _, m := range msgs {
			if m.isResponse() && m.idKey() == id {
				r = m
			}
		}
		switch want[i] {
		case "ok":
			if r.Error != nil {
				t.Errorf("request %s: %s", id, trunc(r.raw))
			}
		case "cancelled":
			if r.Error == nil || r.Error.Code != -32800 {
				t.Errorf("request %s: want cancelled, got %s", id, trunc(r.raw))
			}
		}
		if i%5 <= 1 {
			if lines := checkLogOrder(t, msgs, id); len(lines) != i%7 {
				t.Errorf("run %s: %d log lines, want %d", id, len(lines), i%7)
			}
			var res struct {
				LogLines int `json:"logLines"`
			}
			_ = json.Unmarshal(r.Result, &res)
			if res.LogLines != i%7 {
				t.Errorf("run %s: logLines %d, want %d", id, res.LogLines, i%7)
			}
		}
	}
}

// TestInlineBackPressure: a parent that sends runs and reads
// nothing. The first run's response blocks the goroutine that ran it (it
// writes its own response); the others queue. Past --output-high-water
// the sidecar stops reading, so the parent's writes block, and its memory
// stays bounded; once the parent reads, every run is answered once.
func TestInlineBackPressure(t *testing.T) {
	s := startRaw(t, binPath, "--output-high-water", "65536")
	pad := strings.Repeat("x", 2000) // a bigger response: the echoed id
	var written atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": fmt.Sprintf("%s-%d", pad, i), "method": "run",
				"params": watRun(loggerWAT, []any{3}, nil, map[string]any{"log": true})})
			if _, err := fmt.Fprintf(s.stdin, "Content-Length: %d\r\n\r\n%s", len(b), b); err != nil {
				return
			}
			written.Add(1)
		}
	}()
	// Wait until the writer is blocked: the count stops moving.
	last, still := int64(-1), 0
	for still < 10 {
		time.Sleep(100 * time.Millisecond)
		if w := written.Load(); w == last {
			still++
		} else {
			last, still = w, 0
		}
		if written.Load() > 1_000_000 {
			t.Fatalf("the sidecar read %d runs without anyone reading its output", written.Load())
		}
	}
	rss, err := vmRSS(s.pid())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("writer blocked after %d runs; sidecar RSS %s", last, mib(rss))
	if rss > 200<<20 {
		t.Errorf("sidecar RSS %s while the parent does not read", mib(rss))
	}
	close(stop)
	s.startReading() // unblocks the sidecar, and so the writer
	<-done
	n := written.Load()
	deadline := time.Now().Add(60 * time.Second)
	for {
		msgs := s.all()
		got := 0
		seen := map[string]int{}
		for _, m := range msgs {
			if m.isResponse() {
				got++
				seen[m.idKey()]++
			}
		}
		if int64(got) >= n {
			for id, c := range seen {
				if c != 1 {
					t.Errorf("%s… answered %d times", id[:8], c)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d runs answered", got, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSIGTERMDuringSequentialRuns: SIGTERM while a parent sends one
// run at a time. When it came while the reader ran a short run inline
// (not inside a read), the reader stopped without saying reading had
// ended and the sidecar waited for its dispatcher forever (2 of 10
// trials). It must exit every time.
func TestSIGTERMDuringSequentialRuns(t *testing.T) {
	add := `(module (func (export "add") (param i32 i32) (result i32) local.get 0 local.get 1 i32.add))`
	for trial := range 10 {
		cmd := exec.Command(binPath, "serve", "--framing=ndjson")
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
		var runs atomic.Int64
		go func() {
			r := bufio.NewReader(stdout)
			for i := 0; ; i++ {
				b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": i, "method": "run",
					"params": watRunFn(add, "add", []any{1, 2})})
				if _, err := stdin.Write(append(b, '\n')); err != nil {
					return
				}
				if _, err := r.ReadBytes('\n'); err != nil {
					return
				}
				runs.Add(1)
			}
		}()
		for runs.Load() < 50 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Duration(trial*13%50) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if _, took, killed := waitTimeout(cmd, 10*time.Second); killed {
			t.Fatalf("trial %d: the sidecar did not exit within 10 s of SIGTERM (after %d runs); killed\n%s", trial, runs.Load(), stderr.String())
		} else if took > 5*time.Second {
			t.Logf("trial %d: exit took %v", trial, took)
		}
		stdin.Close()
	}
}

func watRunFn(text, fn string, args []any) map[string]any {
	return map[string]any{"module": map[string]string{"wat": text}, "function": fn, "args": args}
}
