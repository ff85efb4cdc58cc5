package main

// Regression tests of the compile fences (issue 10, items 2, 6 and 7)
// through the real binary: the caller's module is validated before it is
// rewritten, module.path reads only bounded regular files and never
// quotes them, and compiling is bounded in time and memory, cancellable
// and kept apart from runs of modules already compiled.

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ---------------------------------------------------------------------------
// A minimal wasm assembler, so the tests build hostile modules in memory
// instead of committing them.

func uleb(n uint64) []byte {
	var out []byte
	for {
		b := byte(n & 0x7f)
		n >>= 7
		if n == 0 {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}

func wasmSection(id byte, body []byte) []byte {
	return append(append([]byte{id}, uleb(uint64(len(body)))...), body...)
}

// wasmModule assembles a module of one function of type typ (its
// encoding after 0x60), exported as "run", with an optional memory of one
// page, whose code is body (locals and instructions, without the final end).
func wasmModule(typ []byte, memory bool, body []byte) []byte {
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = append(m, wasmSection(1, append([]byte{1, 0x60}, typ...))...)
	m = append(m, wasmSection(3, []byte{1, 0})...)
	if memory {
		m = append(m, wasmSection(5, []byte{1, 0, 1})...)
	}
	m = append(m, wasmSection(7, []byte{1, 3, 'r', 'u', 'n', 0, 0})...)
	fn := append(append([]byte{}, body...), 0x0b)
	return append(m, wasmSection(10, append(append([]byte{1}, uleb(uint64(len(fn)))...), fn...))...)
}

// nestedLoops is the compile bomb of the issue: run() is n nested empty
// loops (3 bytes each), cheap to send and very expensive for Cranelift.
// salt makes the bytes, and so the module id, differ.
func nestedLoops(n int, salt uint64) []byte {
	body := []byte{0}
	body = append(body, []byte(strings.Repeat("\x03\x40", n))...)
	body = append(body, []byte(strings.Repeat("\x0b", n))...)
	body = append(body, 0x41)
	body = append(body, uleb(salt&0x3f)...) // i32.const salt (one-byte sleb)
	body = append(body, 0x1a)               // drop
	return wasmModule([]byte{0, 0}, false, body)
}

func wasmSpec(wasm []byte) map[string]any {
	return map[string]any{"wasm": base64.StdEncoding.EncodeToString(wasm)}
}

// errorOf returns the kind, message and data of a response that must be
// an error.
func errorOf(t *testing.T, m *message) (kind, msg string, data map[string]any) {
	t.Helper()
	if m == nil {
		t.Fatal("no response")
	}
	if m.Error == nil {
		t.Fatalf("want an error, got %s", trunc(m.raw))
	}
	_ = json.Unmarshal(m.Error.Data, &data)
	return m.kind(), m.Error.Message, data
}

// ---------------------------------------------------------------------------
// Validation before the rewrite (issue 10 item 2)

// TestForgedGlobalIndexIsRefused: a module that names a global past its
// own count is invalid. Before validation was unconditional, the rewrite
// appended its control globals and such an index reached them: this
// module forged a memory_limit_exceeded for a divide by zero.
func TestForgedGlobalIndexIsRefused(t *testing.T) {
	s := startRaw(t, binPath)
	s.startReading()
	body := []byte{0,
		0x41, 1, 0x40, 0, 0x1a, // drop (memory.grow (i32.const 1))
		0x42, 7, 0x24, 1, // global.set 1 (i64.const 7): there is no global 1
		0x41, 1, 0x41, 0, 0x6d, // i32.div_s 1 0
	}
	forged := wasmModule([]byte{0, 1, 0x7f}, true, body)
	forgedWAT := `(module (memory 1)
	  (func (export "run") (result i32)
	    (drop (memory.grow (i32.const 1)))
	    (global.set 1 (i64.const 78187462656))
	    (i32.div_s (i32.const 1) (i32.const 0))))`
	for i, mod := range []map[string]any{wasmSpec(forged), {"wat": forgedWAT}} {
		for j, method := range []string{"run", "compile"} {
			id := string(rune('1' + 2*i + j))
			s.request(id, method, map[string]any{"module": mod})
			m, _ := s.response(id, 60*time.Second)
			kind, msg, _ := errorOf(t, m)
			if kind != "invalid_module" || !strings.Contains(msg, "global") {
				t.Errorf("%s of the forged module (%v): kind %q message %q, want invalid_module naming the global", method, i, kind, msg)
			}
			if strings.Contains(strings.ToLower(msg), "backtrace") {
				t.Errorf("message carries a backtrace: %q", msg)
			}
		}
	}
}

// ---------------------------------------------------------------------------
// module.path (issue 10 item 7)

// TestModulePathReadsOnlyBoundedRegularFiles: a path that is a secret, a
// device, a FIFO or a directory is refused promptly, without quoting any
// file content, and the sidecar keeps serving. On the code before the
// fix, /proc/self/environ came back in the error, /dev/zero grew the
// sidecar without bound and the FIFO blocked a worker forever.
func TestModulePathReadsOnlyBoundedRegularFiles(t *testing.T) {
	const secret = "s3cr3t-token-do-not-echo"
	t.Setenv("SANDBOXD_TEST_SECRET", secret)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	secretFile := filepath.Join(dir, "secret.wat")
	if err := os.WriteFile(secretFile, []byte("API_KEY="+secret+"\n(module)\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	passwd, _ := os.ReadFile("/etc/passwd")
	firstLine, _, _ := strings.Cut(string(passwd), "\n")

	s := startRaw(t, binPath)
	s.startReading()
	cases := []struct{ path, inMsg string }{
		{"/proc/self/environ", "pseudo-file system"},
		{"/dev/zero", "character device"},
		{fifo, "FIFO"},
		{dir, "directory"},
		{secretFile, "neither a wasm binary nor valid WAT"},
		{"/etc/passwd", "neither a wasm binary nor valid WAT"},
		{filepath.Join(dir, "missing.wasm"), "no such file"},
	}
	for i, tc := range cases {
		id := strconv.Itoa(i + 1)
		s.request(id, "run", map[string]any{"module": map[string]any{"path": tc.path}})
		m, _ := s.response(id, 60*time.Second)
		_, msg, _ := errorOf(t, m)
		if !strings.Contains(msg, tc.inMsg) || !strings.Contains(msg, tc.path) {
			t.Errorf("%s: message %q, want it to name the path and say %q", tc.path, msg, tc.inMsg)
		}
		raw := string(m.raw)
		if strings.Contains(raw, secret) || (firstLine != "" && strings.Contains(raw, firstLine)) {
			t.Errorf("%s: the response quotes file content: %s", tc.path, raw)
		}
	}
	s.request("100", "run", map[string]any{"module": map[string]any{"path": fixture("well_behaved.wat")}, "function": "add", "args": []int{2, 40}})
	if m, _ := s.response("100", 60*time.Second); m == nil || m.Error != nil || !strings.Contains(string(m.Result), `"value":42`) {
		t.Fatalf("the sidecar does not serve a good path afterwards: %v", m)
	}
	if rss, err := vmRSS(s.pid()); err == nil && rss > 1<<30 {
		t.Errorf("sidecar RSS %s after the path attacks", mib(rss))
	}
}

// TestAllowPathDir: with --allow-path-dir, only files inside the given
// directories are read, whatever symlinks or ".." the path goes through;
// a symlinked allowed directory works through its real location.
func TestAllowPathDir(t *testing.T) {
	root := t.TempDir()
	allowed, outside := filepath.Join(root, "allowed"), filepath.Join(root, "outside")
	for _, d := range []string{allowed, outside} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	wat, err := os.ReadFile(fixture("well_behaved.wat"))
	if err != nil {
		t.Fatal(err)
	}
	inside, escaped := filepath.Join(allowed, "ok.wat"), filepath.Join(outside, "no.wat")
	for _, p := range []string{inside, escaped} {
		if err := os.WriteFile(p, wat, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(allowed, "link.wat")
	if err := os.Symlink(escaped, link); err != nil {
		t.Fatal(err)
	}
	dirLink := filepath.Join(root, "via-link")
	if err := os.Symlink(allowed, dirLink); err != nil {
		t.Fatal(err)
	}
	s := startRaw(t, binPath, "--allow-path-dir", dirLink)
	s.startReading()
	cases := []struct {
		path string
		ok   bool
	}{
		{inside, true},
		{filepath.Join(dirLink, "ok.wat"), true},
		{link, false},
		{filepath.Join(allowed, "..", "outside", "no.wat"), false},
		{escaped, false},
		{"/etc/passwd", false},
	}
	for i, tc := range cases {
		id := strconv.Itoa(i + 1)
		s.request(id, "run", map[string]any{"module": map[string]any{"path": tc.path}, "function": "add", "args": []int{2, 40}})
		m, _ := s.response(id, 60*time.Second)
		if tc.ok {
			if m == nil || m.Error != nil {
				t.Errorf("%s inside the allowed directory: %v", tc.path, m)
			}
			continue
		}
		_, msg, _ := errorOf(t, m)
		if !strings.Contains(msg, "--allow-path-dir") {
			t.Errorf("%s: message %q, want a refusal naming --allow-path-dir", tc.path, msg)
		}
	}
}
