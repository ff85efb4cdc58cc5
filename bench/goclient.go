package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/rpc"
	"github.com/sandboxd/sandboxd/sandbox"
)

// pipelineDepth is the number of requests in flight for throughput rows.
const pipelineDepth = 64

// startSidecar spawns `sandboxd serve` with quiet logs. Its stderr is kept
// so a failure can be explained.
func startSidecar(env *Env, args ...string) (*sandboxd.Client, *bytes.Buffer, error) {
	var stderr bytes.Buffer
	c, err := sandboxd.Start(context.Background(), env.Binary, sandboxd.Options{
		Args: append(append([]string{"--log-level", "warn"}, args...), env.ServeArgs...), Stderr: &syncWriter{w: &stderr},
	})
	return c, &stderr, err
}

// syncWriter serialises writes: the client copies stderr on its own goroutine.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// compileWAT compiles a testdata module and returns its id.
func compileWAT(c *sandboxd.Client, path string) (string, error) {
	res, err := c.Compile(context.Background(), rpc.ModuleSpec{Path: sandboxd.Str(path)})
	if err != nil {
		return "", err
	}
	return res.ModuleID, nil
}

// argsJSON renders integer arguments for RunParams.
func argsJSON(vals ...int) []json.RawMessage {
	out := make([]json.RawMessage, len(vals))
	for i, v := range vals {
		out[i] = json.RawMessage(fmt.Sprint(v))
	}
	return out
}

func addParams(id string) rpc.RunParams {
	return rpc.RunParams{Module: rpc.ModuleSpec{ID: sandboxd.Str(id)}, Function: "add", Args: argsJSON(1, 2)}
}

// sequential times n run calls one after another, after warm-up calls.
func sequential(c *sandboxd.Client, p rpc.RunParams, warm, n int) (Sample, error) {
	s := make(Sample, 0, n)
	for i := 0; i < warm+n; i++ {
		t := time.Now()
		if _, err := c.Run(context.Background(), p, nil); err != nil {
			return nil, err
		}
		if i >= warm {
			s = append(s, time.Since(t))
		}
	}
	return s, nil
}

// throughput runs call from `workers` goroutines for d and returns calls/s.
// The first error stops every worker and is returned.
func throughput(workers int, d time.Duration, call func() error) (float64, error) {
	var done atomic.Int64
	var firstErr error
	var once sync.Once
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := call(); err != nil {
					once.Do(func() { firstErr = err; close(stop) })
					return
				}
				done.Add(1)
			}
		}()
	}
	select {
	case <-time.After(d):
		once.Do(func() { close(stop) })
	case <-stop:
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds(), firstErr
}

// inProcessEngine is an engine with the benchmark guest compiled, for the
// rows measured without a sidecar. The caller closes the engine.
func inProcessEngine(env *Env) (*sandbox.Engine, *sandbox.Module, error) {
	eng, err := sandbox.NewEngine(sandbox.Config{})
	if err != nil {
		return nil, nil, err
	}
	m, _, err := eng.Compile(context.Background(), sandbox.Source{Path: env.wat("well_behaved.wat")})
	if err != nil {
		eng.Close()
		return nil, nil, err
	}
	return eng, m, nil
}

// inProcessLimit is the ceiling for pipelined throughput: the same module
// and call through sandbox.Engine.Run (fresh store, instantiate, call,
// fences armed) on GOMAXPROCS goroutines, with no IPC and no JSON.
func inProcessLimit(env *Env, d time.Duration) (float64, error) {
	eng, m, err := inProcessEngine(env)
	if err != nil {
		return 0, err
	}
	defer eng.Close()
	req := sandbox.Request{Module: m, Function: "add", Args: []sandbox.Value{sandbox.ValueI32(1), sandbox.ValueI32(2)}, Limits: limits.Defaults()}
	call := func() error { _, err := eng.Run(context.Background(), req); return err }
	for range 1000 { // warm-up: first-touch allocations, thread creation
		if err := call(); err != nil {
			return 0, err
		}
	}
	return throughput(runtime.GOMAXPROCS(0), d, call)
}

// goClientSection is rows 2 and 3: the module by id, as wasm bytes and as
// WAT text, sequential and pipelined.
func goClientSection(env *Env) []Row {
	c, stderr, err := startSidecar(env)
	if err != nil {
		return []Row{naRow("2 go seq", "Go client", err.Error())}
	}
	defer c.Close()
	id, err := compileWAT(c, env.wat("well_behaved.wat"))
	if err != nil {
		return []Row{naRow("2 go seq", "Go client", fmt.Sprintf("%v; stderr: %s", err, stderr))}
	}
	wat, err := os.ReadFile(env.wat("well_behaved.wat"))
	if err != nil {
		return []Row{naRow("2 go seq", "Go client", err.Error())}
	}
	sources := []runSource{
		{"{id}", rpc.ModuleSpec{ID: sandboxd.Str(id)}},
		{"as wasm bytes", rpc.ModuleSpec{Wasm: sandboxd.Str(base64.StdEncoding.EncodeToString(addModule()))}},
		{"as WAT", rpc.ModuleSpec{WAT: sandboxd.Str(string(wat))}},
	}
	// Every module is compiled before the first row, so no row pays for a
	// compile, nor shares the machine with the compile child the engine
	// starts after one.
	if _, err := c.Compile(context.Background(), sources[1].module); err != nil {
		return []Row{naRow("2 go seq", "Go client", fmt.Sprintf("%v; stderr: %s", err, stderr))}
	}
	var rows []Row
	for i, src := range sources {
		rows = append(rows, goSequentialRows(env, c, src, i == 0)...)
	}
	limit, err := inProcessLimit(env, env.dur(3*time.Second, 500*time.Millisecond))
	if err != nil {
		return append(rows, naRow("3 go pipe", "in-process limit", err.Error()))
	}
	for _, src := range []runSource{sources[0], sources[2]} {
		rows = append(rows, goPipelinedRow(env, c, src, limit))
	}
	return rows
}

