package main

// Compiling through the real binary: the caller's module is validated
// before it is rewritten, module.path reads only bounded regular files and
// never quotes them, compiling is bounded in time and memory, cancellable,
// kept apart from runs of modules already compiled, counted against the
// cache, and served from --cache-dir after a restart; compile takes the
// compile limits.

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
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
// Validation before the rewrite

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
// module.path

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
	fifo := filepath.Join(outside, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
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
		// Refused before anything is opened, with the same words whether
		// the path exists, is a directory or a FIFO (no existence oracle,
		// no open(2) side effects outside the allowed directories).
		{filepath.Join(outside, "does-not-exist.wat"), false},
		{outside, false},
		{fifo, false},
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

// ---------------------------------------------------------------------------
// The compile fence

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: fields after the last ')'.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 {
			f := strings.Fields(string(b[i+1:]))
			if len(f) > 1 && f[1] == strconv.Itoa(pid) && !processGone(child) {
				out = append(out, child)
			}
		}
	}
	return out
}

// waitForCompileChild waits until the sidecar has a child process that
// is compiling a bomb, and returns its pid. The sidecar keeps a spare
// child too, idle at about 15 MiB; the compiling one is known by its
// growing memory.
func waitForCompileChild(t *testing.T, s *rawSidecar) int {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, kid := range childrenOf(s.pid()) {
			if rss, err := vmRSS(kid); err == nil && rss > 64<<20 {
				return kid
			}
		}
	}
	t.Fatal("the sidecar never started compiling the bomb in a child")
	return 0
}

// bombLimits let the bomb compile for long: it must be stopped by
// something else.
var bombLimits = map[string]uint64{"compileTimeoutMs": 300_000, "compileMemoryBytes": 4 << 30}

func addRun(id string) map[string]any {
	return map[string]any{"module": map[string]any{"id": id}, "function": "add", "args": []int{2, 40}}
}

// compileAdd compiles the add fixture and returns its id.
func compileAdd(t *testing.T, s *rawSidecar) string {
	t.Helper()
	s.request(`"add"`, "compile", map[string]any{"module": map[string]any{"path": fixture("well_behaved.wat")}})
	m, _ := s.response(`"add"`, 60*time.Second)
	var r struct{ ModuleID string }
	if m.Error != nil || json.Unmarshal(m.Result, &r) != nil || r.ModuleID == "" {
		t.Fatalf("compile of add: %s", m.raw)
	}
	return r.ModuleID
}

