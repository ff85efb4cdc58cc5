package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/protocol"
)

// Host functions served by the parent (issue 20): a guest's host call goes
// guest → sidecar → parent → sidecar → guest. Row 17 measures it from each
// client on a warm instance of testdata/plugins/wat/host_relay.wat, whose
// `relay` passes 16 bytes to extism:host/user::relay until the parent
// answers empty:
//
//   - one host call's round trip: the time between two calls of the
//     parent's handler inside one `relay` call (the handler answers, the
//     guest takes the answer and calls again, the request reaches the
//     handler), p50, judged against the same client's sequential `call`
//     of `echo` (16 bytes in, 16 out), in alternating blocks;
//   - 1 MiB from the parent into the plugin through the host function
//     (`fetch`: one host call answered with 1 MiB) against the same MiB
//     sent as a call's input (`sink`), in alternating blocks;
//   - (the Go client only) 1 MiB the other way: the call's input passed
//     on to the parent as the host function's argument (`fetch` of the
//     MiB, answered empty), against the same `sink`.
//
// The Python and Node rows are measured by bench/py/hostcalls.py and
// bench/node/hostcalls.mjs the same way.

// hostRelay declares the plugin's one import.
var hostRelay = protocol.HostFunction{Module: "extism:host/user", Name: "relay",
	Params: []string{"bytes"}, Results: []string{"bytes"}}

// Targets of issue 20.
const (
	hostCallTarget = 1.5 // a host call's round trip over a plain call's
	hostMiBTarget  = 3.0 // 1 MiB through the host function over 1 MiB of input
	// hostWarm is the untimed rounds before each block of the round trip
	// and its floor; hostTripsPerCall the round trips timed in one `relay`
	// call (hostRelayer.trips says why so few).
	hostWarm         = 50
	hostTripsPerCall = 10
)

func (e *Env) hostRelayPath() string {
	return filepath.Join(e.Root, "testdata", "plugins", "wat", "host_relay.wat")
}

// hostPayloads are the 16 bytes each way and the MiB, random (so they
// travel as base64, the same for input, argument and answer).
func hostPayloads() (small, mib []byte) {
	r := rand.New(rand.NewPCG(20, 20))
	mib = make([]byte, 1<<20)
	for i := range mib {
		mib[i] = byte(r.Uint32())
	}
	return mib[:16:16], mib
}

// hostCallSection is row 17: the Go client's rows, then Python's and Node's.
func hostCallSection(env *Env) []Row {
	rows := goHostRows(env)
	rows = append(rows, pythonHostRows(env)...)
	return append(rows, nodeHostRows(env)...)
}

func goHostRows(env *Env) []Row {
	const sec = "17 go"
	c, stderr, err := startSidecar(env)
	if err != nil {
		return []Row{naRow(sec, "Go host calls", err.Error())}
	}
	defer c.Close()
	ctx := context.Background()
	in, err := instantiateHostRelay(env, c)
	if err != nil {
		return []Row{naRow(sec, "Go host calls", fmt.Sprintf("%v; stderr: %s", err, stderr))}
	}
	defer in.Release(ctx)
	small, mib := hostPayloads()
	fail := func(err error) []Row {
		return []Row{naRow(sec, "Go host calls", fmt.Sprintf("%v; stderr: %s", err, stderr))}
	}

	echo := timedBlock(func() error {
		res, err := in.Call(ctx, "echo", sandboxd.CallOptions{Input: small})
		if err == nil && (res.Output == nil || len(*res.Output) != len(small)) {
			err = fmt.Errorf("echo returned %v", res.Output)
		}
		return err
	})
	relay := &hostRelayer{in: in, small: small}
	trip, err := interleave(env.floorBlocks(), 50, hostWarm, env.n(4000, 400), echo, relay.trips)
	if err != nil {
		return fail(err)
	}
	one, err := interleave(env.floorBlocks(), 50, 5, env.n(1000, 200), echo, timedBlock(func() error { return relay.call(0) }))
	if err != nil {
		return fail(err)
	}

	sink := timedBlock(func() error {
		_, err := in.Call(ctx, "sink", sandboxd.CallOptions{Input: mib})
		return err
	})
	// fetch times a call of fetch with input, its one host call answered
	// with answer.
	fetch := func(input, answer []byte) func(warm, k int) (Sample, error) {
		host := func(context.Context, sandboxd.HostCall) ([]sandboxd.HostValue, error) {
			return []sandboxd.HostValue{sandboxd.HostBytes(answer)}, nil
		}
		return timedBlock(func() error {
			_, err := in.Call(ctx, "fetch", sandboxd.CallOptions{Input: input, Host: host})
			return err
		})
	}
	in1, err := interleave(env.floorBlocks(), 3, 1, env.n(200, 16), sink, fetch(small, mib))
	if err != nil {
		return fail(err)
	}
	// The other way: the MiB the call brings in goes out to the parent as
	// the host function's argument (answered empty), against the same
	// call bringing it in only (sink).
	out, err := interleave(env.floorBlocks(), 3, 1, env.n(200, 16), sink, fetch(mib, nil))
	if err != nil {
		return fail(err)
	}
	return hostRows(sec, "Go client", trip.Raw(), one.Raw(), in1.Raw(), out.Raw())
}

