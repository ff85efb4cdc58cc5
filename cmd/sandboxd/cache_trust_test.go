package main

// The compile cache (--cache-dir) and the sidecar's trust in it: a
// directory another user could change is refused at start; a FIFO
// planted as a cache file neither hangs a run nor keeps the sidecar alive
// after its parent closes stdin.

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCacheDirOthersCanWriteIsRefused: serve and mcp refuse to start on a
// --cache-dir or a --runtimes directory that group or others can write,
// or one below a parent anyone can write, naming the directory and the
// fix.
func TestCacheDirOthersCanWriteIsRefused(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open")
	shared := filepath.Join(base, "shared")
	for _, d := range []string{open, shared} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ flag, dir, names string }{
		{"--cache-dir", open, open}, {"--cache-dir", filepath.Join(shared, "cache"), shared},
		{"--runtimes", open, open}, {"--runtimes", filepath.Join(shared, "runtimes"), shared},
	} {
		if c.flag == "--runtimes" {
			if err := os.MkdirAll(c.dir, 0o755); err != nil { // a runtimes' directory that does not exist is not checked
				t.Fatal(err)
			}
		}
		for _, cmdName := range []string{"serve", "mcp"} {
			cmd := exec.Command(binPath, cmdName, c.flag, c.dir)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run() // stdin is /dev/null: a server that started would end at once, status 0
			if code := exitCode(err); code != 1 || !strings.Contains(stderr.String(), c.names) || !strings.Contains(stderr.String(), "chmod go-w "+c.names) {
				t.Errorf("%s %s %s: status %d, stderr %q; want 1 and a message naming %s and the fix", cmdName, c.flag, c.dir, code, stderr.String(), c.names)
			}
		}
	}
}

// TestCacheFIFODoesNotHangTheSidecar: a sidecar whose parent closes
// stdin while a run may be opening a FIFO planted as the module's .meta
// in --cache-dir exits, answering the run once; and the FIFO is a cache
// miss: the run is answered, the module compiled again and the FIFO
// replaced.
func TestCacheFIFODoesNotHangTheSidecar(t *testing.T) {
	dir := t.TempDir()
	answer := wasmModule([]byte{0, 1, 0x7f}, false, []byte{0, 0x41, 42}) // run() = 42
	first := startRaw(t, binPath, "--cache-dir", dir)
	first.startReading()
	first.request("1", "run", map[string]any{"module": wasmSpec(answer)})
	if m, _ := first.response("1", 60*time.Second); m.Error != nil || !strings.Contains(string(m.Result), `"value":42`) {
		t.Fatalf("first sidecar: %s", m.raw)
	}
	metas, _ := filepath.Glob(filepath.Join(dir, "*", "*.meta"))
	if len(metas) != 1 {
		t.Fatalf("cache dir holds %v, want one module's .meta", metas)
	}
	plantFIFO := func() {
		t.Helper()
		if err := os.Remove(metas[0]); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(metas[0], 0o600); err != nil {
			t.Fatal(err)
		}
	}

	plantFIFO()
	atEOF := startRaw(t, binPath, "--cache-dir", dir)
	atEOF.startReading()
	atEOF.request("1", "run", map[string]any{"module": wasmSpec(answer)})
	atEOF.stdin.Close()
	if _, _, killed := atEOF.wait(30 * time.Second); killed {
		t.Fatalf("the sidecar did not exit after stdin closed; killed. stderr:\n%s", atEOF.stderr.String())
	}
	if n := atEOF.responsesByID()["1"]; n != 1 {
		t.Errorf("the run got %d responses, want 1: %v", n, atEOF.responsesByID())
	}

	plantFIFO()
	again := startRaw(t, binPath, "--cache-dir", dir)
	again.startReading()
	again.request("1", "run", map[string]any{"module": wasmSpec(answer)})
	if m, _ := again.response("1", 60*time.Second); m.Error != nil || !strings.Contains(string(m.Result), `"value":42`) {
		t.Fatalf("with a FIFO as the .meta: %s", m.raw)
	}
	if fi, err := os.Lstat(metas[0]); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the FIFO was not replaced by the new .meta: %v %v", fi.Mode(), err)
	}
}