// runSource is how a row's runs name their module.
type runSource struct {
	name   string
	module rpc.ModuleSpec
}

func (s runSource) params() rpc.RunParams {
	return rpc.RunParams{Module: s.module, Function: "add", Args: argsJSON(1, 2)}
}

// addModule is `add` alone as a binary module (the row with wasm bytes:
// base64 on the wire, like any binary module).
func addModule() []byte {
	types := vec(1, funcType([]byte{typeI32, typeI32}, []byte{typeI32}))
	body := []byte{0, opLocalGet, 0, opLocalGet, 1, opI32Add, opEnd}
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = append(m, wasmSection(secType, types)...)
	m = append(m, wasmSection(secFunction, vec(1, []byte{0}))...)
	m = append(m, wasmSection(secExport, vec(1, append(name("add"), kindFunc, 0)))...)
	return append(m, wasmSection(secCode, vec(1, append(uleb(uint64(len(body))), body...)))...)
}

func goSequentialRows(env *Env, c *sandboxd.Client, src runSource, first bool) []Row {
	what := "run add " + src.name + " sequential"
	p := src.params()
	pr, err := env.interleaveGo(env.n(500, 100), 10, env.n(5000, 500),
		timedBlock(func() error { _, err := c.Run(context.Background(), p, nil); return err }))
	if err != nil {
		return []Row{naRow("2 go seq", what, err.Error())}
	}
	s := pr.Subject
	if first {
		env.GoSeq = s
	}
	engine, err := serverSideElapsed(c, p, env.n(500, 100))
	if err != nil {
		return []Row{naRow("2 go seq", what+", server-side elapsed", err.Error())}
	}
	r := pr.Ratio()
	rows := []Row{
		{Section: "2 go seq", Measurement: what + ", p50", Value: fmtDur(s.P50()),
			Floor: "pipe " + fmtDur(pr.Floor.P50()) + " (interleaved)", Ratio: r, Target: "≤ 4×", Verdict: judge(r <= 4),
			Note: "ratio: median of per-block p50 ratios, " + pr.Spread() + env.floorWarning(pr.Floor.P50()), Raw: pr.Raw()},
		{Section: "2 go seq", Measurement: what + ", p99", Value: fmtDur(s.P99()),
			Floor: "pipe " + fmtDur(pr.Floor.P99()), Ratio: ratio(float64(s.P99()), float64(pr.Floor.P99())),
			Verdict: verdictInfo, Raw: map[string]float64{"p99_us": us(s.P99()), "floor_p99_us": us(pr.Floor.P99())}},
	}
	row := Row{Section: "2 go seq", Measurement: "  of which engine (elapsed+queued), p50", Value: fmtDur(engine.P50()),
		Floor: "round trip " + fmtDur(s.P50()), Ratio: ratio(float64(engine.P50()), float64(s.P50())), Verdict: verdictInfo,
		Raw: map[string]float64{"engine_p50_us": us(engine.P50())}}
	if first {
		row.Note = "the rest of the round trip is IPC, JSON-RPC and goroutine hand-offs in client and sidecar"
	}
	return append(rows, row)
}

// serverSideElapsed collects the sidecar's own elapsedMicros+queuedMicros,
// to split the round trip into engine time and everything else.
func serverSideElapsed(c *sandboxd.Client, p rpc.RunParams, n int) (Sample, error) {
	s := make(Sample, 0, n)
	for range n {
		res, err := c.Run(context.Background(), p, nil)
		if err != nil {
			return nil, err
		}
		s = append(s, time.Duration(res.ElapsedMicros+res.QueuedMicros)*time.Microsecond)
	}
	return s, nil
}

// goPipelinedRow is row 3 for one module source: calls/s with
// pipelineDepth in flight against the in-process limit.
func goPipelinedRow(env *Env, c *sandboxd.Client, src runSource, limit float64) Row {
	what := "run add " + src.name + ", 64 in flight, throughput"
	d := env.dur(3*time.Second, 500*time.Millisecond)
	p := src.params()
	got, err := throughput(pipelineDepth, d, func() error { _, err := c.Run(context.Background(), p, nil); return err })
	if err != nil {
		return naRow("3 go pipe", what, err.Error())
	}
	if env.GoPipe == 0 {
		env.GoPipe = got
	}
	r := ratio(got, limit)
	return Row{Section: "3 go pipe", Measurement: what, Value: fmtRate(got),
		Floor: "in-process " + fmtRate(limit), Ratio: r, Target: "≥ 0.3×", Verdict: judge(r >= 0.3),
		Raw: map[string]float64{"calls_per_s": got, "in_process_calls_per_s": limit}}
}

// pipelinedN makes n calls with pipelineDepth in flight.
func pipelinedN(n int, call func() error) (time.Duration, error) {
	start := time.Now()
	var next atomic.Int64
	errs := make(chan error, pipelineDepth)
	var wg sync.WaitGroup
	for range pipelineDepth {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := call(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return time.Since(start), <-errs
}