// pythonHostRows are row 17 for the Python client (py/hostcalls.py):
// the sync Sidecar's three, and the AsyncSidecar's round trip.
func pythonHostRows(env *Env) []Row {
	const sec = "17 python"
	pkg := filepath.Join(env.Root, "clients", "python", "src")
	switch {
	case !exists(filepath.Join(pkg, "sandboxd", "__init__.py")):
		return []Row{naRow(sec, "Python host calls", "clients/python/src/sandboxd is missing")}
	case !onPath("python3"):
		return []Row{naRow(sec, "Python host calls", "python3 is not on PATH")}
	}
	res, err := runScript(env, []string{"PYTHONPATH=" + pkg}, "python3", "py/hostcalls.py", env.hostScriptConfig())
	if err != nil {
		return []Row{naRow(sec, "Python host calls", err.Error())}
	}
	var rows []Row
	if e := res.errFor("seq"); e != "" {
		rows = append(rows, naRow(sec, "Python Sidecar host calls", e))
	} else {
		rows = hostRows(sec, "Python Sidecar", scriptPair(res, "seq"), scriptPair(res, "one"), scriptPair(res, "seq_mib"), nil)
	}
	if e := res.errFor("aseq"); e != "" {
		return append(rows, naRow(sec, "Python AsyncSidecar host calls", e))
	}
	return append(rows, hostRows(sec, "Python AsyncSidecar", scriptPair(res, "aseq"), nil, nil, nil)...)
}

// nodeHostRows are row 17 for the Node client (node/hostcalls.mjs).
func nodeHostRows(env *Env) []Row {
	const sec = "17 node"
	client := filepath.Join(env.Root, "clients", "node")
	dist := filepath.Join(client, "dist", "index.js")
	switch {
	case !onPath("node"):
		return []Row{naRow(sec, "Node host calls", "node is not on PATH")}
	case !exists(dist):
		return []Row{naRow(sec, "Node host calls", "clients/node/dist is missing: run `npm ci && npm run build` in clients/node")}
	}
	cfg := env.hostScriptConfig()
	cfg["dist"] = dist
	res, err := runScript(env, nil, "node", "node/hostcalls.mjs", cfg)
	if err != nil {
		return []Row{naRow(sec, "Node host calls", err.Error())}
	}
	if e, _ := res["error"].(string); e != "" {
		return []Row{naRow(sec, "Node host calls", e)}
	}
	return hostRows(sec, "Node Sidecar", scriptPair(res, "seq"), scriptPair(res, "one"), scriptPair(res, "mib"), nil)
}

// hostScriptConfig is what py/hostcalls.py and node/hostcalls.mjs take.
func (e *Env) hostScriptConfig() map[string]any {
	return map[string]any{"binary": e.Binary, "plugin": e.hostRelayPath(), "blocks": e.floorBlocks(), "warm": hostWarm, "perCall": hostTripsPerCall,
		"n": e.n(4000, 400), "nOne": e.n(1000, 200), "nMiB": e.n(200, 16)}
}

func instantiateHostRelay(env *Env, c *sandboxd.Client) (*sandboxd.Instance, error) {
	return c.Instantiate(context.Background(), sandboxd.InstantiateParams{
		Module:        protocol.ModuleSpec{Path: sandboxd.Str(env.hostRelayPath())},
		HostFunctions: []protocol.HostFunction{hostRelay},
		Limits:        map[string]uint64{"memoryBytes": 64 << 20, "outputBytes": 4 << 20, "timeoutMs": 60_000},
	})
}

// hostRelayer calls the plugin's `relay` and serves its host calls:
// `stop` of them answered with their bytes, then one answered empty
// (which ends the guest's loop), each noted when it came.
type hostRelayer struct {
	in    *sandboxd.Instance
	small []byte

	mu     sync.Mutex // the handler runs on a goroutine of its own
	stamps []time.Time
	stop   int
}

