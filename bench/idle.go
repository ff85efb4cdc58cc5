package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
)

// clockTick is USER_HZ, the unit of utime/stime in /proc/PID/stat; it is
// 100 on every Linux ABI Go supports.
const clockTick = 10 * time.Millisecond

// procSample is what /proc says about a process at one instant.
type procSample struct {
	cpu      time.Duration // utime + stime, all threads
	switches int64         // voluntary + involuntary context switches, summed over threads
	rssBytes float64
	threads  int
}

func readProc(pid int) (procSample, error) {
	var s procSample
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// Fields after the command name, which may contain spaces: state is
	// field 3, utime 14 and stime 15 (1-based, as in proc(5)).
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	s.cpu = time.Duration(ut+st) * clockTick
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	s.threads = len(tasks)
	for _, t := range tasks {
		s.switches += statusField(t, "voluntary_ctxt_switches") + statusField(t, "nonvoluntary_ctxt_switches")
	}
	s.rssBytes = float64(statusField(fmt.Sprintf("/proc/%d/status", pid), "VmRSS") << 10)
	return s, nil
}

// statusField reads a numeric "Name:\tvalue [kB]" line of a status file.
func statusField(path, name string) int64 {
	body, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return 0
}

// idleDelta samples both processes, sleeps for d, samples again.
func idleDelta(pids []int, d time.Duration) ([]procSample, error) {
	before := make([]procSample, len(pids))
	for i, pid := range pids {
		s, err := readProc(pid)
		if err != nil {
			return nil, err
		}
		before[i] = s
	}
	time.Sleep(d)
	out := make([]procSample, len(pids))
	for i, pid := range pids {
		s, err := readProc(pid)
		if err != nil {
			return nil, err
		}
		out[i] = procSample{cpu: s.cpu - before[i].cpu, switches: s.switches - before[i].switches, rssBytes: s.rssBytes}
	}
	return out, nil
}

// idleSection is row 9. The floor is the echo child, an idle Go process
// blocked in read(2), observed over the same window.
func idleSection(env *Env) []Row {
	c, _, err := startSidecar(env)
	if err != nil {
		return []Row{naRow("9 idle", "idle sidecar", err.Error())}
	}
	defer c.Close()
	echo, err := startEcho(env.Self)
	if err != nil {
		return []Row{naRow("9 idle", "idle floor", err.Error())}
	}
	defer echo.close()
	id, err := compileWAT(c, env.wat("well_behaved.wat"))
	if err != nil {
		return []Row{naRow("9 idle", "idle sidecar", err.Error())}
	}
	pid := c.Process().Pid
	if _, err := sequential(c, addParams(id), 0, 1); err != nil { // one run, so the worker pool has started
		return []Row{naRow("9 idle", "idle sidecar", err.Error())}
	}
	time.Sleep(200 * time.Millisecond) // let the runtime settle after the run
	window := env.dur(5*time.Second, time.Second)
	d, err := idleDelta([]int{pid, echo.cmd.Process.Pid}, window)
	if err != nil {
		return []Row{naRow("9 idle", "idle sidecar", err.Error())}
	}
	rows := idleCostRows(window, d[0], d[1])
	return append(rows, rssRows(env, c, id, pid, d[0].rssBytes)...)
}

func idleCostRows(window time.Duration, sc, floor procSample) []Row {
	w := fmt.Sprintf("%.0f s", window.Seconds())
	return []Row{
		{Section: "9 idle", Measurement: "idle CPU time over " + w, Value: fmtDur(sc.cpu), Floor: "idle Go " + fmtDur(floor.cpu),
			Target: "≤ floor + 10 ms", Verdict: judge(sc.cpu <= floor.cpu+10*time.Millisecond),
			Raw: map[string]float64{"cpu_us": us(sc.cpu), "floor_cpu_us": us(floor.cpu), "window_s": window.Seconds()}},
		{Section: "9 idle", Measurement: "idle wake-ups (context switches) over " + w, Value: fmt.Sprint(sc.switches),
			Floor: "idle Go " + fmt.Sprint(floor.switches), Target: "≤ floor + 5", Verdict: judge(sc.switches <= floor.switches+5),
			Raw: map[string]float64{"switches": float64(sc.switches), "floor_switches": float64(floor.switches)}},
	}
}

// rssRows measures resident memory idle, after 100 runs and after 10,000.
func rssRows(env *Env, c *sandboxd.Client, id string, pid int, idle float64) []Row {
	var rows []Row
	done := 1
	for _, target := range []int{100, env.n(10000, 1000)} {
		p := addParams(id)
		if _, err := pipelinedN(target-done, func() error { _, err := c.Run(context.Background(), p, nil); return err }); err != nil {
			return append(rows, naRow("9 idle", fmt.Sprintf("RSS after %d runs", target), err.Error()))
		}
		done = target
		time.Sleep(100 * time.Millisecond)
		s, err := readProc(pid)
		if err != nil {
			return append(rows, naRow("9 idle", fmt.Sprintf("RSS after %d runs", target), err.Error()))
		}
		growth := s.rssBytes - idle
		rows = append(rows, Row{Section: "9 idle", Measurement: fmt.Sprintf("RSS after %d runs", target), Value: fmtMiB(s.rssBytes),
			Floor: "idle " + fmtMiB(idle), Ratio: ratio(s.rssBytes, idle), Target: "growth ≤ 10 MiB",
			Verdict: judge(growth <= 10<<20), Raw: map[string]float64{"rss_bytes": s.rssBytes, "idle_rss_bytes": idle, "runs": float64(target)}})
	}
	return rows
}
