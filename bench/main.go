// Command bench is sandboxd's benchmark harness (`make bench`). It measures
// the sidecar from its Go, Python and Node clients and prints one table in
// which every headline is a ratio against a floor (raw pipe ping-pong, the
// in-process engine) or a peer (one process per run, extism, bare V8)
// measured in the same run, so the verdicts survive a noisy or slow
// machine. Results also go to bench/results.json.
//
//	go run ./bench            # full run, a few minutes
//	go run ./bench -quick     # smoke run with small counts
//	go run ./bench -only cold,cache
package main

import (
	"flag"
	"fmt"
	"github.com/sandboxd/sandboxd/sandbox"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Env is what every section needs: where things are and how hard to try.
type Env struct {
	Root       string // repository root
	Binary     string // the sandboxd binary under test
	Self       string // this harness's executable, re-run as the echo child
	Tmp        string // scratch directory, removed at exit
	Quick      bool
	GoFloor    Sample       // row 1, measured once at the start (the judged rows interleave their own: interleave.go)
	echo       *echoChild   // row 1's echo child, kept for the floor blocks of rows 2 and 13
	GoSeq      Sample       // row 2, reused by the cold-start comparison
	FibReps    int          // row 8 calibration, reused by the Node peers
	GoPipe     float64      // row 3 calls/s, the peer of the other clients' pipelining
	NodeClient scriptResult // row 4 Node output, reused by row 10
	ServeArgs  []string     // extra `serve` flags for the Go client's sidecars (-serve-args)
}

// n picks the full or the -quick count of iterations.
func (e *Env) n(full, quick int) int {
	if e.Quick {
		return quick
	}
	return full
}

// dur picks the full or the -quick duration of a timed loop.
func (e *Env) dur(full, quick time.Duration) time.Duration {
	if e.Quick {
		return quick
	}
	return full
}

func (e *Env) wat(name string) string { return filepath.Join(e.Root, "testdata", "wat", name) }

// section is one block of the table.
type benchSection struct {
	name string
	run  func(*Env) []Row
}

var sections = []benchSection{
	{"floor", floorSection},
	{"go", goClientSection},
	{"cold", coldStartSection},
	{"cache", compileCacheSection},
	{"deadline", deadlineSection},
	{"scaling", scalingSection},
	{"idle", idleSection},
	{"python", pythonSection},
	{"node", nodeSection},
	{"peers", nodePeerSection},
	{"instances", instanceSection},
	{"wasi", wasiSection},
	{"instwire", instanceWireSection},
	{"memory", memorySection},
	{"mcp", mcpSection},
	{"snippets", snippetSection}, // snippets.go
}

func main() {
	if sandbox.IsCompileChild() { // the in-process engine's compile fence
		os.Exit(sandbox.CompileChildMain())
	}
	if os.Getenv(echoEnv) != "" {
		echoMain()
		return
	}
	quick := flag.Bool("quick", false, "small counts: a smoke run in well under a minute")
	only := flag.String("only", "", "comma-separated sections to run (default all): "+sectionNames())
	out := flag.String("json", "", "where to write the results (default bench/results.json)")
	serveArgs := flag.String("serve-args", "", "extra flags for the sidecars the Go client starts, space-separated (e.g. \"--cpuprofile /tmp/cpu.prof\")")
	loop := flag.String("loop", "", "instead of the table, one loop to profile: floor, run, call (sequential) or pipe (64 in flight); prints CPU and context switches per round trip of both processes")
	loopN := flag.Int("loop-n", 100000, "round trips of a sequential -loop")
	loopDur := flag.Duration("loop-d", 3*time.Second, "duration of -loop pipe")
	cpuProfile := flag.String("cpuprofile", "", "with -loop: write this process's (the client's) CPU profile here")
	traceFile := flag.String("trace", "", "with -loop: write this process's (the client's) execution trace here")
	flag.Parse()
	env, err := newEnv(*quick)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	env.ServeArgs = strings.Fields(*serveArgs)
	defer os.RemoveAll(env.Tmp)
	defer env.closeEcho()
	if *loop != "" {
		if err := profileLoop(env, *loop, *loopN, *loopDur, *cpuProfile, *traceFile); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *out == "" {
		*out = filepath.Join(env.Root, "bench", "results.json")
	}
	start := time.Now()
	res := runSections(env, *only)
	fmt.Printf("\nsandboxd benchmarks — %s, %d CPUs, %s/%s, %s%s\n\n", runtime.Version(), runtime.NumCPU(),
		runtime.GOOS, runtime.GOARCH, time.Since(start).Round(time.Second), map[bool]string{true: ", -quick"}[*quick])
	res.Print(os.Stdout)
	meta := map[string]any{"go": runtime.Version(), "cpus": runtime.NumCPU(), "quick": *quick,
		"binary": env.Binary, "date": time.Now().UTC().Format(time.RFC3339), "seconds": time.Since(start).Seconds()}
	if err := res.WriteJSON(*out, meta); err != nil {
		fmt.Fprintln(os.Stderr, "bench: writing results:", err)
		os.Exit(1)
	}
	fmt.Println("results written to", *out)
}

// runSections runs the chosen sections in order. The floor always runs
// because the Go rows are ratios against it.
func runSections(env *Env, only string) *Results {
	want := map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			want[s] = true
		}
	}
	res := &Results{}
	for _, s := range sections {
		if len(want) > 0 && !want[s.name] && s.name != "floor" {
			continue
		}
		t := time.Now()
		fmt.Fprintf(os.Stderr, "bench: %-8s ...", s.name)
		rows := s.run(env)
		fmt.Fprintf(os.Stderr, " %s\n", time.Since(t).Round(10*time.Millisecond))
		res.add(rows...)
	}
	return res
}

