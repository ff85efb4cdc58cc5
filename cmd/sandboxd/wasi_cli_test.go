package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// wasiGuest is a guest of testdata/wasi (see docs/wasi.md for its modes).
func wasiGuest(name string) string {
	return filepath.Join(filepath.Dir(watDir), "wasi", name)
}

// runWASICLI runs `sandboxd run ARGS...` with stdin. A run that sets no
// deadline or compile limit gets hang bounds (hangFlags): the defaults
// would make a Go guest's compile and start-up on a loaded machine a speed
// check.
func runWASICLI(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	args = append(hangFlags(args), args...) // flags first: never after a "--"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, append([]string{"run"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("sandboxd run %s: did not finish within 60 s", strings.Join(args, " "))
	}
	return cliResult{stdout: stdout.String(), stderr: stderr.String(), code: exitCode(err)}
}

func TestCLIWASI(t *testing.T) {
	c := wasiGuest("guest_c.wasm")
	t.Run("stdin to stdout, nothing of ours mixed in", func(t *testing.T) {
		in := "line one\nbytes \x01\x02\n"
		r := runWASICLI(t, in, c, "--wasi", "--", "echo")
		wantCode(t, r, 0)
		if r.stdout != in || r.stderr != "18 bytes\n" {
			t.Errorf("%s", r)
		}
	})
	t.Run("args after --, flags included", func(t *testing.T) {
		r := runWASICLI(t, "", c, "--wasi", "--", "args", "-x", "--wasi", "two words")
		wantCode(t, r, 0)
		if r.stdout != "-x\n--wasi\ntwo words\n" {
			t.Errorf("%s", r)
		}
	})
	t.Run("env is exactly the flags", func(t *testing.T) {
		r := runWASICLI(t, "", c, "--wasi", "--env", "B=two", "--env", "A=1", "--", "env")
		wantCode(t, r, 0)
		if r.stdout != "A=1\nB=two\n" {
			t.Errorf("%s", r)
		}
	})
	t.Run("exit code", func(t *testing.T) {
		wantCode(t, runWASICLI(t, "", c, "--wasi", "--", "exit", "42"), 42)
	})
	t.Run("dirs and files", func(t *testing.T) {
		dir := t.TempDir()
		host := filepath.Join(dir, "in.txt")
		if err := os.WriteFile(host, []byte("from a file\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r := runWASICLI(t, "", c, "--wasi", "--file", "/data/in.txt="+host, "--", "cat", "/data/in.txt")
		if wantCode(t, r, 0); r.stdout != "from a file\n" {
			t.Errorf("%s", r)
		}
		r = runWASICLI(t, "", c, "--wasi", "--dir", dir+":/out:rw", "--", "write", "/out/new.txt", "written")
		if wantCode(t, r, 0); r.stdout != "written" {
			t.Errorf("%s", r)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "new.txt")); err != nil || string(b) != "written" {
			t.Errorf("host file %q, %v", b, err)
		}
		r = runWASICLI(t, "", c, "--wasi", "--dir", dir+":/out", "--", "write", "/out/other.txt", "x")
		wantCode(t, r, 1) // read-only by default
		if _, err := os.Stat(filepath.Join(dir, "other.txt")); !os.IsNotExist(err) {
			t.Errorf("a read-only dir was written: %v", err)
		}
		r = runWASICLI(t, "", c, "--wasi", "--dir", filepath.Join(dir, "missing"), "--", "env")
		if wantCode(t, r, 1); !strings.Contains(r.stderr, "not an existing directory") {
			t.Errorf("%s", r)
		}
	})
	t.Run("sleep past the deadline", func(t *testing.T) {
		r := runWASICLI(t, "", c, "--wasi", "--timeout-ms", "300", "--", "sleep", "30000")
		if wantCode(t, r, 3); r.stdout != "" || !strings.Contains(r.stderr, "deadline of 300 ms exceeded") {
			t.Errorf("%s", r)
		}
	})
	t.Run("refused without --wasi, naming every WASI import", func(t *testing.T) {
		r := runWASICLI(t, "", wasiGuest("guest_go.wasm"), "--invoke", "_start")
		wantCode(t, r, 5)
		for _, fn := range []string{"fd_write", "proc_exit", "poll_oneoff", "args_get"} {
			if !strings.Contains(r.stderr, fn) {
				t.Errorf("refusal does not name %s: %s", fn, r)
			}
		}
	})
	t.Run("--json prints the result with the output inside", func(t *testing.T) {
		r := runWASICLI(t, "in", c, "--wasi", "--json", "--", "echo")
		wantCode(t, r, 0)
		var res struct {
			ExitCode *int              `json:"exitCode"`
			Stdout   map[string]string `json:"stdout"`
			Stderr   map[string]string `json:"stderr"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.ExitCode == nil || *res.ExitCode != 0 ||
			res.Stdout["text"] != "in" || res.Stderr["text"] != "2 bytes\n" || r.stderr != "" {
			t.Errorf("%s", r)
		}
		r = runWASICLI(t, "", c, "--wasi", "--json", "--timeout-ms", "2000", "--", "tick", "100", "100000")
		wantCode(t, r, 3)
		if !strings.Contains(r.stdout, `"kind":"timeout"`) || !strings.Contains(r.stdout, `"stdout":{"text":"tick 1\n"}`) {
			t.Errorf("%s", r)
		}
	})
	t.Run("Go hello-world", func(t *testing.T) {
		r := runWASICLI(t, "", wasiGuest("guest_go.wasm"), "--wasi", "--", "hello")
		if wantCode(t, r, 0); r.stdout != "hello from Go\n" || r.stderr != "" {
			t.Errorf("%s", r)
		}
	})
}

// The guest's output streams through as it is written: the first tick is
// read while the guest is still running, then SIGINT cancels it asleep.
func TestCLIWASIStreams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, "run", wasiGuest("guest_c.wasm"), "--wasi", "--timeout-ms", "600000", "--fuel", "1000000000000", "--", "tick", "100000", "100")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReader(stdout)
	for _, want := range []string{"tick 1\n", "tick 2\n"} {
		line, err := lines.ReadString('\n')
		if err != nil || line != want {
			t.Fatalf("read %q (%v), want %q; stderr %s", line, err, want, stderr.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	rest, _ := bufio.NewReader(lines).ReadString(0)
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatal("the interrupted guest kept running")
	}
	if code := exitCode(err); code != 9 || !strings.Contains(stderr.String(), "cancelled") {
		t.Errorf("exit %d, stderr %q, rest of stdout %q", code, stderr.String(), rest)
	}
}

// TestCLIWASIInvalidExitStatus: a proc_exit status WASI does not allow
// (wasmtime refuses 126 and up) is the guest's trap, in one line with no
// wasm backtrace, not a host failure.
func TestCLIWASIInvalidExitStatus(t *testing.T) {
	wat := filepath.Join(t.TempDir(), "exit255.wat")
	if err := os.WriteFile(wat, []byte(`(module (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
	  (memory (export "memory") 1)
	  (func (export "_start") (call $exit (i32.const 255))))`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runWASICLI(t, "", wat, "--wasi")
	wantCode(t, r, 8)
	if !strings.Contains(r.stderr, "proc_exit with a status outside 0..125") || strings.Contains(r.stderr, "backtrace") {
		t.Errorf("%s", r)
	}
}

// openerGuest opens its first preopen (fd 3) as "." until path_open
// fails, then exits with that errno.
const openerGuest = `(module
  (import "wasi_snapshot_preview1" "path_open" (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) ".")
  (func (export "_start") (local $e i32)
    (loop $l
      (local.set $e (call $open (i32.const 3) (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 2) (i64.const 0) (i64.const 0) (i32.const 0) (i32.const 16)))
      (br_if $l (i32.eqz (local.get $e))))
    (call $exit (local.get $e))))`

// TestCLIMaxOpenFiles: --max-open-files bounds a WASI guest's open
// descriptors; past it path_open answers EMFILE (33), which this guest
// exits with. Without it the default (1,024) holds.
func TestCLIMaxOpenFiles(t *testing.T) {
	guest := writeGuest(t, "opener.wat", openerGuest)
	dir := t.TempDir()
	for _, extra := range [][]string{{"--max-open-files", "20"}, nil} {
		args := append([]string{guest, "--wasi", "--dir", dir + ":/d"}, extra...)
		if r := runWASICLI(t, "", args...); r.code != 33 {
			t.Errorf("sandboxd run %q: %s; want the guest's exit with EMFILE (33)", args, r)
		}
	}
	if r := runWASICLI(t, "", guest, "--wasi", "--max-open-files", "0"); r.code != exitUsage || !strings.Contains(r.stderr, "--max-open-files: must be > 0") {
		t.Errorf("--max-open-files 0: %s", r)
	}
}

// TestCLIWASIStdinNeverClosed: `run --wasi` reads its stdin to the end
// before the guest starts; a stdin that stays open no longer holds it
// deaf to SIGINT (exit 9) or to its deadline (exit 3, the deadline
// counting from the read). It was still running 10 s after SIGINT.
func TestCLIWASIStdinNeverClosed(t *testing.T) {
	guest := wasiGuest("guest_c.wasm")
	for _, c := range []struct {
		args []string
		sig  bool
		want int
	}{
		{[]string{"--timeout-ms", "60000"}, true, 9},
		{[]string{"--timeout-ms", "300"}, false, 3},
	} {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		args := append(append([]string{"run", guest, "--wasi"}, c.args...), "--", "echo")
		cmd := exec.Command(binPath, args...)
		cmd.Stdin = pr
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pr.Close()
		if c.sig {
			time.Sleep(300 * time.Millisecond) // into the read (a hang bound follows, not a timing check)
			cmd.Process.Signal(os.Interrupt)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if code := exitCode(err); code != c.want {
				t.Errorf("%q with stdin open: exit %d, want %d; stderr %q", c.args, code, c.want, stderr.String())
			}
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			t.Errorf("%q with stdin open: still running after a minute", c.args)
		}
		pw.Close()
	}
}
