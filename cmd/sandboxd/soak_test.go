package main

// Soak: many concurrent callers against one sidecar with a mix of every
// outcome. A short version runs by default; `go test ./cmd/sandboxd -run
// Soak -soak` runs ~20000 requests.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/rpc"
)

var soak = flag.Bool("soak", false, "run the long soak test (~20000 requests)")

// soakOp is one kind of request in the mix.
type soakOp struct {
	name   string
	params sandboxd.RunParams
	// ctxFor, if set, bounds the call (a cancellation once it expires).
	ctxFor time.Duration
	// want lists the outcomes allowed ("ok", a kind, or "params").
	want []string
	// value, for ok runs, is the expected first result value.
	value string
}

func soakOps() []soakOp {
	wb := modPath("well_behaved.wat")
	loop := modPath("infinite_loop.wat")
	badWAT := "(module"
	return []soakOp{
		{name: "add", params: sandboxd.RunParams{Module: wb, Function: "add", Args: rawArgs(2, 40)}, want: []string{"ok"}, value: "42"},
		{name: "fib", params: sandboxd.RunParams{Module: wb, Function: "fib", Args: rawArgs(20)}, want: []string{"ok"}, value: "6765"},
		{name: "add2", params: sandboxd.RunParams{Module: wb, Function: "add", Args: rawArgs(-5, 5)}, want: []string{"ok"}, value: "0"},
		{name: "fuel", params: sandboxd.RunParams{Module: loop, Limits: map[string]uint64{"fuel": 100000}}, want: []string{"fuel_exhausted"}},
		{name: "timeout", params: sandboxd.RunParams{Module: loop, Limits: map[string]uint64{"fuel": hugeFuel, "timeoutMs": 20}}, want: []string{"timeout"}},
		{name: "memory", params: sandboxd.RunParams{Module: modPath("memory_bomb.wat"), Limits: map[string]uint64{"memoryBytes": 4 << 20}}, want: []string{"memory_limit_exceeded"}},
		{name: "import", params: sandboxd.RunParams{Module: modPath("disallowed_import.wat")}, want: []string{"disallowed_import"}},
		{name: "invalid", params: sandboxd.RunParams{Module: rpc.ModuleSpec{WAT: &badWAT}}, want: []string{"invalid_module"}},
		{name: "export", params: sandboxd.RunParams{Module: wb, Function: "nope"}, want: []string{"export"}},
		{name: "trap", params: sandboxd.RunParams{Module: modPath("traps.wat"), Function: "div_by_zero"}, want: []string{"trap"}},
		{name: "cancel_spin", params: sandboxd.RunParams{Module: loop, Limits: map[string]uint64{"fuel": hugeFuel, "timeoutMs": 30000}},
			ctxFor: 15 * time.Millisecond, want: []string{"cancelled"}},
		{name: "cancel_racy", params: sandboxd.RunParams{Module: wb, Function: "fib", Args: rawArgs(30)},
			ctxFor: time.Millisecond, want: []string{"ok", "cancelled"}, value: "832040"},
		{name: "bad_arg", params: sandboxd.RunParams{Module: wb, Function: "add", Args: rawArgs(true, 1)}, want: []string{"params"}},
		{name: "bad_limit", params: sandboxd.RunParams{Module: wb, Limits: map[string]uint64{"fuel": 0}}, want: []string{"params"}},
		{name: "log", params: sandboxd.RunParams{Module: modPath("logger.wat"), Capabilities: &rpc.CapabilitySpec{Log: true}}, want: []string{"ok"}},
		{name: "add3", params: sandboxd.RunParams{Module: wb, Function: "add", Args: rawArgs(1, 1)}, want: []string{"ok"}, value: "2"},
	}
}

// malformed params that only a raw map can carry.
var soakMalformed = []map[string]any{
	{"module": map[string]any{"wat": 5}},
	{"module": map[string]any{"path": fixture("well_behaved.wat")}, "function": 7},
	{"module": map[string]any{"path": fixture("well_behaved.wat")}, "limits": map[string]any{"fuel": "lots"}},
	{"module": map[string]any{"path": fixture("well_behaved.wat")}, "capabilities": map[string]any{"log": "yes"}},
}

