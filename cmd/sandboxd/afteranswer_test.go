package main

// A run's store is freed after its answer is out (protocol.AfterAnswer):
// these drive the real binary through the paths that put the freeing off
// (runs, plugin runs, WASI runs, their traps, exits and fences, cancels)
// and check what must not change: every request answered once, a run's
// output before its answer, nothing leaked, a clean end whenever it comes.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

// afterMix is one request of the mix, by i: its params and the outcome
// kinds it may end with ("" for a result; cancelled always may).
func afterMix(t *testing.T, i int, guest string) (map[string]any, []string) {
	t.Helper()
	p, kinds := afterMixParams(i, guest)
	if printsFirst(i) {
		kinds = append(kinds, "prints")
	}
	return p, kinds
}

// printsFirst says whether request i of the mix prints before it ends.
// The run stopped by its 20 ms deadline (case 5) may not have printed:
// its deadline covers its instantiation, and on a loaded machine its
// thread may not run before it passes (CI: r0-27 under --max-concurrency
// 2). Its output, if any, is still held to come before its answer.
func printsFirst(i int) bool { return i%afterMixSize >= 1 && i%afterMixSize <= 4 }

// afterMixSize is how many kinds of request the mix has.
const afterMixSize = 11

// afterMixDir is the directory the mix's opener runs are granted, under
// --allow-dir (afterMixArgs). The tests that use the mix are not parallel.
var afterMixDir string

// afterMixArgs are the serve flags the mix needs: a directory to grant
// and a small bound on a guest's descriptors.
func afterMixArgs(t *testing.T) []string {
	afterMixDir = t.TempDir()
	return []string{"--allow-dir", afterMixDir, "--max-open-files", "20"}
}

func afterMixParams(i int, guest string) (map[string]any, []string) {
	wasi := map[string]any{"wasi": true}
	plugin := filepath.Join(watDir, "..", "plugins", "wat", "plugin.wat")
	switch i % afterMixSize {
	case 9: // opens descriptors until EMFILE (33), held until its store is freed
		return runParams(afterOpener, "", nil, nil, map[string]any{"wasi": map[string]any{
			"dirs": []any{map[string]any{"host": afterMixDir, "guest": "/d"}}}}), []string{""}
	case 10: // a files tree, removed when its store is freed
		return runParams(guest, "ok", nil, nil, map[string]any{"wasi": map[string]any{
			"files": map[string]any{"/in.txt": "some input"}}}), []string{""}
	case 0:
		return runParams(fixture("well_behaved.wat"), "add", []any{2, 40}, nil, nil), []string{""}
	case 1:
		return runParams(guest, "ok", nil, nil, wasi), []string{""}
	case 2:
		return runParams(guest, "trap", nil, nil, wasi), []string{"trap"}
	case 3:
		return runParams(guest, "exit", nil, nil, wasi), []string{""}
	case 4:
		return runParams(guest, "spin", nil, map[string]uint64{"fuel": 20_000}, wasi), []string{"fuel_exhausted"}
	case 5:
		return runParams(guest, "spin", nil, map[string]uint64{"fuel": hugeFuel, "timeoutMs": 20}, wasi), []string{"timeout"}
	case 6:
		return runParams(fixture("memory_bomb.wat"), "", nil, map[string]uint64{"memoryBytes": 1 << 20}, nil), []string{"memory_limit_exceeded", "trap"}
	case 7:
		p := runParams(plugin, "echo", nil, nil, nil)
		p["input"] = "aGVsbG8=" // "hello"
		return p, []string{""}
	case 8:
		p := runParams(plugin, "fail", nil, nil, nil)
		p["input"] = ""
		return p, []string{"plugin_error"}
	}
	panic("afterMixSize")
}

// afterOpener is openerGuest's file (the tests that use the mix write
// it).
var afterOpener string

