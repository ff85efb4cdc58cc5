package main

// `sandboxd serve` end to end: every method through the Go client, then
// the wire itself through raw pipes (ordering, concurrency, cancellation,
// backpressure, protocol errors, ids, framing, process lifetime).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/rpc"
)

func TestSidecarInitialize(t *testing.T) {
	c, _ := startClient(t, binPath, "--max-concurrency", "2")
	var res rpc.InitializeResult
	if err := c.Call(ctxT(t, 30*time.Second), "initialize", map[string]any{}, &res); err != nil {
		t.Fatal(err)
	}
	if res.ServerInfo != (rpc.ServerInfo{Name: "sandboxd", Version: "0.1.0"}) {
		t.Errorf("serverInfo %+v", res.ServerInfo)
	}
	if !strings.HasPrefix(res.Engine.Wasmtime, "v39.") {
		t.Errorf("engine.wasmtime %q, want v39.x", res.Engine.Wasmtime)
	}
	if want := []string{"log", "random", "clock"}; !reflect.DeepEqual(res.Capabilities.HostFunctions, want) {
		t.Errorf("hostFunctions %v, want %v", res.Capabilities.HostFunctions, want)
	}
	if want := []string{"i32", "i64", "f32", "f64"}; !reflect.DeepEqual(res.Capabilities.ValueTypes, want) {
		t.Errorf("valueTypes %v, want %v", res.Capabilities.ValueTypes, want)
	}
	if res.Capabilities.Framing != "content-length" {
		t.Errorf("framing %q", res.Capabilities.Framing)
	}
	wantDefaults := map[string]uint64{"fuel": 1 << 50, "timeoutMs": 1000, "memoryBytes": 16777216,
		"tableElements": 100000, "instances": 1, "memories": 1, "logBytes": 1048576, "outputBytes": 1048576,
		"compileTimeoutMs": 180000, "compileMemoryBytes": 2 << 30, "varBytes": 1 << 20}
	wantMax := map[string]uint64{"fuel": 1125899906842624, "timeoutMs": 600000, "memoryBytes": 4294967296,
		"tableElements": 10000000, "instances": 16, "memories": 16, "logBytes": 67108864, "outputBytes": 67108864,
		"compileTimeoutMs": 300000, "compileMemoryBytes": 4 << 30, "varBytes": 64 << 20}
	if !reflect.DeepEqual(res.Limits.Defaults, wantDefaults) {
		t.Errorf("limits.defaults %v, want %v", res.Limits.Defaults, wantDefaults)
	}
	if !reflect.DeepEqual(res.Limits.Maximums, wantMax) {
		t.Errorf("limits.maximums %v, want %v", res.Limits.Maximums, wantMax)
	}
	if res.MaxConcurrency != 2 || res.MaxQueue != 1024 {
		t.Errorf("maxConcurrency %d maxQueue %d, want 2 and 1024", res.MaxConcurrency, res.MaxQueue)
	}
}

// Flags move the defaults and maximums; a run above a maximum is refused
// naming the field.
func TestSidecarLimitFlags(t *testing.T) {
	c, _ := startClient(t, binPath, "--default-fuel", "5000", "--max-fuel", "10000", "--max-queue", "7")
	ctx := ctxT(t, 30*time.Second)
	var res rpc.InitializeResult
	if err := c.Call(ctx, "initialize", nil, &res); err != nil {
		t.Fatal(err)
	}
	if res.Limits.Defaults["fuel"] != 5000 || res.Limits.Maximums["fuel"] != 10000 || res.MaxQueue != 7 {
		t.Errorf("flags not reflected: defaults.fuel %d maximums.fuel %d maxQueue %d",
			res.Limits.Defaults["fuel"], res.Limits.Maximums["fuel"], res.MaxQueue)
	}
	_, err := c.Run(ctx, sandboxd.RunParams{Module: modPath("infinite_loop.wat")}, nil)
	if e := asRPCError(t, err); e.Code != 2 || !strings.Contains(e.Message, "5000") {
		t.Errorf("default fuel not applied: %v", e)
	}
	_, err = c.Run(ctx, sandboxd.RunParams{Module: modPath("infinite_loop.wat"), Limits: map[string]uint64{"fuel": 10001}}, nil)
	if e := asRPCError(t, err); e.Code != rpc.CodeInvalidParams || !strings.Contains(e.Message, "limits.fuel") {
		t.Errorf("fuel above the maximum: want -32602 naming limits.fuel, got %v", e)
	}
}