// TestCompileBombIsFenced: the nested-loop bomb of the issue (300 KB,
// 27 s and 2.2 GB of Cranelift) is answered compile_limit_exceeded under
// per-request compile limits, the sidecar's memory stays small, and a
// cached add is answered while a bomb compiles.
func TestCompileBombIsFenced(t *testing.T) {
	s := startRaw(t, binPath, "--max-concurrency", "2")
	s.startReading()
	add := compileAdd(t, s)

	s.request("1", "run", map[string]any{"module": wasmSpec(nestedLoops(100_000, 1)), "limits": map[string]uint64{"compileTimeoutMs": 500, "compileMemoryBytes": 4 << 30}})
	m, _ := s.response("1", 120*time.Second)
	kind, _, data := errorOf(t, m)
	if kind != "compile_limit_exceeded" || data["resource"] != "compile_time" || data["limit"] != 500.0 {
		t.Errorf("bomb under compileTimeoutMs 500: %s", m.raw)
	}
	s.request("2", "run", map[string]any{"module": wasmSpec(nestedLoops(100_000, 2)), "limits": map[string]uint64{"compileMemoryBytes": 128 << 20}})
	m, _ = s.response("2", 120*time.Second)
	kind, _, data = errorOf(t, m)
	if kind != "compile_limit_exceeded" || data["resource"] != "compile_memory" || data["limit"] != float64(128<<20) {
		t.Errorf("bomb under compileMemoryBytes 128 MiB: %s", m.raw)
	}
	// The memory went with the child.
	if rss, err := vmRSS(s.pid()); err == nil && rss > 256<<20 {
		t.Errorf("sidecar RSS %s after two bombs", mib(rss))
	}

	// A bomb compiling does not hold up a run of a cached module.
	s.request("3", "run", map[string]any{"module": wasmSpec(nestedLoops(100_000, 3)), "limits": bombLimits})
	waitForCompileChild(t, s)
	s.request("4", "run", addRun(add))
	m, msgs := s.response("4", 60*time.Second)
	if m.Error != nil || !strings.Contains(string(m.Result), `"value":42`) {
		t.Errorf("cached add: %s", m.raw)
	}
	for _, x := range msgs {
		if x.isResponse() && x.idKey() == "3" {
			t.Errorf("the cached add was answered only after the bomb: %s", x.raw)
		}
	}
	s.notify("$/cancelRequest", map[string]any{"id": 3})
	if m, _ := s.response("3", 60*time.Second); m.kind() != "cancelled" {
		t.Errorf("cancelled bomb: %s", m.raw)
	}
	// Limits are checked against the sidecar's maximums.
	s.request("5", "run", map[string]any{"module": wasmSpec(nestedLoops(10, 5)), "limits": map[string]uint64{"compileTimeoutMs": 300_001}})
	if m, _ := s.response("5", 60*time.Second); m.Error == nil || m.Error.Code != -32602 || !strings.Contains(m.Error.Message, "limits.compileTimeoutMs") {
		t.Errorf("compileTimeoutMs past the maximum: %s", m.raw)
	}
}

// TestCancelAndEOFStopACompile: cancelling a request whose module is
// compiling is answered at once, not when the compile ends: before a run
// with a 3 s deadline sent after it is answered (before the fence, the
// cancel waited for the whole compile). Closing stdin during a compile
// makes the sidecar exit promptly and leaves no compile child behind.
func TestCancelAndEOFStopACompile(t *testing.T) {
	s := startRaw(t, binPath, "--max-concurrency", "2")
	s.startReading()
	s.request("1", "run", map[string]any{"module": wasmSpec(nestedLoops(100_000, 11)), "limits": bombLimits})
	child := waitForCompileChild(t, s)
	s.notify("$/cancelRequest", map[string]any{"id": 1})
	s.request("2", "run", map[string]any{"module": map[string]any{"path": fixture("infinite_loop.wat")},
		"limits": map[string]uint64{"fuel": hugeFuel, "timeoutMs": 3000}})
	m, msgs := s.response("1", 120*time.Second)
	if m.kind() != "cancelled" {
		t.Errorf("cancelled compile: %s", m.raw)
	}
	for _, x := range msgs {
		if x.isResponse() && x.idKey() == "2" {
			t.Errorf("the cancel was answered after a 3 s deadline: the compile was not stopped")
		}
	}
	for deadline := time.Now().Add(30 * time.Second); !processGone(child); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("compile child %d still alive after the cancel", child)
		}
	}
	s.response("2", 60*time.Second)

	s2 := startRaw(t, binPath)
	s2.startReading()
	s2.request("1", "run", map[string]any{"module": wasmSpec(nestedLoops(100_000, 12)), "limits": bombLimits})
	child = waitForCompileChild(t, s2)
	_ = s2.stdin.Close()
	if _, _, killed := s2.wait(10 * time.Second); killed {
		t.Fatal("the sidecar did not exit within 10 s of stdin EOF during a compile")
	}
	for deadline := time.Now().Add(10 * time.Second); !processGone(child); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("compile child %d outlived the sidecar", child)
		}
	}
}