// openFDs lists what the process's descriptors point at, but for pipes
// and pidfds: the compile children's, whose spare comes and goes.
func openFDs(t *testing.T, pid int) []string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var fds []string
	for _, e := range ents {
		target, _ := os.Readlink(filepath.Join(dir, e.Name()))
		if !strings.HasPrefix(target, "pipe:") && target != "anon_inode:[pidfd]" {
			fds = append(fds, e.Name()+"->"+target)
		}
	}
	return fds
}

// checkAnswers checks that each of ids was answered exactly once, with a
// kind it may end with, and that every output notification of a run came
// before its answer; a run that prints ("prints" among its kinds) and
// was not cancelled has its output before its answer.
func checkAnswers(t *testing.T, s *rawSidecar, kinds map[string][]string, cancelledOK bool) {
	t.Helper()
	msgs := s.all()
	answered := map[string]bool{}
	printed := map[string]bool{}
	for _, m := range msgs {
		if m.isResponse() {
			id := m.idKey()
			if answered[id] {
				t.Errorf("request %s answered twice", id)
			}
			answered[id] = true
			want, ok := kinds[id]
			if !ok {
				continue
			}
			k := m.kind()
			if m.Error != nil && k == "" {
				t.Errorf("request %s: protocol error %s", id, m.raw)
				continue
			}
			if !(cancelledOK && k == "cancelled") && !slices.Contains(want, k) {
				t.Errorf("request %s ended %q, want one of %q: %s", id, k, want, trunc(m.raw))
			}
			if slices.Contains(want, "prints") && k != "cancelled" && !printed[id] {
				t.Errorf("request %s ended %q with no output notification before its answer", id, k)
			}
			continue
		}
		if m.Method == "output" || m.Method == "log" {
			var p struct {
				ID json.RawMessage `json:"id"`
			}
			_ = json.Unmarshal(m.Params, &p)
			id := strings.TrimSpace(string(p.ID))
			if answered[id] {
				t.Errorf("a %s notification of %s came after its answer", m.Method, id)
			}
			printed[id] = printed[id] || m.Method == "output"
		}
	}
	for id := range kinds {
		if !answered[id] {
			t.Errorf("request %s never answered", id)
		}
	}
}

// TestAfterAnswerStorm: with one run slot (and without the pool), a
// pipelined mix of runs that print and end every way, plugin runs, and
// cancels racing the ends of runs: every request is answered once, a
// run's output comes before its answer, the queue drains, and the
// sidecar holds no more descriptors and little more memory after many
// rounds than after the first; shutdown then exit end it with 0.
func TestAfterAnswerStorm(t *testing.T) {
	guest := filepath.Join(watDir, "print_then_end.wat")
	afterOpener = writeWAT(t, openerGuest)
	for _, args := range [][]string{
		{"--max-concurrency", "1"},
		{"--max-concurrency", "1", "--pool=false"},
		{"--max-concurrency", "2"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			s := startRaw(t, binPath, append(append([]string{"--framing=ndjson"}, afterMixArgs(t)...), args...)...)
			s.startReading()
			kinds := map[string][]string{}
			round := func(r, n int) {
				for i := range n {
					id := fmt.Sprintf(`"r%d-%d"`, r, i)
					p, k := afterMix(t, i, guest)
					kinds[id] = k
					s.request(id, "run", p)
					if i%4 == 3 { // a cancel racing the end of the run before
						s.notify("$/cancelRequest", map[string]any{"id": json.RawMessage(fmt.Sprintf(`"r%d-%d"`, r, i-1))})
					}
				}
				for i := range n {
					s.response(fmt.Sprintf(`"r%d-%d"`, r, i), 2*time.Minute)
				}
				if st := s.statsRaw(fmt.Sprintf(`"st%d"`, r)); st.InFlight != 0 || st.Queued != 0 {
					t.Errorf("round %d answered, stats: inFlight %d queued %d", r, st.InFlight, st.Queued)
				}
			}
			round(0, 36) // compiles everything, warms the pool
			// One at a time: each is the only request in flight, run by
			// the reader itself (inline), which also frees its store.
			for i := range 3 * afterMixSize {
				id := fmt.Sprintf(`"seq%d"`, i)
				p, k := afterMix(t, i, guest)
				kinds[id] = k
				s.request(id, "run", p)
				s.response(id, 2*time.Minute)
			}
			fds := openFDs(t, s.pid())
			rss, _ := vmRSS(s.pid())
			for r := 1; r <= 8; r++ {
				round(r, 90)
			}
			// The last runs' stores (their descriptors) may still be
			// being freed after their answers: a hang bound, not a timing.
			n := openFDs(t, s.pid())
			for deadline := time.Now().Add(time.Minute); len(n) > len(fds) && time.Now().Before(deadline); n = openFDs(t, s.pid()) {
				time.Sleep(10 * time.Millisecond)
			}
			if len(n) > len(fds) {
				t.Errorf("%d descriptors open after the rounds, %d after the first:\n%q\n%q", len(n), len(fds), n, fds)
			}
			if after, err := vmRSS(s.pid()); err == nil && after > rss+64<<20 {
				t.Errorf("RSS grew from %s to %s over the rounds", mib(rss), mib(after))
			}
			s.request(`"down"`, "shutdown", nil)
			s.response(`"down"`, time.Minute)
			s.notify("exit", nil)
			if code, _, killed := s.wait(time.Minute); code != 0 || killed {
				t.Errorf("exit status %d (killed %v); stderr:\n%s", code, killed, s.stderr.String())
			}
			checkAnswers(t, s, kinds, true)
			if e := s.stderr.String(); strings.Contains(e, "panic") {
				t.Errorf("stderr:\n%s", e)
			}
		})
	}
}

