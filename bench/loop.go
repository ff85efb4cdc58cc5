package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/protocol"
)

// profileLoop is `go run ./bench -loop MODE`: one loop of a row alone,
// long enough to profile, instead of the table. It prints the p50 and
// what each process spent per round trip: CPU time and context switches,
// read from /proc for every thread of the sidecar (or the echo child) and
// of this process. Modes: floor (row 1's ping-pong), run (row 2, `run
// add` by id), call (row 13, `call add` on a warm instance), pipe (row 3,
// 64 `run add` in flight for loopDur), hostcall (row 17: n host calls
// made by one `relay` call, each a round trip), hostone (row 17: n calls
// of `relay` making one host call each). The sidecar takes -serve-args
// (e.g. "--cpuprofile F" or "--trace F"); cpuProfile and traceFile profile
// this process, the client side. docs/performance.md has what it showed.
func profileLoop(env *Env, mode string, n int, loopDur time.Duration, cpuProfile, traceFile string) error {
	ctx := context.Background()
	var call func() error
	var block func(warm, k int) (Sample, error) // a timed block, when not one call per round trip
	var pid int
	switch mode {
	case "floor":
		child, err := startEcho(env.Self)
		if err != nil {
			return err
		}
		defer child.close()
		pid = child.cmd.Process.Pid
		call = func() error { _, err := child.pingPong(floorMessage(), 0, 1); return err }
	case "run", "call", "pipe":
		c, stderr, err := startSidecar(env)
		if err != nil {
			return err
		}
		defer c.Close()
		pid = c.Process().Pid
		id, err := compileWAT(c, env.wat("well_behaved.wat"))
		if err != nil {
			return fmt.Errorf("%v; stderr: %s", err, stderr)
		}
		p := addParams(id)
		call = func() error { _, err := c.Run(ctx, p, nil); return err }
		if mode == "call" {
			in, err := c.Instantiate(ctx, sandboxd.InstantiateParams{Module: protocol.ModuleSpec{ID: sandboxd.Str(id)}})
			if err != nil {
				return err
			}
			defer in.Release(ctx)
			opts := sandboxd.CallOptions{Args: argsJSON(1, 2)}
			call = func() error { _, err := in.Call(ctx, "add", opts); return err }
		}
	case "hostcall", "hostone":
		c, stderr, err := startSidecar(env)
		if err != nil {
			return err
		}
		defer c.Close()
		pid = c.Process().Pid
		in, err := instantiateHostRelay(env, c)
		if err != nil {
			return fmt.Errorf("%v; stderr: %s", err, stderr)
		}
		defer in.Release(ctx)
		small, _ := hostPayloads()
		relay := &hostRelayer{in: in, small: small}
		call = func() error { return relay.call(0) }
		if mode == "hostcall" { // one relay call making n host calls: each gap is a round trip
			block = relay.trips
		}
	default:
		return fmt.Errorf("-loop %q: want floor, run, call, pipe, hostcall or hostone", mode)
	}
	for range 1000 {
		if err := call(); err != nil {
			return err
		}
	}
	stop, err := startProfiles(cpuProfile, traceFile)
	if err != nil {
		return err
	}
	other0, self0 := procUsage(pid), procUsage(os.Getpid())
	start := time.Now()
	var lat Sample
	done := n
	if mode == "pipe" {
		var rate float64
		if rate, err = throughput(pipelineDepth, loopDur, call); err != nil {
			return err
		}
		done = int(rate * time.Since(start).Seconds())
	} else {
		if block == nil {
			block = timedBlock(call)
		}
		lat, err = block(0, n)
	}
	if err != nil {
		return err
	}
	wall := time.Since(start)
	other1, self1 := procUsage(pid), procUsage(os.Getpid())
	stop()
	peer := map[string]string{"floor": "echo child"}[mode]
	if peer == "" {
		peer = "sidecar"
	}
	per := func(a, b usage) map[string]float64 {
		return map[string]float64{"cpu_us": us(b.cpu-a.cpu) / float64(done), "switches": float64(b.switches-a.switches) / float64(done),
			"cores": (b.cpu - a.cpu).Seconds() / wall.Seconds()}
	}
	out := map[string]any{"mode": mode, "n": done, "wall_s": wall.Seconds(), "per_s": float64(done) / wall.Seconds(),
		strings.ReplaceAll(peer, " ", "_"): per(other0, other1), "client": per(self0, self1)}
	if len(lat) > 0 {
		out["p50_us"], out["p99_us"] = us(lat.P50()), us(lat.P99())
	}
	body, _ := json.Marshal(out)
	fmt.Println(string(body))
	return nil
}

// startProfiles starts this process's CPU profile and execution trace
// when asked; the returned func stops them.
func startProfiles(cpuProfile, traceFile string) (func(), error) {
	var stops []func()
	stop := func() {
		for _, f := range stops {
			f()
		}
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
	}
	if traceFile != "" {
		f, err := os.Create(traceFile)
		if err != nil {
			stop()
			return nil, err
		}
		if err := trace.Start(f); err != nil {
			stop()
			return nil, err
		}
		stops = append(stops, func() { trace.Stop(); f.Close() })
	}
	return stop, nil
}

// usage is what a process's threads have spent so far.
type usage struct {
	cpu      time.Duration // on a CPU (schedstat), user and system
	switches int           // voluntary and involuntary context switches
}

// procUsage sums /proc/PID/task/*/schedstat and status over the live
// threads (Go keeps its threads, so few are missed).
func procUsage(pid int) usage {
	var u usage
	dirs, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, "schedstat")); err == nil {
			if f := strings.Fields(string(b)); len(f) > 0 {
				ns, _ := strconv.ParseInt(f[0], 10, 64)
				u.cpu += time.Duration(ns)
			}
		}
		b, _ := os.ReadFile(filepath.Join(d, "status"))
		for _, line := range strings.Split(string(b), "\n") {
			name, v, ok := strings.Cut(line, ":")
			if ok && (name == "voluntary_ctxt_switches" || name == "nonvoluntary_ctxt_switches") {
				k, _ := strconv.Atoi(strings.TrimSpace(v))
				u.switches += k
			}
		}
	}
	return u
}
