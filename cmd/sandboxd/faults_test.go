package main

// Faults, with the binary built with -tags sandboxd_faults: a panic inside
// request handling, a parent that dies, a parent that stops reading.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/rpc"
)

func TestFaultPanicAnswered(t *testing.T) {
	s := startRaw(t, faultsBinPath)
	s.request("1", "sandboxd/panic", nil)
	r, _ := s.response("1", 10*time.Second)
	if r.Error == nil || r.Error.Code != rpc.CodeInternalError || !strings.Contains(r.Error.Message, "injected fault") {
		t.Errorf("sandboxd/panic: want -32603, got %s", r.raw)
	}
	s.request("2", "run", runParams(fixture("well_behaved.wat"), "add", []any{2, 40}, nil, nil))
	r, _ = s.response("2", 10*time.Second)
	if r.Error != nil || !strings.Contains(string(r.Result), `"value":42`) {
		t.Errorf("the run after the panic: %s", r.raw)
	}
	// Twice more, with a run in flight across the panic.
	s.request("3", "run", runParams(fixture("well_behaved.wat"), "fib", []any{30}, nil, nil))
	s.request("4", "sandboxd/panic", nil)
	s.request("5", "sandboxd/panic", nil)
	for _, id := range []string{"4", "5"} {
		if r, _ := s.response(id, 10*time.Second); r.Error == nil || r.Error.Code != rpc.CodeInternalError {
			t.Errorf("panic %s: %s", id, r.raw)
		}
	}
	if r, _ := s.response("3", 10*time.Second); r.Error != nil || !strings.Contains(string(r.Result), `"value":832040`) {
		t.Errorf("the run across the panics: %s", r.raw)
	}
	if !strings.Contains(s.stderr.String(), "panic") {
		t.Errorf("the panic is not logged on stderr")
	}
	// Release build: the method does not exist.
	rel := startRaw(t, binPath)
	rel.request("1", "sandboxd/panic", nil)
	if r, _ := rel.response("1", 10*time.Second); r.Error == nil || r.Error.Code != rpc.CodeMethodNotFound {
		t.Errorf("release build: sandboxd/panic should be unknown (-32601), got %s", r.raw)
	}
}

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER

// The parent is SIGKILLed while the sidecar runs an endless guest with
// timeoutMs 500: the sidecar must notice (stdin EOF, stdout EPIPE) and
// exit, not linger.
func TestFaultParentDeath(t *testing.T) {
	// Orphans are re-parented to us, so we can reap the sidecar and see it
	// leave (PID 1 here may not reap zombies).
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		t.Logf("PR_SET_CHILD_SUBREAPER: %v (falling back to zombie detection)", errno)
	}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "sidecar.pid")
	stderrFile, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderrFile.Close()
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"=parent", helperBinEnv+"="+faultsBinPath,
		helperPIDFileEnv+"="+pidFile, helperLoopEnv+"="+fixture("infinite_loop.wat"))
	helper.Stderr = stderrFile
	helper.Stdout = stderrFile
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	deadline := time.Now().Add(90 * time.Second) // the helper gives up after a minute
	for pid == 0 {
		if b, err := os.ReadFile(pidFile); err == nil {
			pid, _ = strconv.Atoi(string(b))
		}
		if time.Now().After(deadline) {
			_ = helper.Process.Kill()
			_ = helper.Wait()
			out, _ := os.ReadFile(stderrFile.Name())
			t.Fatalf("the helper never reported the sidecar's PID; its output:\n%s", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })

	killed := time.Now()
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	var status syscall.WaitStatus
	gone := false
	// A lingering sidecar never leaves; the bound only detects that.
	for time.Since(killed) < time.Minute {
		wpid, err := syscall.Wait4(pid, &status, syscall.WNOHANG, nil)
		if wpid == pid || (err != nil && errors.Is(err, syscall.ECHILD) && processGone(pid)) || processGone(pid) {
			gone = true
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(killed)
	out, _ := os.ReadFile(stderrFile.Name())
	if !gone {
		t.Fatalf("the sidecar (pid %d) still runs %v after its parent died; stderr:\n%s", pid, took, out)
	}
	t.Logf("parent SIGKILL to sidecar exit: %v (guest fence at 500 ms from run start; exit status %d)",
		took.Round(time.Millisecond), status.ExitStatus())
}

// The parent stops reading while runs flood host::log: memory stays
// bounded, the runs still time out on time, and once the parent reads,
// each run's logs arrive in order before its response.
func TestFaultStalledParent(t *testing.T) {
	s := startRaw(t, faultsBinPath, "--max-concurrency", "2")
	pid := s.pid()
	s.statsRaw(`"warm"`) // the process is up and serving
	base, err := vmRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	runs := 6
	if testing.Short() {
		runs = 4
	}
	var ids []string
	for i := 0; i < runs; i++ {
		id := fmt.Sprintf(`"flood-%d"`, i)
		ids = append(ids, id)
		s.request(id, "run", runParams(fixture("log_flood.wat"), "", nil,
			map[string]uint64{"logBytes": 1 << 20, "timeoutMs": 200}, map[string]any{"log": true}))
	}
	// Not reading for ~1 s (the stall), sampling RSS.
	var peak uint64
	stallEnd := time.Now().Add(time.Second)
	for time.Now().Before(stallEnd) {
		if rss, err := vmRSS(pid); err == nil && rss > peak {
			peak = rss
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("VmRSS: %s at start, peak %s while the parent did not read (%d flooding runs, logBytes 1 MiB each)",
		mib(base), mib(peak), runs)
	if peak > 300<<20 {
		t.Errorf("VmRSS peaked at %s while the parent stalled (bound 300 MiB)", mib(peak))
	}
	for _, id := range ids {
		r, _ := s.response(id, 30*time.Second)
		if r.Error == nil || r.Error.Code != 3 || r.kind() != "timeout" {
			t.Errorf("run %s: want timeout, got %s", id, trunc(r.raw))
		}
	}
	st := s.statsRaw(`"stats"`)
	if st.Runs["timeout"] != uint64(runs) {
		t.Errorf("stats timeout %d, want %d", st.Runs["timeout"], runs)
	}
	msgs := s.all()
	total := 0
	for _, id := range ids {
		lines := checkLogOrder(t, msgs, id)
		total += len(lines)
		if len(lines) == 0 || len(lines) > 1049 {
			t.Errorf("run %s: %d lines, want 1..1048 (logBytes 1 MiB of 1000-byte lines)", id, len(lines))
		}
	}
	t.Logf("%d log notifications in all", total)
}