// TestAfterAnswerEndMidStorm: the end (stdin closed, SIGTERM, exit, or
// shutdown then stdin closed) arriving while runs end and free their
// stores: every request read is answered once, output before its answer,
// and the sidecar exits cleanly (the engine is closed after the last
// store is freed, never before).
func TestAfterAnswerEndMidStorm(t *testing.T) {
	guest := filepath.Join(watDir, "print_then_end.wat")
	afterOpener = writeWAT(t, openerGuest)
	for _, end := range []string{"eof", "sigterm", "shutdown", "exit"} {
		t.Run(end, func(t *testing.T) {
			for iter := range 4 {
				s := startRaw(t, binPath, append([]string{"--framing=ndjson", "--max-concurrency", "2"}, afterMixArgs(t)...)...)
				s.startReading()
				// Compile first: the storm is of runs, not compiles.
				for i := range afterMixSize {
					p, _ := afterMix(t, i, guest)
					s.request(fmt.Sprintf(`"warm%d"`, i), "run", p)
					s.response(fmt.Sprintf(`"warm%d"`, i), 2*time.Minute)
				}
				kinds := map[string][]string{}
				for i := range 60 {
					id := fmt.Sprintf(`"e%d"`, i)
					p, k := afterMix(t, i+iter, guest)
					kinds[id] = k
					s.request(id, "run", p)
				}
				time.Sleep(time.Duration(iter) * 3 * time.Millisecond) // end at different points of the storm
				switch end {
				case "eof":
					_ = s.stdin.Close()
				case "sigterm":
					_ = s.cmd.Process.Signal(syscall.SIGTERM)
				case "shutdown":
					s.request(`"down"`, "shutdown", nil)
					_ = s.stdin.Close()
				case "exit": // without shutdown: status 1
					s.notify("exit", nil)
				}
				code, _, killed := s.wait(time.Minute)
				if want := map[string]int{"exit": 1}[end]; killed || code != want && !(end == "sigterm" && code == 1) {
					t.Errorf("iteration %d: exit status %d (killed %v); stderr:\n%s", iter, code, killed, s.stderr.String())
				}
				if end == "shutdown" {
					kinds[`"down"`] = []string{""}
				}
				if end != "sigterm" {
					checkAnswers(t, s, kinds, end != "shutdown")
				} else {
					checkAnswers(t, s, nil, true) // answered at most once; a signal may end it before all are read
				}
				if e := s.stderr.String(); strings.Contains(e, "panic") || strings.Contains(e, "SIGSEGV") {
					t.Errorf("iteration %d: stderr:\n%s", iter, e)
				}
			}
		})
	}
}