func (r *hostRelayer) serve(_ context.Context, call sandboxd.HostCall) ([]sandboxd.HostValue, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stamps = append(r.stamps, time.Now())
	if len(r.stamps) > r.stop {
		return []sandboxd.HostValue{sandboxd.HostBytes(nil)}, nil
	}
	return []sandboxd.HostValue{sandboxd.HostBytes(call.Args[0].Bytes)}, nil
}

// call is one `relay` call making stop+1 host calls.
func (r *hostRelayer) call(stop int) error {
	r.mu.Lock()
	r.stamps, r.stop = r.stamps[:0], stop
	r.mu.Unlock()
	res, err := r.in.Call(context.Background(), "relay", sandboxd.CallOptions{Input: r.small, Host: r.serve})
	if err == nil && (res.Output == nil || len(*res.Output) != len(r.small)) {
		err = fmt.Errorf("relay returned %v", res.Output)
	}
	return err
}

// trips is a block of host call round trips: `relay` calls of
// hostTripsPerCall host calls each (the first call of a block makes warm
// more), the gaps between the handler's calls within each. (In a probe
// from the Python client, the first ~50 calls right after a `relay` of
// hundreds of host calls ran up to 2× slower, which would inflate the
// floor blocks after it: short relays keep the floor honest.)
func (r *hostRelayer) trips(warm, k int) (Sample, error) {
	s := make(Sample, 0, k)
	for first := true; len(s) < k; first = false {
		skip, gaps := 0, min(hostTripsPerCall, k-len(s))
		if first {
			skip = warm
		}
		if err := r.call(skip + gaps); err != nil {
			return nil, err
		}
		r.mu.Lock()
		if len(r.stamps) != skip+gaps+1 {
			r.mu.Unlock()
			return nil, fmt.Errorf("relay made %d host calls, not %d", len(r.stamps), skip+gaps+1)
		}
		for i := skip + 1; i < len(r.stamps); i++ {
			s = append(s, r.stamps[i].Sub(r.stamps[i-1]))
		}
		r.mu.Unlock()
	}
	return s, nil
}

// pairFigures are a subject and its floor measured in alternating
// blocks, as paired.Raw and the scripts' benchlib.paired name them.
type pairFigures map[string]float64

func (f pairFigures) spread() string {
	return fmt.Sprintf("ratio: median of per-block p50 ratios, %.0f blocks, %s–%s", f["blocks"],
		formatRatio(f["ratio_min"]), formatRatio(f["ratio_max"]))
}

// scriptPair reads the figures a script printed under prefix.
func scriptPair(res scriptResult, prefix string) pairFigures {
	f := pairFigures{}
	for _, k := range []string{"p50_us", "p99_us", "floor_p50_us", "floor_p99_us", "ratio_min", "ratio_max", "blocks"} {
		f[k] = res.num(prefix + "_" + k)
	}
	f["ratio_median"] = res.num(prefix + "_ratio")
	return f
}

// hostRows are a client's rows: the host call round trip (judged), a
// call making one host call (info; only where measured) and 1 MiB through
// a host function, into the plugin and out of it (judged). A nil pair is
// not measured.
func hostRows(sec, client string, trip, one, mibIn, mibOut pairFigures) []Row {
	var rows []Row
	row := func(what, floor string, f pairFigures, target float64) {
		r := f["ratio_median"]
		row := Row{Section: sec, Measurement: client + ": " + what + ", p50", Value: fmtDur(usDur(f["p50_us"])),
			Floor: fmt.Sprintf("%s %s (interleaved)", floor, fmtDur(usDur(f["floor_p50_us"]))),
			Ratio: r, Verdict: verdictInfo, Note: f.spread(), Raw: f}
		if target > 0 {
			row.Target, row.Verdict = fmt.Sprintf("≤ %g×", target), judge(r <= target)
		}
		rows = append(rows, row)
	}
	if trip != nil {
		row("host call round trip (guest → parent → guest, 16 B each way)", "call of echo, 16 B each way:", trip, hostCallTarget)
	}
	if one != nil {
		row("a call making one such host call", "call of echo:", one, 0)
	}
	if mibIn != nil {
		row("1 MiB into the plugin as a bytes host function's answer (a call making one host call)", "call with the MiB as input:", mibIn, hostMiBTarget)
	}
	if mibOut != nil {
		row("1 MiB out of the plugin as a bytes host function's argument (the call's input relayed)", "call with the MiB as input:", mibOut, hostMiBTarget)
	}
	return rows
}
