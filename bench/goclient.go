package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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
		Args: append([]string{"--log-level", "warn"}, args...), Stderr: &syncWriter{w: &stderr},
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

// goClientSection is rows 2 and 3.
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
	return append(goSequentialRows(env, c, id), goPipelinedRows(env, c, id)...)
}

func goSequentialRows(env *Env, c *sandboxd.Client, id string) []Row {
	s, err := sequential(c, addParams(id), env.n(500, 100), env.n(5000, 500))
	if err != nil {
		return []Row{naRow("2 go seq", "run add {id}, sequential", err.Error())}
	}
	env.GoSeq = s
	engine, err := serverSideElapsed(c, addParams(id), env.n(500, 100))
	if err != nil {
		return []Row{naRow("2 go seq", "server-side elapsed", err.Error())}
	}
	floor := env.GoFloor.P50()
	r := ratio(float64(s.P50()), float64(floor))
	return []Row{
		{Section: "2 go seq", Measurement: "run add {id} sequential, p50", Value: fmtDur(s.P50()),
			Floor: "pipe " + fmtDur(floor), Ratio: r, Target: "≤ 4×", Verdict: judge(r <= 4),
			Raw: map[string]float64{"p50_us": us(s.P50()), "floor_p50_us": us(floor)}},
		{Section: "2 go seq", Measurement: "run add {id} sequential, p99", Value: fmtDur(s.P99()),
			Floor: "pipe " + fmtDur(env.GoFloor.P99()), Ratio: ratio(float64(s.P99()), float64(env.GoFloor.P99())),
			Verdict: verdictInfo, Raw: map[string]float64{"p99_us": us(s.P99())}},
		{Section: "2 go seq", Measurement: "  of which engine (elapsed+queued), p50", Value: fmtDur(engine.P50()),
			Floor: "round trip " + fmtDur(s.P50()), Ratio: ratio(float64(engine.P50()), float64(s.P50())), Verdict: verdictInfo,
			Note: "the rest of the round trip is IPC, JSON-RPC and goroutine hand-offs in client and sidecar",
			Raw:  map[string]float64{"engine_p50_us": us(engine.P50())}},
	}
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

func goPipelinedRows(env *Env, c *sandboxd.Client, id string) []Row {
	d := env.dur(3*time.Second, 500*time.Millisecond)
	p := addParams(id)
	got, err := throughput(pipelineDepth, d, func() error { _, err := c.Run(context.Background(), p, nil); return err })
	if err != nil {
		return []Row{naRow("3 go pipe", "run add, 64 in flight", err.Error())}
	}
	limit, err := inProcessLimit(env, d)
	if err != nil {
		return []Row{naRow("3 go pipe", "in-process limit", err.Error())}
	}
	env.GoPipe = got
	r := ratio(got, limit)
	return []Row{{Section: "3 go pipe", Measurement: "run add, 64 in flight, throughput", Value: fmtRate(got),
		Floor: "in-process " + fmtRate(limit), Ratio: r, Target: "≥ 0.3×", Verdict: judge(r >= 0.3),
		Raw: map[string]float64{"calls_per_s": got, "in_process_calls_per_s": limit}}}
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