// TestCacheCountsCompiledBytes: the cache is bounded by compiled size,
// which outweighs the wasm many times (40 distinct 120 KB modules held
// 604 MB while cache.bytes said 4.8 MB). And --cache-entries 0 turns the
// cache off (0 used to mean the default).
func TestCacheCountsCompiledBytes(t *testing.T) {
	manyFuncs := func(tag string) string {
		var b strings.Builder
		b.WriteString("(module\n")
		for i := range 1000 {
			b.WriteString("(func (export \"" + tag + strconv.Itoa(i) + "\") (param i32) (result i32) (i32.mul (i32.add (local.get 0) (i32.const " + strconv.Itoa(i) + ")) (i32.const 3)))\n")
		}
		return b.String() + ")"
	}
	const cacheBytes = 4 << 20
	s := startRaw(t, binPath, "--cache-bytes", strconv.Itoa(cacheBytes))
	s.startReading()
	const n = 8
	for i := range n {
		id := strconv.Itoa(i + 1)
		s.request(id, "compile", map[string]any{"module": map[string]any{"wat": manyFuncs("m" + id + "_")}})
		if m, _ := s.response(id, 60*time.Second); m.Error != nil {
			t.Fatalf("compile %d: %s", i, m.raw)
		}
	}
	s.request(`"st"`, "stats", nil)
	m, _ := s.response(`"st"`, 10*time.Second)
	var st struct{ Cache struct{ Entries, Bytes int } }
	if err := json.Unmarshal(m.Result, &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("cache after %d modules: %+v", n, st.Cache)
	if st.Cache.Bytes > cacheBytes || st.Cache.Entries >= n || st.Cache.Entries == 0 {
		t.Errorf("cache %+v: want at most %d bytes of compiled modules, so fewer than %d entries", st.Cache, cacheBytes, n)
	}
	if per := st.Cache.Bytes / st.Cache.Entries; per < 200<<10 {
		t.Errorf("%d bytes per cached module: that is not its compiled size", per)
	}

	off := startRaw(t, binPath, "--cache-entries", "0")
	off.startReading()
	for i, id := range []string{"1", "2"} {
		off.request(id, "compile", map[string]any{"module": map[string]any{"path": fixture("well_behaved.wat")}})
		m, _ := off.response(id, 60*time.Second)
		if m.Error != nil || !strings.Contains(string(m.Result), `"cached":false`) {
			t.Errorf("compile %d with --cache-entries 0: %s", i, m.raw)
		}
	}
}

// TestCLICompileLimits: `sandboxd run` fences the compile too, with
// --compile-timeout-ms and --compile-memory-mb; exit status 11.
func TestCLICompileLimits(t *testing.T) {
	bomb := filepath.Join(t.TempDir(), "bomb.wasm")
	if err := os.WriteFile(bomb, nestedLoops(100_000, 21), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flags []string
		inMsg string
	}{
		{[]string{"--compile-timeout-ms", "300", "--compile-memory-mb", "4096"}, "compile time limit of 300 ms"},
		{[]string{"--compile-memory-mb", "128"}, "compile memory limit of 134217728 bytes"},
	} {
		var stderr syncBuffer
		cmd := exec.Command(binPath, append([]string{"run", bomb}, tc.flags...)...)
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		code, _, killed := waitTimeout(cmd, 120*time.Second)
		if killed || code != 11 || !strings.Contains(stderr.String(), tc.inMsg) {
			t.Errorf("sandboxd run %v: exit %d (killed %v), stderr %q; want 11 and %q", tc.flags, code, killed, stderr.String(), tc.inMsg)
		}
	}
}

// TestCacheDirServesAfterRestart: with --cache-dir, a restarted sidecar
// loads a module it compiled before instead of compiling it: the second
// sidecar cannot compile anything (a compile memory limit of 1 byte), and
// still runs the module.
func TestCacheDirServesAfterRestart(t *testing.T) {
	dir := t.TempDir()
	answer := wasmModule([]byte{0, 1, 0x7f}, false, []byte{0, 0x41, 42}) // run() = 42
	other := wasmModule([]byte{0, 1, 0x7f}, false, []byte{0, 0x41, 7})
	run := func(s *rawSidecar, id string, wasm []byte) *message {
		s.request(id, "run", map[string]any{"module": wasmSpec(wasm)})
		m, _ := s.response(id, 60*time.Second)
		return m
	}
	first := startRaw(t, binPath, "--cache-dir", dir)
	first.startReading()
	if m := run(first, "1", answer); m.Error != nil || !strings.Contains(string(m.Result), `"value":42`) {
		t.Fatalf("first sidecar: %s", m.raw)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*", "*.cwasm"))
	if len(files) != 1 {
		t.Fatalf("cache dir holds %v, want one compiled module", files)
	}

	second := startRaw(t, binPath, "--cache-dir", dir, "--default-compile-memory-bytes", "1")
	second.startReading()
	if m := run(second, "1", answer); m.Error != nil || !strings.Contains(string(m.Result), `"value":42`) {
		t.Errorf("restarted sidecar, module compiled before: %s", m.raw)
	}
	if m := run(second, "2", other); m.kind() != "compile_limit_exceeded" {
		t.Errorf("restarted sidecar, new module under a 1-byte compile limit: %s", m.raw)
	}
}

// TestCompileTakesCompileLimits: an ahead-of-time compile takes the
// compile fields of limits, as a run does. The bomb under a 500 ms
// compileTimeoutMs is answered compile_limit_exceeded (compile_time, 500);
// a run limit there, or a compile limit past the maximum, is -32602 naming
// the field. Before compile took limits, every such request was -32602
// "unknown field" and the bomb compiled for the default 30 s.
func TestCompileTakesCompileLimits(t *testing.T) {
	s := startRaw(t, binPath)
	s.startReading()

	bomb := base64.StdEncoding.EncodeToString(nestedLoops(100_000, 31))
	s.request("1", "compile", protocol.CompileParams{Module: protocol.ModuleSpec{Wasm: &bomb}, Limits: map[string]uint64{"compileTimeoutMs": 500}})
	m, _ := s.response("1", 120*time.Second)
	kind, _, data := errorOf(t, m)
	if kind != "compile_limit_exceeded" || data["resource"] != "compile_time" || data["limit"] != 500.0 {
		t.Errorf("bomb compiled under compileTimeoutMs 500: %s", trunc(m.raw))
	}

	for id, tc := range map[string]struct {
		limits map[string]uint64
		field  string
	}{
		"2": {map[string]uint64{"compileTimeoutMs": 500, "fuel": 10}, "limits.fuel"},
		"3": {map[string]uint64{"timeoutMs": 10}, "limits.timeoutMs"},
		"4": {map[string]uint64{"compileTimeoutMs": 300_001}, "limits.compileTimeoutMs"},
		"5": {map[string]uint64{"compileMemoryBytes": 0}, "limits.compileMemoryBytes"},
	} {
		s.request(id, "compile", map[string]any{"module": map[string]any{"wat": "(module)"}, "limits": tc.limits})
		m, _ := s.response(id, 60*time.Second)
		if m == nil || m.Error == nil || m.Error.Code != -32602 || !strings.HasPrefix(m.Error.Message, tc.field+":") {
			t.Errorf("compile with limits %v: want -32602 naming %s, got %s", tc.limits, tc.field, trunc(m.raw))
		}
	}

	// The compile fields are honoured, not only checked: a small module
	// compiles under them, and the sidecar still serves.
	s.request("6", "compile", map[string]any{"module": map[string]any{"wat": "(module (func (export \"run\")))"}, "limits": map[string]uint64{"compileTimeoutMs": 60_000, "compileMemoryBytes": 1 << 30}})
	if m, _ := s.response("6", 60*time.Second); m == nil || m.Error != nil || !strings.Contains(string(m.Result), `"moduleId"`) {
		t.Errorf("compile under explicit compile limits: %s", trunc(m.raw))
	}
}