func TestSidecarRunKinds(t *testing.T) {
	c, _ := startClient(t, binPath)
	ctx := ctxT(t, 60*time.Second)
	res, err := c.Run(ctx, sandboxd.RunParams{Module: modPath("well_behaved.wat"), Function: "add", Args: rawArgs(2, 40)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Values) != 1 || res.Values[0].Type != "i32" || string(res.Values[0].Value) != "42" || res.FuelConsumed != 4 {
		t.Errorf("add(2,40) = %+v", res)
	}
	if !strings.HasPrefix(res.ModuleID, "sha256:") {
		t.Errorf("moduleId %q", res.ModuleID)
	}
	cases := []struct {
		kind string
		code int64
		p    sandboxd.RunParams
		data string // a field data must carry
	}{
		{"fuel_exhausted", 2, sandboxd.RunParams{Module: modPath("infinite_loop.wat"), Limits: map[string]uint64{"fuel": 1000000}}, `"budget":1000000`},
		{"timeout", 3, sandboxd.RunParams{Module: modPath("infinite_loop.wat"), Limits: map[string]uint64{"fuel": hugeFuel, "timeoutMs": 100}}, `"timeoutMs":100`},
		{"memory_limit_exceeded", 4, sandboxd.RunParams{Module: modPath("memory_bomb.wat"), Limits: map[string]uint64{"memoryBytes": 4 << 20}}, `"resource":"memory"`},
		{"disallowed_import", 5, sandboxd.RunParams{Module: modPath("disallowed_import.wat")}, `"name":"secret"`},
		{"invalid_module", 6, sandboxd.RunParams{Module: rpc.ModuleSpec{WAT: sandboxd.Str("(module")}}, `"kind":"invalid_module"`},
		{"export", 7, sandboxd.RunParams{Module: modPath("well_behaved.wat"), Function: "nope"}, `"function":"nope"`},
		{"trap", 8, sandboxd.RunParams{Module: modPath("traps.wat"), Function: "div_by_zero"}, `"trapCode":"integer_divide_by_zero"`},
	}
	for _, cs := range cases {
		_, err := c.Run(ctx, cs.p, nil)
		e := asRPCError(t, err)
		if e.Code != cs.code || e.Kind() != cs.kind || !strings.Contains(string(e.Data), cs.data) {
			t.Errorf("%s: got code %d kind %q data %s", cs.kind, e.Code, e.Kind(), e.Data)
		}
	}
}

func TestSidecarCompileThenRunByID(t *testing.T) {
	c, _ := startClient(t, binPath)
	ctx := ctxT(t, 30*time.Second)
	cr, err := c.Compile(ctx, modPath("well_behaved.wat"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cr.ModuleID, "sha256:") || cr.Cached {
		t.Errorf("first compile: id %q cached %v", cr.ModuleID, cr.Cached)
	}
	var add *rpc.ExportInfo
	for i := range cr.Exports {
		if cr.Exports[i].Name == "add" {
			add = &cr.Exports[i]
		}
	}
	if add == nil || add.Kind != "func" || !reflect.DeepEqual(add.Params, []string{"i32", "i32"}) || !reflect.DeepEqual(add.Results, []string{"i32"}) {
		t.Errorf("export add: %+v", add)
	}
	cr2, err := c.Compile(ctx, modPath("well_behaved.wat"))
	if err != nil || !cr2.Cached || cr2.ModuleID != cr.ModuleID {
		t.Errorf("second compile: %+v %v (want cached, same id)", cr2, err)
	}
	res, err := c.Run(ctx, sandboxd.RunParams{Module: rpc.ModuleSpec{ID: &cr.ModuleID}, Function: "fib", Args: rawArgs(20)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Values[0].Value) != "6765" || res.FuelConsumed != 352 || res.ModuleID != cr.ModuleID {
		t.Errorf("fib(20) by id: %+v", res)
	}
	li, err := c.Compile(ctx, modPath("logger.wat"))
	if err != nil {
		t.Fatal(err)
	}
	if len(li.Imports) != 1 || li.Imports[0].Module != "host" || li.Imports[0].Name != "log" || li.Imports[0].Kind != "func" {
		t.Errorf("logger imports %+v", li.Imports)
	}

	unknown := "sha256:" + strings.Repeat("ab", 32)
	_, err = c.Run(ctx, sandboxd.RunParams{Module: rpc.ModuleSpec{ID: &unknown}}, nil)
	e := asRPCError(t, err)
	if e.Code != 6 || e.Kind() != "invalid_module" || !strings.Contains(e.Message, unknown) {
		t.Errorf("unknown id: want code 6 naming %s, got %v (kind %q)", unknown, e, e.Kind())
	}
}

func TestSidecarStatsCounts(t *testing.T) {
	c, _ := startClient(t, binPath)
	ctx := ctxT(t, 30*time.Second)
	add := sandboxd.RunParams{Module: modPath("well_behaved.wat"), Function: "add", Args: rawArgs(1, 2)}
	for i := 0; i < 3; i++ {
		if _, err := c.Run(ctx, add, nil); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = c.Run(ctx, sandboxd.RunParams{Module: modPath("infinite_loop.wat"), Limits: map[string]uint64{"fuel": 1000}}, nil)
	_, _ = c.Run(ctx, sandboxd.RunParams{Module: modPath("traps.wat"), Function: "unreachable"}, nil)
	_, _ = c.Run(ctx, sandboxd.RunParams{Module: modPath("traps.wat"), Function: "oob"}, nil)
	_, _ = c.Run(ctx, sandboxd.RunParams{Module: modPath("disallowed_import.wat")}, nil)
	// Protocol errors are not run outcomes.
	_, err := c.Run(ctx, sandboxd.RunParams{Module: modPath("well_behaved.wat"), Function: "add", Args: rawArgs(true, 2)}, nil)
	if e := asRPCError(t, err); e.Code != rpc.CodeInvalidParams {
		t.Errorf("bad arg: %v", e)
	}
	_, err = c.Run(ctx, sandboxd.RunParams{Module: modPath("well_behaved.wat"), Limits: map[string]uint64{"fuel": 0}}, nil)
	if e := asRPCError(t, err); e.Code != rpc.CodeInvalidParams {
		t.Errorf("zero fuel: %v", e)
	}
	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"ok": 3, "fuel_exhausted": 1, "timeout": 0, "memory_limit_exceeded": 0,
		"disallowed_import": 1, "invalid_module": 0, "export": 0, "trap": 2, "cancelled": 0, "host": 0,
		"plugin_error": 0, "compile_limit_exceeded": 0, "host_function_error": 0}
	if !reflect.DeepEqual(st.Runs, want) {
		t.Errorf("stats.runs %v, want %v", st.Runs, want)
	}
	if st.InFlight != 0 || st.Queued != 0 {
		t.Errorf("inFlight %d queued %d", st.InFlight, st.Queued)
	}
	if st.Requests < 10 {
		t.Errorf("requests %d, want >= 10", st.Requests)
	}
	if st.Cache.Entries < 3 {
		t.Errorf("cache entries %d, want >= 3 (4 distinct modules)", st.Cache.Entries)
	}
}

func TestSidecarShutdownExit(t *testing.T) {
	t.Run("shutdown_then_exit", func(t *testing.T) {
		s := startRaw(t, binPath)
		s.request("1", "run", runParams(fixture("well_behaved.wat"), "add", []any{1, 2}, nil, nil))
		s.request("2", "shutdown", nil)
		r, _ := s.response("2", 10*time.Second)
		if r.Error != nil || string(r.Result) != "null" {
			t.Errorf("shutdown answered %s", r.raw)
		}
		// Runs after shutdown are refused.
		s.request("3", "run", runParams(fixture("well_behaved.wat"), "add", []any{1, 2}, nil, nil))
		r, _ = s.response("3", 10*time.Second)
		if r.Error == nil || r.Error.Code != rpc.CodeInvalidRequest || !strings.Contains(r.Error.Message, "shutting down") {
			t.Errorf("run after shutdown: %s", r.raw)
		}
		s.notify("exit", nil)
		code, took, killed := s.wait(5 * time.Second)
		if killed || code != 0 {
			t.Errorf("exit after shutdown: status %d (killed %v), want 0", code, killed)
		}
		t.Logf("exit notification to process end: %v", took.Round(time.Millisecond))
		checkLogOrder(t, s.all(), "1")
	})
	t.Run("exit_without_shutdown", func(t *testing.T) {
		s := startRaw(t, binPath)
		s.request("1", "stats", nil)
		s.response("1", 10*time.Second)
		s.notify("exit", nil)
		code, _, killed := s.wait(5 * time.Second)
		if killed || code != 1 {
			t.Errorf("exit without shutdown: status %d (killed %v), want 1", code, killed)
		}
	})
	t.Run("client_close", func(t *testing.T) {
		c, err := sandboxd.Start(context.Background(), binPath, sandboxd.Options{Stderr: &syncBuffer{}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Run(ctxT(t, 30*time.Second), sandboxd.RunParams{Module: modPath("well_behaved.wat"), Function: "add", Args: rawArgs(1, 1)}, nil); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close (shutdown+exit): %v, want a clean exit 0", err)
		}
		if st := c.Process(); st == nil {
			t.Fatal("no process")
		}
	})
}

func TestSidecarLogsBeforeResponse(t *testing.T) {
	c, _ := startClient(t, binPath)
	ctx := ctxT(t, 30*time.Second)
	var lines []string
	res, err := c.Run(ctx, sandboxd.RunParams{Module: modPath("logger.wat"), Capabilities: &rpc.CapabilitySpec{Log: true}},
		func(seq int, line string) { lines = append(lines, fmt.Sprintf("%d:%s", seq, line)) })
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(lines, []string{"0:hello from the guest"}) || res.LogLines != 1 {
		t.Errorf("logger: lines %q logLines %d", lines, res.LogLines)
	}
	var seqs []int
	res, err = c.Run(ctx, sandboxd.RunParams{Module: modPath("log_flood.wat"), Function: "flood", Args: rawArgs(50),
		Capabilities: &rpc.CapabilitySpec{Log: true}}, func(seq int, line string) {
		seqs = append(seqs, seq)
		if len(line) != 1000 || strings.Trim(line, "x") != "" {
			t.Errorf("line %d is not 1000 x: %q…", seq, line[:min(len(line), 20)])
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 50 || res.LogLines != 50 || res.LogTruncated {
		t.Errorf("flood(50): %d lines, logLines %d truncated %v", len(seqs), res.LogLines, res.LogTruncated)
	}
	for i, s := range seqs {
		if s != i {
			t.Fatalf("seq %d at position %d", s, i)
		}
	}

	// The same on the wire, two runs interleaved.
	s := startRaw(t, binPath)
	caps := map[string]any{"log": true}
	s.request(`"a"`, "run", runParams(fixture("log_flood.wat"), "flood", []any{50}, nil, caps))
	s.request(`"b"`, "run", runParams(fixture("logger.wat"), "", nil, nil, caps))
	s.request(`"c"`, "run", runParams(fixture("log_flood.wat"), "flood", []any{30}, nil, caps))
	s.response(`"a"`, 10*time.Second)
	s.response(`"b"`, 10*time.Second)
	s.response(`"c"`, 10*time.Second)
	msgs := s.all()
	if n := len(checkLogOrder(t, msgs, `"a"`)); n != 50 {
		t.Errorf("run a: %d lines, want 50", n)
	}
	if l := checkLogOrder(t, msgs, `"b"`); !reflect.DeepEqual(l, []string{"hello from the guest"}) {
		t.Errorf("run b: %q", l)
	}
	if n := len(checkLogOrder(t, msgs, `"c"`)); n != 30 {
		t.Errorf("run c: %d lines, want 30", n)
	}
}

// 100 runs at once against 2 workers: each answered exactly once.
func TestSidecarConcurrentRunsAnsweredOnce(t *testing.T) {
	const n = 100
	s := startRaw(t, binPath, "--max-concurrency", "2")
	for i := 1; i <= n; i++ {
		fn, args := "add", []any{i, 1000}
		if i%3 == 0 {
			fn, args = "fib", []any{20}
		}
		s.request(fmt.Sprint(i), "run", runParams(fixture("well_behaved.wat"), fn, args, nil, nil))
	}
	got := map[string]int{}
	for len(got) < n {
		m := s.mustTake(30 * time.Second)
		if !m.isResponse() {
			t.Fatalf("unexpected message %s", m.raw)
		}
		got[m.idKey()]++
		if got[m.idKey()] > 1 {
			t.Fatalf("id %s answered twice", m.idKey())
		}
		var res rpc.RunResult
		if m.Error != nil || json.Unmarshal(m.Result, &res) != nil {
			t.Fatalf("run %s failed: %s", m.idKey(), m.raw)
		}
		var id int
		_ = json.Unmarshal(m.ID, &id)
		want := fmt.Sprint(id + 1000)
		if id%3 == 0 {
			want = "6765"
		}
		if string(res.Values[0].Value) != want {
			t.Errorf("run %d: value %s, want %s (responses crossed?)", id, res.Values[0].Value, want)
		}
	}
	// Nothing more: the next message is the stats answer.
	st := s.statsRaw(`"final"`)
	if all := s.all(); len(all) != n+1 {
		t.Errorf("%d messages in all, want %d responses and the stats answer", len(all), n)
	}
	if st.Runs["ok"] != n {
		t.Errorf("stats ok %d, want %d", st.Runs["ok"], n)
	}

	// The same through the client, 100 goroutines.
	c, _ := startClient(t, binPath, "--max-concurrency", "2")
	ctx := ctxT(t, 60*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.Run(ctx, sandboxd.RunParams{Module: modPath("well_behaved.wat"), Function: "add", Args: rawArgs(i, 1)}, nil)
			if err == nil && string(res.Values[0].Value) != fmt.Sprint(i+1) {
				err = fmt.Errorf("add(%d,1) = %s", i, res.Values[0].Value)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestSidecarCancel(t *testing.T) {
	c, _ := startClient(t, binPath, "--max-concurrency", "1")
	spin := sandboxd.RunParams{Module: modPath("infinite_loop.wat"), Limits: map[string]uint64{"fuel": hugeFuel, "timeoutMs": 60000}}
	add := sandboxd.RunParams{Module: modPath("well_behaved.wat"), Function: "add", Args: rawArgs(1, 2)}

	type outcome struct {
		err  error
		done time.Time
	}
	spinCtx, cancelSpin := context.WithCancel(context.Background())
	defer cancelSpin()
	queuedCtx, cancelQueued := context.WithCancel(context.Background())
	defer cancelQueued()
	spinDone, queuedDone := make(chan outcome, 1), make(chan outcome, 1)
	go func() { _, err := c.Run(spinCtx, spin, nil); spinDone <- outcome{err, time.Now()} }()
	waitStats(t, c, func(st *rpc.StatsResult) bool { return st.InFlight == 1 })
	go func() { _, err := c.Run(queuedCtx, add, nil); queuedDone <- outcome{err, time.Now()} }()
	waitStats(t, c, func(st *rpc.StatsResult) bool { return st.InFlight == 1 && st.Queued == 1 })

	check := func(name string, cancel func(), done chan outcome) {
		start := time.Now()
		cancel()
		select {
		case o := <-done:
			took := o.done.Sub(start)
			t.Logf("cancel of the %s run answered in %v", name, took.Round(time.Microsecond))
			e := asRPCError(t, o.err)
			if e.Code != rpc.CodeCancelled || e.Kind() != "cancelled" {
				t.Errorf("%s run: want -32800 kind cancelled, got %v kind %q", name, e, e.Kind())
			}
		case <-time.After(30 * time.Second): // a hang bound, under spin's 60 s deadline
			t.Fatalf("%s run: no answer 30 s after the cancel", name)
		}
	}
	check("queued", cancelQueued, queuedDone)
	check("running", cancelSpin, spinDone)

	// The worker is free again.
	if _, err := c.Run(ctxT(t, 30*time.Second), add, nil); err != nil {
		t.Errorf("run after the cancellations: %v", err)
	}
	st, _ := c.Stats(ctxT(t, 10*time.Second))
	if st.Runs["cancelled"] != 2 || st.Runs["ok"] != 1 {
		t.Errorf("stats: cancelled %d ok %d, want 2 and 1", st.Runs["cancelled"], st.Runs["ok"])
	}
}

func waitStats(t *testing.T, c *sandboxd.Client, ok func(*rpc.StatsResult) bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := c.Stats(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if ok(st) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats never reached the wanted state: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A timeout fires on time while the parent is not reading stdout.
func TestSidecarTimeoutWhileParentNotReading(t *testing.T) {
	// One module for the spin and the floods, so that all four runs wait
	// for the same compile and start together on four workers.
	mod := map[string]any{"wat": `(module (import "host" "log" (func $log (param i32 i32)))
		(memory (export "memory") 1)
		(func (export "spin") (loop $l (br $l)))
		(func (export "flood")
			(memory.fill (i32.const 0) (i32.const 0x78) (i32.const 1000))
			(loop $l (call $log (i32.const 0) (i32.const 1000)) (br $l))))`}
	s := startRaw(t, binPath, "--max-concurrency", "4")
	s.request(`"spin"`, "run", map[string]any{"module": mod, "function": "spin",
		"limits": map[string]uint64{"fuel": hugeFuel, "timeoutMs": 100}, "capabilities": map[string]any{"log": true}})
	floods := []string{`"f1"`, `"f2"`, `"f3"`}
	for _, id := range floods {
		s.request(id, "run", map[string]any{"module": mod, "function": "flood",
			"limits": map[string]uint64{"fuel": hugeFuel, "timeoutMs": 1500}, "capabilities": map[string]any{"log": true}})
	}
	// Not reading for longer than every deadline: the pipe fills with log
	// lines, and a deadline that waited for the parent would end after it.
	time.Sleep(3 * time.Second)
	r, _ := s.response(`"spin"`, 30*time.Second)
	if r.Error == nil || r.Error.Code != 3 || r.kind() != "timeout" || !strings.Contains(string(r.Error.Data), `"timeoutMs":100`) {
		t.Errorf("spin: want timeout (code 3) with timeoutMs 100, got %s", r.raw)
	}
	for _, id := range floods {
		r, _ := s.response(id, 30*time.Second)
		if r.Error == nil || r.kind() != "timeout" {
			t.Errorf("flood %s: want timeout, got %s", id, trunc(r.raw))
		}
	}
	st := s.statsRaw(`"st"`)
	if st.Runs["timeout"] != 4 || st.Runs["cancelled"] != 0 {
		t.Errorf("stats: timeout %d cancelled %d, want 4 and 0", st.Runs["timeout"], st.Runs["cancelled"])
	}
	// On time: the output is in the order things happened. The four runs
	// start together, so spin's response (its 100 ms deadline) must come
	// before the floods' (1.5 s) although nobody read the floods' logs
	// queued before it; a deadline that waited for the parent (3 s) would
	// not. (The floods' deadline was 400 ms with 700 ms of not reading: at
	// load 20 on 2 cores a thread may wait 300 ms for a core, and the test
	// failed without a bug.)
	msgs := s.all()
	pos := map[string]int{}
	for i, m := range msgs {
		if m.isResponse() {
			pos[m.idKey()] = i
		}
	}
	for _, id := range floods {
		if pos[`"spin"`] > pos[id] {
			t.Errorf("spin answered after %s (positions %v): its deadline waited for the parent", id, pos)
		}
	}
	for _, id := range floods {
		lines := checkLogOrder(t, msgs, id)
		if len(lines) == 0 || len(lines) > 1049 {
			t.Errorf("flood %s: %d log lines (want 1..1048 under logBytes 1 MiB)", id, len(lines))
		}
	}
}

func TestSidecarProtocolErrors(t *testing.T) {
	s := startRaw(t, binPath)
	expect := func(id string, code int64, msgHas string) *message {
		t.Helper()
		m := s.mustTake(10 * time.Second)
		if !m.isResponse() || m.idKey() != id || m.Error == nil || m.Error.Code != code || !strings.Contains(m.Error.Message, msgHas) {
			t.Errorf("want id %s code %d message with %q, got %s", id, code, msgHas, m.raw)
		}
		return m
	}
	s.sendBody([]byte(`{"jsonrpc":"2.0","id":1,"method":"stats"`))
	expect("null", rpc.CodeParseError, "")
	s.sendBody([]byte(`not json at all`))
	expect("null", rpc.CodeParseError, "")
	s.sendBody([]byte(`[{"jsonrpc":"2.0","id":1,"method":"stats"},{"jsonrpc":"2.0","id":2,"method":"stats"}]`))
	expect("null", rpc.CodeInvalidRequest, "batch")
	s.sendBody([]byte(`[]`))
	expect("null", rpc.CodeInvalidRequest, "")
	s.sendBody([]byte(`"a string"`))
	expect("null", rpc.CodeInvalidRequest, "")
	s.sendBody([]byte(`{"jsonrpc":"2.0","id":3}`))
	expect("3", rpc.CodeInvalidRequest, "method")
	s.sendBody([]byte(`{"jsonrpc":"1.0","id":4,"method":"stats"}`))
	expect("4", rpc.CodeInvalidRequest, "jsonrpc")
	s.request("5", "no/such/method", nil)
	expect("5", rpc.CodeMethodNotFound, "no/such/method")
	s.request("6", "run", nil)
	expect("6", rpc.CodeInvalidParams, "params")

	wb := map[string]string{"path": fixture("well_behaved.wat")}
	bad := []struct {
		params any
		field  string
	}{
		{map[string]any{"module": map[string]any{"wat": 5}}, "module.wat"},
		{map[string]any{"module": "well_behaved.wat"}, "module"},
		{map[string]any{"module": map[string]any{"path": fixture("well_behaved.wat"), "wat": "(module)"}}, "module"},
		{map[string]any{"module": wb, "function": 7}, "function"},
		{map[string]any{"module": wb, "function": "add", "args": "2,40"}, "args"},
		{map[string]any{"module": wb, "function": "add", "args": []any{true, 40}}, "args[0]"},
		{map[string]any{"module": wb, "function": "add", "args": []any{2, "forty"}}, "args[1]"},
		{map[string]any{"module": wb, "limits": map[string]any{"fuel": "lots"}}, "limits.fuel"},
		{map[string]any{"module": wb, "limits": map[string]any{"timeoutMs": -5}}, "limits.timeoutMs"},
		{map[string]any{"module": wb, "limits": map[string]any{"memoryBytes": 1.5}}, "limits.memoryBytes"},
		{map[string]any{"module": wb, "limits": map[string]any{"timeout": 5}}, "limits.timeout"},
		{map[string]any{"module": wb, "capabilities": map[string]any{"log": "yes"}}, "capabilities.log"},
		{map[string]any{"module": wb, "capabilities": map[string]any{"random": map[string]any{"seed": -1}}}, "capabilities.random.seed"},
		{map[string]any{"module": wb, "capabilities": map[string]any{"random": map[string]any{}}}, "capabilities.random.seed"},
	}
	for i, b := range bad {
		id := fmt.Sprint(100 + i)
		s.request(id, "run", b.params)
		m, _ := s.response(id, 10*time.Second)
		if m.Error == nil || m.Error.Code != rpc.CodeInvalidParams || !strings.HasPrefix(m.Error.Message, b.field+":") {
			t.Errorf("params %s: want -32602 naming %q, got %s", mustMarshal(b.params), b.field, m.raw)
		}
	}
	s.request("200", "compile", map[string]any{"module": map[string]any{"wasm": "!!!"}})
	if m, _ := s.response("200", 10*time.Second); m.Error == nil || m.Error.Code != rpc.CodeInvalidParams || !strings.Contains(m.Error.Message, "module.wasm") {
		t.Errorf("compile with bad base64: %s", m.raw)
	}
	// Still serving, and none of those counted as runs.
	st := s.statsRaw("201")
	for k, v := range st.Runs {
		if v != 0 {
			t.Errorf("protocol errors counted as run outcome %s=%d", k, v)
		}
	}
}

func mustMarshal(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestSidecarOversizedMessage(t *testing.T) {
	for _, framing := range []string{"content-length", "ndjson"} {
		t.Run(framing, func(t *testing.T) {
			s := startRaw(t, binPath, "--max-message-bytes", "4096", "--framing="+framing)
			big := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"run","params":{"module":{"wat":"(module)%s"}}}`, strings.Repeat(" ", 5000))
			s.sendBody([]byte(big))
			s.request("2", "run", runParams(fixture("well_behaved.wat"), "add", []any{2, 40}, nil, nil))
			m := s.mustTake(10 * time.Second)
			if !m.isResponse() || m.idKey() != "null" || m.Error == nil || m.Error.Code != rpc.CodeInvalidRequest ||
				!strings.Contains(m.Error.Message, "4096") {
				t.Errorf("oversized: want -32600 with id null naming the 4096 limit, got %s", m.raw)
			}
			if framing == "content-length" && !strings.Contains(m.Error.Message, fmt.Sprint(len(big))) {
				t.Errorf("oversized: the message should name the size %d: %q", len(big), m.Error.Message)
			}
			m = s.mustTake(10 * time.Second)
			if m.idKey() != "2" || m.Error != nil || !strings.Contains(string(m.Result), `"value":42`) {
				t.Errorf("the request after the oversized one: %s", m.raw)
			}
			// A message just under the limit is fine.
			small := fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"stats","params":{}}%s`, strings.Repeat(" ", 3000))
			s.sendBody([]byte(small))
			if m := s.mustTake(10 * time.Second); m.idKey() != "3" || m.Error != nil {
				t.Errorf("a 3 KB message: %s", m.raw)
			}
		})
	}
}

func TestSidecarIDs(t *testing.T) {
	s := startRaw(t, binPath)
	good := []string{`"abc"`, `""`, `"7"`, `"ü \" \\ x"`, `0`, `7`, `9007199254740993`, `9223372036854775807`}
	for _, id := range good {
		t.Run("valid/"+id, func(t *testing.T) {
			s.request(id, "stats", nil)
			m := s.mustTake(10 * time.Second)
			if m.idKey() != id || m.Error != nil {
				t.Errorf("request id %s: response %s (want the id echoed exactly and a result)", id, m.raw)
			}
		})
	}
	// Numeric ids are integers in 0..2^63-1 (docs/protocol.md): larger
	// ones cannot be echoed exactly by the JSON-RPC layer.
	bad := []string{`-1`, `1.5`, `1.0`, `1e2`, `true`, `false`, `null`, `{}`, `{"a":1}`, `[]`, `[1]`,
		`9223372036854775808`, `18446744073709551615`, `18446744073709551616`}
	for _, id := range bad {
		t.Run("invalid/"+id, func(t *testing.T) {
			s.sendBody([]byte(`{"jsonrpc":"2.0","id":` + id + `,"method":"stats"}`))
			m := s.mustTake(10 * time.Second)
			if m.idKey() != "null" || m.Error == nil || m.Error.Code != rpc.CodeInvalidRequest {
				t.Errorf("request id %s: want -32600 with id null, got %s", id, m.raw)
			}
		})
	}
	// A notification (no id) gets nothing back: the next message answers
	// the request sent after it.
	s.notify("stats", nil)
	s.notify("$/cancelRequest", map[string]any{"id": 12345})
	s.request(`"after"`, "stats", nil)
	if m := s.mustTake(10 * time.Second); m.idKey() != `"after"` {
		t.Errorf("a notification was answered: %s", m.raw)
	}
	// String "5" and number 5 are different ids: both may be in flight.
	s.request(`5`, "run", runParams(fixture("well_behaved.wat"), "add", []any{1, 1}, nil, nil))
	s.request(`"5"`, "run", runParams(fixture("well_behaved.wat"), "add", []any{2, 2}, nil, nil))
	a, _ := s.response(`5`, 10*time.Second)
	b, _ := s.response(`"5"`, 10*time.Second)
	if !strings.Contains(string(a.Result), `"value":2`) || !strings.Contains(string(b.Result), `"value":4`) {
		t.Errorf("ids 5 and \"5\": %s / %s", a.raw, b.raw)
	}
}

// stdin EOF: the running run is answered (cancelled), the process exits 0
// within 1 s and is gone.
func TestSidecarStdinEOF(t *testing.T) {
	s := startRaw(t, binPath, "--max-concurrency", "1")
	s.request(`"spin"`, "run", runParams(fixture("infinite_loop.wat"), "", nil, map[string]uint64{"fuel": hugeFuel, "timeoutMs": 60000}, nil))
	// Runs start in the order their modules are ready: spin must hold the
	// one worker before the next run arrives, or add could overtake it.
	s.waitRunning(1, 0)
	s.request(`"queued"`, "run", runParams(fixture("well_behaved.wat"), "add", []any{1, 2}, nil, nil))
	s.waitRunning(1, 1)
	pid := s.pid()
	start := time.Now()
	if err := s.stdin.Close(); err != nil {
		t.Fatal(err)
	}
	// A hang bound under spin's 60 s deadline, not a speed check.
	code, _, killed := s.wait(30 * time.Second)
	took := time.Since(start)
	t.Logf("stdin EOF to exit: %v", took.Round(time.Millisecond))
	if killed {
		t.Fatalf("the sidecar outlived its stdin by 30 s")
	}
	if code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
	for _, id := range []string{`"spin"`, `"queued"`} {
		r, _ := s.response(id, time.Second)
		if r.Error == nil || r.Error.Code != rpc.CodeCancelled || r.kind() != "cancelled" {
			t.Errorf("%s: want -32800 cancelled, got %s", id, r.raw)
		}
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kill(%d, 0) after Wait: %v, want ESRCH", pid, err)
	}
}

// A header block without Content-Length: in-flight work is answered, a
// clear message goes to stderr, exit status 2.
func TestSidecarFramingErrorExit2(t *testing.T) {
	s := startRaw(t, binPath, "--max-concurrency", "1")
	s.request(`"spin"`, "run", runParams(fixture("infinite_loop.wat"), "", nil, map[string]uint64{"fuel": hugeFuel, "timeoutMs": 60000}, nil))
	s.waitRunning(1, 0)
	s.sendBytes([]byte("Content-Type: application/json\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"stats\"}"))
	start := time.Now()
	code, _, killed := s.wait(10 * time.Second)
	t.Logf("framing error to exit: %v", time.Since(start).Round(time.Millisecond))
	if killed || code != 2 {
		t.Errorf("exit status %d (killed %v), want 2", code, killed)
	}
	if msg := s.stderr.String(); !strings.Contains(msg, "Content-Length") || !strings.Contains(msg, "framing") {
		t.Errorf("stderr does not explain the framing error: %q", msg)
	}
	r, _ := s.response(`"spin"`, time.Second)
	if r.Error == nil || r.Error.Code != rpc.CodeCancelled {
		t.Errorf("the in-flight run: want -32800, got %s", r.raw)
	}
	for _, m := range s.all() {
		if m.idKey() == "9" {
			t.Errorf("the unframed request was answered: %s", m.raw)
		}
	}
}

// Header variants the contract accepts.
func TestSidecarHeaderVariants(t *testing.T) {
	s := startRaw(t, binPath)
	body := `{"jsonrpc":"2.0","id":1,"method":"stats"}`
	s.sendBytes([]byte(fmt.Sprintf("content-length: %d\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n%s", len(body), body)))
	if m := s.mustTake(10 * time.Second); m.idKey() != "1" || m.Error != nil {
		t.Errorf("lower-case header plus Content-Type: %s", m.raw)
	}
	body = `{"jsonrpc":"2.0","id":2,"method":"stats"}`
	s.sendBytes([]byte(fmt.Sprintf("CONTENT-LENGTH:%d\r\n\r\n%s", len(body), body)))
	if m := s.mustTake(10 * time.Second); m.idKey() != "2" || m.Error != nil {
		t.Errorf("upper-case header: %s", m.raw)
	}
}