// outcomeOf names what a call returned: "ok", the run kind, "params", or
// "unexpected:..." for anything else.
func outcomeOf(err error) string {
	if err == nil {
		return "ok"
	}
	var e *sandboxd.Error
	if !errors.As(err, &e) {
		return "unexpected:" + err.Error()
	}
	if e.Code == rpc.CodeInvalidParams {
		return "params"
	}
	if k := e.Kind(); k != "" {
		return k
	}
	return fmt.Sprintf("unexpected:code %d %s", e.Code, e.Message)
}

// idCounter parses every frame the client reads and counts responses by id.
type idCounter struct {
	mu        sync.Mutex
	responses map[uint64]int
	logs      int
	bad       error
	done      chan struct{}
}

func countIDs(r io.Reader) *idCounter {
	c := &idCounter{responses: map[uint64]int{}, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		br := newBufReader(r)
		for {
			body, err := readFrame(br, false)
			if err != nil {
				if !errors.Is(err, io.EOF) {
					c.mu.Lock()
					c.bad = err
					c.mu.Unlock()
				}
				_, _ = io.Copy(io.Discard, br)
				return
			}
			var m message
			if err := parseMessage(body, &m); err != nil {
				c.mu.Lock()
				c.bad = err
				c.mu.Unlock()
				continue
			}
			c.mu.Lock()
			if m.isResponse() {
				var id uint64
				if err := json.Unmarshal(m.ID, &id); err != nil {
					c.bad = fmt.Errorf("response with a foreign id: %s", m.raw)
				}
				c.responses[id]++
			} else if m.Method == "log" {
				c.logs++
			}
			c.mu.Unlock()
		}
	}()
	return c
}