func (e *Env) closeEcho() {
	if e.echo != nil {
		e.echo.close()
	}
}

func sectionNames() string {
	var names []string
	for _, s := range sections {
		names = append(names, s.name)
	}
	return strings.Join(names, ",")
}

func newEnv(quick bool) (*Env, error) {
	root, err := findRoot()
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	bin := os.Getenv("SANDBOXD_BIN")
	if bin == "" {
		bin = filepath.Join(root, "bin", "sandboxd")
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("no sandboxd binary at %s: run `make build` (or `make bench`)", bin)
	}
	tmp, err := os.MkdirTemp("", "sandboxd-bench-")
	if err != nil {
		return nil, err
	}
	return &Env{Root: root, Binary: bin, Self: self, Tmp: tmp, Quick: quick}, nil
}

// findRoot walks up from the working directory to the module's go.mod.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		body, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(body), "module github.com/sandboxd/sandboxd\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("not inside the sandboxd repository")
		}
		dir = parent
	}
}

// floorSection is row 1. Its echo child stays up for the run: rows 2 and
// 13 measure their floor on it, in blocks alternating with theirs.
func floorSection(env *Env) []Row {
	child, err := startEcho(env.Self)
	if err != nil {
		return []Row{naRow("1 floor", "Go↔Go raw pipe ping-pong", err.Error())}
	}
	env.echo = child
	s, err := child.pingPong(floorMessage(), env.n(500, 100), env.n(5000, 500))
	if err != nil {
		return []Row{naRow("1 floor", "Go↔Go raw pipe ping-pong", err.Error())}
	}
	env.GoFloor = s
	return []Row{{
		Section: "1 floor", Measurement: fmt.Sprintf("Go↔Go pipe ping-pong, %d B framed, p50", len(floorMessage())+22),
		Value: fmtDur(s.P50()), Floor: "p99 " + fmtDur(s.P99()), Verdict: verdictInfo,
		Raw: map[string]float64{"p50_us": us(s.P50()), "p99_us": us(s.P99())},
	}}
}