// TestAfterAnswerHostCallsOneSlot: with one run slot and an instances'
// share of the pool for 4 stores, runs that declare host functions (they
// give their slot back while the parent answers, and wait for the share
// without one), plain runs and plugin runs, all at once, some cancelled
// as they end: a run's slot is now held until its store is freed, after
// its answer, and nothing may wait in a cycle for it. Every run ends, and
// the sidecar is idle after.
func TestAfterAnswerHostCallsOneSlot(t *testing.T) {
	c, _ := startClient(t, binPath, "--max-concurrency", "1", "--max-instances", "4", "--max-queue", "2000")
	plugin := filepath.Join(watDir, "..", "plugins", "wat", "plugin.wat")
	const runs = 240
	times3 := func(_ context.Context, call sandboxd.HostCall) ([]sandboxd.HostValue, error) {
		return []sandboxd.HostValue{sandboxd.HostI32(int32(call.Args[0].I64()) * 3)}, nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for r := range runs {
		wg.Go(func() {
			ctx := ctxT(t, 5*time.Minute) // a hang bound
			if r%5 == 4 {                 // cancelled about when it ends
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Duration(r%7)*time.Millisecond)
				defer cancel()
			}
			var err error
			var got, want string
			switch r % 3 {
			case 0:
				var res *protocol.RunResult
				res, err = c.RunWith(ctx, lookupRun("sum", 5, map[string]uint64{"timeoutMs": 300_000}), sandboxd.RunHandlers{Host: times3})
				if err == nil {
					got, want = string(res.Values[0].Value), "30"
				}
			case 1:
				var res *protocol.RunResult
				res, err = c.Run(ctx, sandboxd.RunParams{Module: modPath("well_behaved.wat"), Function: "add", Args: rawArgs(2, 40)}, nil)
				if err == nil {
					got, want = string(res.Values[0].Value), "42"
				}
			default:
				in := protocol.Bytes("hello")
				_, err = c.Run(ctx, sandboxd.RunParams{Module: rpc.ModuleSpec{Path: sandboxd.Str(plugin)}, Function: "echo", Input: &in}, nil)
			}
			switch {
			case err != nil && r%5 == 4 && (errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "cancelled")):
			case err != nil:
				errs <- fmt.Errorf("run %d: %w", r, err)
			case got != want:
				errs <- fmt.Errorf("run %d: got %s, want %s", r, got, want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Cancelled runs' answers may still be on their way.
	waitStats(t, c, func(st *rpc.StatsResult) bool { return st.InFlight == 0 && st.Queued == 0 && st.HostCalls.Waiting == 0 })
}

// TestAfterAnswerParentNotReading: runs whose answers (with their
// output) fill the pipe of a parent that never reads hold their slots
// while their answers wait to be written, and their stores until then;
// the parent closing its input must still end the sidecar (the output
// abandoned after the drain timeout, the stores then freed), on one slot.
func TestAfterAnswerParentNotReading(t *testing.T) {
	guest := writeWAT(t, writerGuest('x', 60000, 4, false, false))
	cmd := exec.Command(binPath, "serve", "--framing=ndjson", "--max-concurrency", "1")
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cmd.StdoutPipe(); err != nil { // never read
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": i, "method": "run",
			"params": runParams(guest, "", nil, nil, map[string]any{"wasi": true})})
		if _, err := stdin.Write(append(body, '\n')); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // let the runs fill the pipe
	_ = stdin.Close()
	code, _, killed := waitTimeout(cmd, time.Minute) // a hang bound: the drain timeout is 1 s
	if killed || code != 0 {
		t.Errorf("exit status %d (killed %v) after the input closed, the output unread; stderr:\n%s", code, killed, stderr.String())
	}
	if e := stderr.String(); strings.Contains(e, "panic") || strings.Contains(e, "SIGSEGV") {
		t.Errorf("stderr:\n%s", e)
	}
}