func TestSoak(t *testing.T) {
	total, callers := 500, 16
	switch {
	case *soak:
		total = 20000
	case testing.Short():
		total = 200
	}
	// Spawn the sidecar ourselves so the client's input can be teed into a
	// frame parser that counts responses per id.
	stderr := &syncBuffer{}
	// The default run deadline (1 s) and compile time limit (30 s) become
	// hang bounds: neither is what the soak is about, and 16 callers on a
	// loaded machine made compiles and runs wait long for a core. The ops
	// that test a deadline set their own.
	cmd := exec.Command(binPath, "serve", "--max-concurrency", "2",
		"--default-timeout-ms", "60000", "--default-compile-timeout-ms", "300000")
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	pr, pw := io.Pipe()
	counter := countIDs(pr)
	c := sandboxd.New(context.Background(), io.TeeReader(stdout, pw), stdin, false)
	var calls atomic.Uint64 // every client call, so every id the client used
	closed := false
	defer func() {
		if !closed {
			_ = c.Close()
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			_ = pw.Close()
		}
		if t.Failed() {
			t.Logf("sidecar stderr:\n%s", stderr.String())
		}
	}()

	ops := soakOps()
	outcomes := map[string]map[string]int{} // op -> outcome -> count
	var mu sync.Mutex
	record := func(op, outcome string) {
		mu.Lock()
		defer mu.Unlock()
		if outcomes[op] == nil {
			outcomes[op] = map[string]int{}
		}
		outcomes[op][outcome]++
	}
	doOne := func(i int) {
		if i%23 == 22 { // a malformed request through the raw Call
			calls.Add(1)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			err := c.Call(ctx, "run", soakMalformed[i%len(soakMalformed)], nil)
			cancel()
			o := outcomeOf(err)
			record("malformed", o)
			if o != "params" {
				t.Errorf("malformed request %d: got %s", i, o)
			}
			return
		}
		op := ops[i%len(ops)]
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if op.ctxFor > 0 {
			cancel()
			ctx, cancel = context.WithTimeout(context.Background(), op.ctxFor)
		}
		calls.Add(1)
		res, err := c.Run(ctx, op.params, nil)
		cancel()
		o := outcomeOf(err)
		record(op.name, o)
		allowed := false
		for _, w := range op.want {
			allowed = allowed || w == o
		}
		if !allowed {
			t.Errorf("%s (request %d): got %s, want one of %v", op.name, i, o, op.want)
			return
		}
		if o == "ok" && op.value != "" && (len(res.Values) != 1 || string(res.Values[0].Value) != op.value) {
			t.Errorf("%s (request %d): values %+v, want %s", op.name, i, res.Values, op.value)
		}
	}
	runLoad := func(n int) time.Duration {
		start := time.Now()
		work := make(chan int)
		var wg sync.WaitGroup
		for g := 0; g < callers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					doOne(i)
				}
			}()
		}
		for i := 0; i < n; i++ {
			work <- i
		}
		close(work)
		wg.Wait()
		return time.Since(start)
	}
	stats := func() *rpc.StatsResult {
		calls.Add(1)
		st, err := c.Stats(ctxT(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	// Warm-up, then the baseline.
	runLoad(2 * len(ops) * 3)
	before := stats()
	baseRSS, err := vmRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	outcomes = map[string]map[string]int{}
	mu.Unlock()

	var peakRSS atomic.Uint64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if rss, err := vmRSS(pid); err == nil && rss > peakRSS.Load() {
				peakRSS.Store(rss)
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	took := runLoad(total)
	close(stopSampling)
	<-sampled
	after := stats()

	// Stats deltas equal what the calls returned.
	got := map[string]uint64{}
	summary := map[string]int{}
	for _, m := range outcomes {
		for o, n := range m {
			summary[o] += n
			if o != "params" {
				got[o] += uint64(n)
			}
		}
	}
	for k, v := range after.Runs {
		if d := v - before.Runs[k]; d != got[k] {
			t.Errorf("stats.runs.%s grew by %d, the calls returned %d", k, d, got[k])
		}
	}
	for k := range got {
		if _, ok := after.Runs[k]; !ok {
			t.Errorf("outcome %s returned but absent from stats.runs", k)
		}
	}
	if after.InFlight != 0 || after.Queued != 0 {
		t.Errorf("after the load: inFlight %d queued %d", after.InFlight, after.Queued)
	}
	if d := after.Requests - before.Requests; d < uint64(total)+1 {
		t.Errorf("stats.requests grew by %d, want >= %d", d, total+1)
	}
	t.Logf("%d requests from %d callers in %v; outcomes %v; cancel ops %v / %v", total, callers,
		took.Round(time.Millisecond), summary, outcomes["cancel_spin"], outcomes["cancel_racy"])

	// RSS returns near the baseline.
	bound := baseRSS + max(64<<20, baseRSS/2)
	var afterRSS uint64
	deadline := time.Now().Add(10 * time.Second)
	for {
		afterRSS, _ = vmRSS(pid)
		if afterRSS <= bound || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("VmRSS: baseline %s after warm-up, peak %s during the load, %s after (bound %s)",
		mib(baseRSS), mib(peakRSS.Load()), mib(afterRSS), mib(bound))
	if afterRSS > bound {
		t.Errorf("VmRSS %s after the load, baseline %s (bound %s)", mib(afterRSS), mib(baseRSS), mib(bound))
	}

	// Close (shutdown + exit): exit 0, then every id got exactly one response.
	calls.Add(1) // shutdown
	closed = true
	closeAndCountIDs(t, c, cmd, pw, counter, calls.Load())
}

// closeAndCountIDs closes client c (shutdown, then its input) of the
// sidecar cmd, whose stdout is teed into pw for counter, and checks that
// the sidecar exits 0 and that ids 1..n, and no other, got exactly one
// response each.
func closeAndCountIDs(t *testing.T, c *sandboxd.Client, cmd *exec.Cmd, pw *io.PipeWriter, counter *idCounter, n uint64) {
	t.Helper()
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if code, _, killed := waitTimeout(cmd, 10*time.Second); killed || code != 0 {
		t.Errorf("sidecar exit status %d (killed %v), want 0", code, killed)
	}
	_ = pw.Close()
	<-counter.done
	counter.mu.Lock()
	defer counter.mu.Unlock()
	if counter.bad != nil {
		t.Errorf("stdout: %v", counter.bad)
	}
	for id := uint64(1); id <= n; id++ {
		if k := counter.responses[id]; k != 1 {
			t.Errorf("request id %d got %d responses, want exactly 1", id, k)
		}
	}
	for id := range counter.responses {
		if id < 1 || id > n {
			t.Errorf("a response for id %d, which was never sent (ids 1..%d)", id, n)
		}
	}
	t.Logf("%d ids, %d responses counted at the wire, %d log notifications", n, len(counter.responses), counter.logs)
}

func newBufReader(r io.Reader) *bufio.Reader { return bufio.NewReaderSize(r, 1<<20) }
