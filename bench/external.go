package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// scriptResult is the one JSON object a Python or Node script prints last.
type scriptResult map[string]any

func (r scriptResult) num(key string) float64 {
	f, _ := r[key].(float64)
	return f
}

// errFor returns the script's own report that part of it failed.
func (r scriptResult) errFor(key string) string {
	s, _ := r[key+"_error"].(string)
	return s
}

// runScript runs interpreter script cfg (cfg as one JSON argument) and
// parses the last line of its stdout. Scripts print nothing else there.
func runScript(env *Env, extraEnv []string, interpreter, script string, cfg map[string]any) (scriptResult, error) {
	arg, _ := json.Marshal(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, interpreter, filepath.Join(env.Root, "bench", script), string(arg))
	cmd.Env = append(os.Environ(), extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %v: %s", interpreter, script, err, lastLine(stderr.String()))
	}
	var res scriptResult
	if err := json.Unmarshal([]byte(lastLine(stdout.String())), &res); err != nil {
		return nil, fmt.Errorf("%s %s: unreadable output %q", interpreter, script, lastLine(stdout.String()))
	}
	return res, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// withFloor adds the ping-pong setup of the Python and Node pipe floors to
// a client script's config: the script measures its language's floor
// against the Go echo child in blocks alternating with the client's own
// (interleave.go says why).
func withFloor(env *Env, cfg map[string]any) map[string]any {
	cfg["echo"], cfg["echoEnv"], cfg["message"], cfg["blocks"] = env.Self, echoEnv, string(floorMessage()), env.floorBlocks()
	return cfg
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// pythonSection is row 4 for the Python client.
func pythonSection(env *Env) []Row {
	const sec = "4 python"
	pkg := filepath.Join(env.Root, "clients", "python", "src")
	switch {
	case !exists(filepath.Join(pkg, "sandboxd", "__init__.py")):
		return []Row{naRow(sec, "Python client", "clients/python/src/sandboxd is missing")}
	case !onPath("python3"):
		return []Row{naRow(sec, "Python client", "python3 is not on PATH")}
	}
	cfg := withFloor(env, map[string]any{"binary": env.Binary, "wat": env.wat("well_behaved.wat"), "warm": env.n(200, 50),
		"n": env.n(2000, 200), "durationMs": env.dur(2*time.Second, 500*time.Millisecond).Milliseconds()})
	res, err := runScript(env, []string{"PYTHONPATH=" + pkg}, "python3", "py/client.py", cfg)
	if err != nil {
		return []Row{naRow(sec, "Python client", err.Error())}
	}
	rows := clientRows(env, sec, "Python", "sync Sidecar", res, "async_calls_per_s", "AsyncSidecar")
	return append(rows, pythonOwnRows(env, sec, res)...)
}

// floorRow is a client's sequential row judged against its language's
// pipe floor, both measured by the script in alternating blocks; key is
// the script's prefix ("seq", "aseq").
func floorRow(env *Env, sec, lang, name, key string, res scriptResult) Row {
	p50, f50, r := res.num(key+"_p50_us"), res.num(key+"_floor_p50_us"), res.num(key+"_ratio")
	raw := map[string]float64{"p50_us": p50, "p99_us": res.num(key + "_p99_us"), "floor_p50_us": f50,
		"floor_p99_us": res.num(key + "_floor_p99_us"), "ratio_median": r,
		"ratio_min": res.num(key + "_ratio_min"), "ratio_max": res.num(key + "_ratio_max"), "blocks": res.num(key + "_blocks")}
	return Row{Section: sec, Measurement: fmt.Sprintf("%s run add {id} sequential, p50 (p99 %s)", name, fmtDur(usDur(raw["p99_us"]))),
		Value: fmtDur(usDur(p50)), Floor: lang + " pipe " + fmtDur(usDur(f50)) + " (interleaved)", Ratio: r, Target: "≤ 2×", Verdict: judge(r <= 2),
		Note: fmt.Sprintf("ratio: median of per-block p50 ratios, %.0f blocks, %s–%s", raw["blocks"],
			formatRatio(raw["ratio_min"]), formatRatio(raw["ratio_max"])) + env.floorWarning(usDur(f50)), Raw: raw}
}

// pythonOwnRows are the AsyncSidecar's sequential round trip against the
// Python pipe floor, and what each client adds to a round trip: its p50
// minus the same run written and read by hand from Python (py/client.py's
// raw_sequential over a blocking pipe, async_raw_sequential over asyncio's
// pipe transports) and minus the Go client's (row 2), each against the same
// kind of sidecar in the same run.
func pythonOwnRows(env *Env, sec string, res scriptResult) []Row {
	var rows []Row
	if e := res.errFor("aseq"); e != "" {
		rows = append(rows, naRow(sec, "Python AsyncSidecar sequential", e))
	} else {
		rows = append(rows, floorRow(env, sec, "Python", "AsyncSidecar", "aseq", res))
	}
	goSeq := 0.0
	if len(env.GoSeq) > 0 {
		goSeq = us(env.GoSeq.P50())
	}
	for _, c := range []struct{ key, raw, name, rawName string }{
		{"seq", "raw", "sync Sidecar", "blocking"}, {"aseq", "araw", "AsyncSidecar", "asyncio"}} {
		p50, raw := res.num(c.key+"_p50_us"), res.num(c.raw+"_p50_us")
		if p50 == 0 || raw == 0 {
			continue
		}
		row := Row{Section: sec, Measurement: fmt.Sprintf("%s − raw %s JSON-RPC to the sidecar, p50", c.name, c.rawName),
			Value: fmtDur(usDur(p50 - raw)), Floor: "raw " + fmtDur(usDur(raw)), Verdict: verdictInfo,
			Raw: map[string]float64{"client_p50_us": p50, "raw_p50_us": raw, "go_client_p50_us": goSeq}}
		if goSeq > 0 {
			row.Floor += fmt.Sprintf(", − Go client: %s", fmtDur(usDur(p50-goSeq)))
		}
		rows = append(rows, row)
	}
	return rows
}

// clientRows are the two rows of a foreign client: sequential latency
// against its own language's pipe floor, and 64-in-flight throughput
// against the Go client's (row 3), the best this sidecar has shown.
func clientRows(env *Env, sec, lang, seqName string, res scriptResult, rateKey, pipeName string) []Row {
	var rows []Row
	if e := res.errFor("sync"); e != "" {
		rows = append(rows, naRow(sec, lang+" "+seqName+" sequential", e))
	} else {
		rows = append(rows, floorRow(env, sec, lang, seqName, "seq", res))
	}
	if e := res.errFor("async"); e != "" {
		return append(rows, naRow(sec, lang+" "+pipeName+" 64 in flight", e))
	}
	rate := res.num(rateKey)
	row := Row{Section: sec, Measurement: pipeName + " run add, 64 in flight", Value: fmtRate(rate), Verdict: verdictInfo,
		Raw: map[string]float64{"calls_per_s": rate, "go_calls_per_s": env.GoPipe}}
	if env.GoPipe > 0 {
		row.Floor, row.Ratio = "Go client "+fmtRate(env.GoPipe), ratio(rate, env.GoPipe)
	}
	return append(rows, row)
}

func usDur(micros float64) time.Duration { return time.Duration(micros * float64(time.Microsecond)) }

func onPath(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

// nodeSection is row 4 for the Node client. Its sequential add/fib rates
// are kept for the peer rows (10).
func nodeSection(env *Env) []Row {
	const sec = "4 node"
	client := filepath.Join(env.Root, "clients", "node")
	dist := filepath.Join(client, "dist", "index.js")
	switch {
	case !onPath("node"):
		return []Row{naRow(sec, "Node client", "node is not on PATH")}
	case !exists(dist):
		return []Row{naRow(sec, "Node client", "clients/node/dist is missing: run `npm ci && npm run build` in clients/node")}
	case !exists(filepath.Join(client, "node_modules")):
		return []Row{naRow(sec, "Node client", "clients/node/node_modules is missing: run `npm ci` in clients/node")}
	}
	reps := fibReps(env)
	cfg := withFloor(env, map[string]any{"dist": dist, "binary": env.Binary, "wat": env.wat("well_behaved.wat"), "warm": env.n(200, 50),
		"n": env.n(2000, 200), "durationMs": env.dur(1500*time.Millisecond, 400*time.Millisecond).Milliseconds(),
		"fibN": fibN, "fibReps": reps, "pluginTimeoutMs": pluginTimeoutMs, "plugins": map[string]any{
			"wat": map[string]any{"path": filepath.Join(env.Root, "testdata", "plugins", "wat", "plugin.wat"), "wasi": false},
			"go":  map[string]any{"path": filepath.Join(env.Root, "testdata", "plugins", "go", "plugin.wasm"), "wasi": true},
		}})
	res, err := runScript(env, nil, "node", "node/client.mjs", cfg)
	if err != nil {
		return []Row{naRow(sec, "Node client", err.Error())}
	}
	env.NodeClient = res
	res["sync_error"], res["async_error"] = res["error"], res["error"]
	rows := clientRows(env, sec, "Node", "Sidecar", res, "pipelined_calls_per_s", "Sidecar")
	return append(rows, nodeOwnCostRows(env, res)...)
}

// nodeOwnCostRows say what the Node client adds to a round trip: its p50
// minus raw JSON-RPC from Node to a sidecar of the same binary (measured
// in alternating blocks by client.mjs), and minus the Go client's (row 2).
func nodeOwnCostRows(env *Env, res scriptResult) []Row {
	const sec = "4 node"
	p50, rawP50 := res.num("seq_p50_us"), res.num("raw_seq_p50_us")
	if p50 == 0 || rawP50 == 0 {
		return nil
	}
	rows := []Row{{Section: sec, Measurement: "  Sidecar p50 − raw Node JSON-RPC p50 (same binary, alternating blocks)",
		Value: fmtDur(usDur(p50 - rawP50)), Floor: "raw " + fmtDur(usDur(rawP50)), Ratio: ratio(p50, rawP50), Verdict: verdictInfo,
		Raw: map[string]float64{"p50_us": p50, "raw_p50_us": rawP50}}}
	if len(env.GoSeq) > 0 {
		goP50 := float64(env.GoSeq.P50()) / float64(time.Microsecond)
		rows = append(rows, Row{Section: sec, Measurement: "  Sidecar p50 − Go client p50 (row 2)", Value: fmtDur(usDur(p50 - goP50)),
			Floor: "Go " + fmtDur(usDur(goP50)), Ratio: ratio(p50, goP50), Verdict: verdictInfo,
			Raw: map[string]float64{"p50_us": p50, "go_p50_us": goP50}})
	}
	return rows
}

// fibReps reuses row 8's calibration, or calibrates if it did not run.
func fibReps(env *Env) int {
	if env.FibReps == 0 {
		env.FibReps, _ = calibrateFibLoop(env, time.Millisecond)
	}
	return max(env.FibReps, 1)
}

// pluginTimeoutMs is the deadline of a plugin call in row 10, on both sides:
// the sidecar's per-call timeout and Extism's timeoutMs.
const pluginTimeoutMs = 1000

// nodePeerSection is row 10: the same guests through this project's Node
// client, @extism/extism and bare V8, one call at a time.
func nodePeerSection(env *Env) []Row {
	const sec = "10 peers"
	if env.NodeClient == nil {
		return []Row{naRow(sec, "Node peers", "needs the Node client row (section node)")}
	}
	dir := filepath.Join(env.Root, "bench", "node")
	if err := ensureNodeModules(dir); err != nil {
		return []Row{naRow(sec, "Node peers", err.Error())}
	}
	guests, err := writePeerGuests(env)
	if err != nil {
		return []Row{naRow(sec, "Node peers", err.Error())}
	}
	cfg := map[string]any{"wasm": guests[0], "extismWasm": guests[1], "watPlugin": guests[2], "warm": env.n(200, 50), "n": env.n(2000, 200),
		"goPlugin": filepath.Join(env.Root, "testdata", "plugins", "go", "plugin.wasm"), "pluginTimeoutMs": pluginTimeoutMs,
		"fibN": fibN, "fibReps": fibReps(env), "durationMs": env.dur(1500*time.Millisecond, 400*time.Millisecond).Milliseconds()}
	res, err := runScript(env, nil, "node", "node/peers.mjs", cfg)
	if err != nil {
		return []Row{naRow(sec, "Node peers", err.Error())}
	}
	return peerRows(env, res)
}

// peerRows compare the sidecar's sequential calls/s with each peer's.
func peerRows(env *Env, res scriptResult) []Row {
	const sec = "10 peers"
	var rows []Row
	for _, guest := range []struct{ name, key string }{{"add (trivial)", "add"}, {fmt.Sprintf("fib_loop(%d, %d) ≈1 ms", fibN, fibReps(env)), "fib"}} {
		ours := env.NodeClient.num(guest.key + "_calls_per_s")
		for _, peer := range []struct{ name, key, errKey string }{
			{"extism (no timeout: JS SDK has none)", "extism_" + guest.key, "extism"},
			{"bare V8, no limits", "v8_" + guest.key, "v8"},
		} {
			m := "Node client " + guest.name + " vs " + peer.name
			if e := res.errFor(peer.errKey); e != "" {
				rows = append(rows, naRow(sec, m, e))
				continue
			}
			theirs := res.num(peer.key + "_calls_per_s")
			rows = append(rows, Row{Section: sec, Measurement: m, Value: fmtRate(ours), Floor: fmtRate(theirs),
				Ratio: ratio(ours, theirs), Verdict: verdictInfo,
				Raw: map[string]float64{"sandboxd_calls_per_s": ours, "peer_calls_per_s": theirs}})
		}
	}
	if v := res.num("v8_instantiate_add_calls_per_s"); v > 0 {
		ours := env.NodeClient.num("add_calls_per_s")
		rows = append(rows, Row{Section: sec, Measurement: "Node client add vs V8 fresh instance per call", Value: fmtRate(ours),
			Floor: fmtRate(v), Ratio: ratio(ours, v), Verdict: verdictInfo})
	}
	return append(rows, pluginPeerRows(env, res)...)
}

// pluginPeerRows compare greet("Ada") on a warm instance through the Node
// client (deadline pluginTimeoutMs per call) with the same plugin under
// Extism's JS SDKs: 1.0.3 (no timeout option), 2.0.0-rc13 in-process (no
// timeout) and 2.0.0-rc13 with runInWorker and timeoutMs. The ratio is
// the peer's p50 over ours (above 1: we are faster).
func pluginPeerRows(env *Env, res scriptResult) []Row {
	const sec = "10 peers"
	var rows []Row
	for _, guest := range []struct{ name, key string }{{"WAT plugin", "wat"}, {"Go PDK plugin", "go"}} {
		m := "Node client plugin greet, warm instance (" + guest.name + ", timeoutMs " + fmt.Sprint(pluginTimeoutMs) + ")"
		if e := env.NodeClient.errFor("plugin_" + guest.key + "_greet"); e != "" {
			rows = append(rows, naRow(sec, m, e))
			continue
		}
		ours, oursP50 := env.NodeClient.num("plugin_"+guest.key+"_greet_calls_per_s"), env.NodeClient.num("plugin_"+guest.key+"_greet_p50_us")
		for _, peer := range []struct{ name, key string }{
			{"extism 1.0.3 in-process (no timeout: it has none)", "extism1"},
			{"extism 2.0.0-rc13 in-process (no timeout)", "extism2"},
			{fmt.Sprintf("extism 2.0.0-rc13 runInWorker, timeoutMs %d", pluginTimeoutMs), "extism2_timeout"},
		} {
			pm := m + " vs " + peer.name
			key := peer.key + "_" + guest.key + "_greet"
			if e := res.errFor(key); e != "" {
				rows = append(rows, naRow(sec, pm, e))
				continue
			}
			// p50s: on a loaded machine a rate over a window is mostly its tail
			theirs, theirsP50 := res.num(key+"_calls_per_s"), res.num(key+"_p50_us")
			rows = append(rows, Row{Section: sec, Measurement: pm + ", p50 (calls/s)",
				Value: fmt.Sprintf("%s (%s)", fmtDur(usDur(oursP50)), fmtRate(ours)),
				Floor: fmt.Sprintf("%s (%s)", fmtDur(usDur(theirsP50)), fmtRate(theirs)),
				Ratio: ratio(theirsP50, oursP50), Verdict: verdictInfo,
				Raw: map[string]float64{"sandboxd_calls_per_s": ours, "peer_calls_per_s": theirs,
					"sandboxd_p50_us": oursP50, "peer_p50_us": theirsP50}})
		}
	}
	return rows
}

// ensureNodeModules installs bench/node's pinned dependencies (extism) from
// its package-lock.json when they are missing.
func ensureNodeModules(dir string) error {
	if exists(filepath.Join(dir, "node_modules", "@extism", "extism")) && exists(filepath.Join(dir, "node_modules", "extism-next")) {
		return nil
	}
	if !onPath("npm") {
		return fmt.Errorf("bench/node/node_modules is missing and npm is not on PATH")
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("npm ci in bench/node: %v: %s", err, lastLine(string(out)))
	}
	return nil
}

// writePeerGuests converts the guests to binary for V8 and extism, which
// take no WAT: the add/fib guest, the extism guest, the WAT plugin.
func writePeerGuests(env *Env) ([]string, error) {
	var paths []string
	for _, src := range []string{env.wat("well_behaved.wat"), filepath.Join(env.Root, "bench", "node", "extism_guest.wat"),
		filepath.Join(env.Root, "testdata", "plugins", "wat", "plugin.wat")} {
		text, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		wasm, err := wasmtime.Wat2Wasm(string(text))
		if err != nil {
			return nil, fmt.Errorf("%s: %v", filepath.Base(src), err)
		}
		p := filepath.Join(env.Tmp, filepath.Base(filepath.Dir(src))+"_"+strings.TrimSuffix(filepath.Base(src), ".wat")+".wasm")
		if err := os.WriteFile(p, wasm, 0o644); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}
