package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
)

// badGrantDir is a directory the operator allows and, in it, a symlink to
// a directory whose name is not UTF-8 (wasmtime's preopen takes UTF-8
// paths only, so it could not be preopened by its name).
func badGrantDir(t *testing.T) (allowed, link string) {
	t.Helper()
	allowed = t.TempDir()
	if err := os.Mkdir(filepath.Join(allowed, "bad\xff"), 0o755); err != nil {
		t.Skipf("this file system refuses a name that is not UTF-8: %v", err)
	}
	link = filepath.Join(allowed, "link")
	if err := os.Symlink(filepath.Join(allowed, "bad\xff"), link); err != nil {
		t.Fatal(err)
	}
	return allowed, link
}

// TestWASIGrantFaultsAreTheParents: a WASI grant that wasmtime's
// configuration would choke on (a name no file system holds, a path too
// long for a guest to open) is the parent's mistake: -32602 naming the exact field, for run,
// instantiate and a plugin's run, never error 1 (host), which says the
// sidecar failed. It is refused at decode: a grant refused with a module
// id that was never compiled is still the grant's error.
func TestWASIGrantFaultsAreTheParents(t *testing.T) {
	t.Parallel()
	allowed, link := badGrantDir(t)
	// Hang bounds for the compile and the runs: a fault found when the
	// run starts comes after the compile, and the Go plugin's took more
	// than the default 30 s at load 20 (compile_limit_exceeded).
	s := startRaw(t, binPath, "--framing=ndjson", "--allow-dir", allowed,
		"--default-compile-timeout-ms", "300000", "--default-timeout-ms", "60000")
	s.startReading()
	long := "/" + strings.Repeat("n", protocol.MaxWASINameBytes+1)
	deep := strings.Repeat("/"+strings.Repeat("d", 200), 21) // 4,221 bytes
	grants := []struct {
		name  string
		wasi  map[string]any
		field string
		fs    bool // needs the file system: checked when the run starts, not at decode
	}{
		{"a name past NAME_MAX", map[string]any{"files": map[string]any{long: "x"}}, `capabilities.wasi.files[` + protocol.Quote(long) + `]: has a name of 256 bytes`, false},
		{"a path past 4096 bytes", map[string]any{"files": map[string]any{deep: "x"}}, `capabilities.wasi.files[` + protocol.Quote(deep) + `]: is 4221 bytes long`, false},
		{"a NUL in an argument", map[string]any{"args": []any{"ok", "a\x00b"}}, "capabilities.wasi.args[1]: must not contain a NUL byte", false},
		{"a NUL in an env value", map[string]any{"env": map[string]any{"K": "a\x00"}}, "capabilities.wasi.env.K: must not contain a NUL byte", false},
		{"an env name with =", map[string]any{"env": map[string]any{"A=B": "c"}}, `capabilities.wasi.env: name "A=B"`, false},
		{"an empty guest path", map[string]any{"dirs": []any{map[string]any{"host": allowed, "guest": ""}}}, "capabilities.wasi.dirs[0].guest: must not be empty", false},
	}
	guest := wasiGuest("guest_c.wasm")
	requests := []struct {
		method string
		params func(wasi map[string]any) map[string]any
	}{
		{"run", func(w map[string]any) map[string]any {
			return map[string]any{"module": map[string]string{"path": guest}, "capabilities": map[string]any{"wasi": w, "log": true}}
		}},
		{"run of a never-compiled id", func(w map[string]any) map[string]any {
			return map[string]any{"module": map[string]string{"id": protocol.IDPrefix + strings.Repeat("0", 64)}, "capabilities": map[string]any{"wasi": w, "log": true}}
		}},
		{"instantiate", func(w map[string]any) map[string]any {
			return map[string]any{"module": map[string]string{"path": guest}, "capabilities": map[string]any{"wasi": w, "log": true}}
		}},
		{"run (a plugin)", func(w map[string]any) map[string]any {
			return map[string]any{"module": map[string]string{"path": pluginPath(t, "go/plugin.wasm")}, "function": "greet", "input": "Ada",
				"capabilities": map[string]any{"wasi": w, "log": true}}
		}},
	}
	n := 0
	for _, r := range requests {
		for _, g := range grants {
			if g.fs && strings.Contains(r.method, "never-compiled") {
				continue
			}
			n++
			id := fmt.Sprintf(`"g%d"`, n)
			method, _, _ := strings.Cut(r.method, " ")
			s.request(id, method, r.params(g.wasi))
			m, _ := s.response(id, time.Minute)
			if m.Error == nil || m.Error.Code != protocol.CodeInvalidParams || !strings.HasPrefix(m.Error.Message, g.field) {
				t.Errorf("%s, %s: %s\nwant -32602 starting %q", r.method, g.name, m.raw, g.field)
			}
		}
	}
	// The sidecar keeps serving, and the good parts of those grants work.
	s.request(`"ok"`, "run", map[string]any{"module": map[string]string{"path": guest},
		"capabilities": map[string]any{"wasi": map[string]any{"args": []string{"cat", "/f/" + strings.Repeat("n", 255)},
			"files": map[string]any{"/f/" + strings.Repeat("n", 255): "fits"}}}})
	if m, _ := s.response(`"ok"`, time.Minute); m.Error != nil || !strings.Contains(string(m.Result), `"stdout":{"text":"fits"}`) {
		t.Errorf("a file of a 255-byte name: %s", m.raw)
	}
	// A directory whose real path is not UTF-8 is preopened through its
	// open descriptor (it used to be refused: wasmtime takes UTF-8 paths).
	if err := os.WriteFile(filepath.Join(link, "f"), []byte("in a bad name"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.request(`"bad"`, "run", map[string]any{"module": map[string]string{"path": guest},
		"capabilities": map[string]any{"wasi": map[string]any{"args": []string{"cat", "/d/f"}, "dirs": []any{map[string]any{"host": link, "guest": "/d"}}}}})
	if m, _ := s.response(`"bad"`, time.Minute); m.Error != nil || !strings.Contains(string(m.Result), `"stdout":{"text":"in a bad name"}`) {
		t.Errorf("a dir whose real path is not UTF-8: %s", m.raw)
	}
}

// TestCLIWASIFlagFaults: the same grants given as `sandboxd run --wasi`
// flags, and limits too large to represent, are one-line usage errors
// naming the flag (exit 1), not a host failure, and no flag wraps around
// into a small limit (--memory-mb 17592186044417 ran with 1 MiB).
func TestCLIWASIFlagFaults(t *testing.T) {
	t.Parallel()
	allowed, link := badGrantDir(t)
	host := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(host, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	long := "/" + strings.Repeat("n", protocol.MaxWASINameBytes+1)
	guest := wasiGuest("guest_c.wasm")
	huge := fmt.Sprint(uint64(1)<<44 + 1) // MiB: 2^64 + 1 MiB bytes
	for _, c := range []struct {
		args []string
		want string // the one stderr line starts with it
	}{
		{[]string{"run", guest, "--wasi", "--file", long + "=" + host, "--", "cat", long}, `sandboxd: --file "` + long + "=" + host + `": has a name of 256 bytes`},
		{[]string{"run", guest, "--wasi", "--file", "rel=" + host, "--", "echo"}, `sandboxd: --file "rel=` + host + `": must be an absolute`},
		{[]string{"run", guest, "--wasi", "--", "echo", "ok", "\xff"}, "sandboxd: argument 3 after --: must be valid UTF-8"},
		{[]string{"run", guest, "--wasi", "--memory-mb", huge, "--", "echo"}, "sandboxd: --memory-mb: must be <="},
		{[]string{"run", guest, "--wasi", "--compile-memory-mb", huge, "--", "echo"}, "sandboxd: --compile-memory-mb: must be <="},
		{[]string{"run", guest, "--wasi", "--timeout-ms", "18446744073709551615", "--", "echo"}, "sandboxd: --timeout-ms: must be <="},
		{[]string{"run", guest, "--wasi", "--timeout-ms", "18446744073710", "--", "echo"}, "sandboxd: --timeout-ms: must be <="}, // wrapped to 1,410 ms
		{[]string{"run", fixture("well_behaved.wat"), "--invoke", "add", "--arg", "1", "--arg", "2", "--memory-mb", huge}, "sandboxd: --memory-mb: must be <="},
		{[]string{"call", pluginPath(t, "wat/plugin.wat"), "greet", "--input", "x", "--allow-log", "--memory-mb", huge}, "sandboxd: --memory-mb: must be <="},
	} {
		r := runWASICLI(t, "", c.args[1:]...)
		if c.args[0] == "call" {
			out, errText, code := sandboxdCall(t, c.args[1:]...)
			r = cliResult{stdout: string(out), stderr: errText, code: code}
		}
		if r.code != exitUsage || !strings.HasPrefix(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
			t.Errorf("sandboxd %q: %s\nwant exit 1 and one line starting %q", c.args, r, c.want)
		}
	}
	// A directory whose real path is not UTF-8 is preopened (through its
	// open descriptor), not refused.
	if err := os.WriteFile(filepath.Join(link, "f"), []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runWASICLI(t, "", guest, "--wasi", "--dir", allowed+":/ok", "--dir", link+":/d", "--", "cat", "/d/f"); r.code != 0 || r.stdout != "ok" {
		t.Errorf("--dir of a link to a name that is not UTF-8: %s", r)
	}
}

// TestCLIModuleFileNotUTF8: a module file whose name is not UTF-8 runs
// (the guest's argv[0], its base name, gets U+FFFD for the bad bytes)
// instead of being refused as a grant wasmtime cannot take.
func TestCLIModuleFileNotUTF8(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	guest, plugin := filepath.Join(dir, "guest\xff.wasm"), filepath.Join(dir, "plugin\xff.wasm")
	for dst, src := range map[string]string{guest: wasiGuest("guest_c.wasm"), plugin: pluginPath(t, "go/plugin.wasm")} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Skipf("this file system refuses a name that is not UTF-8: %v", err)
		}
	}
	if r := runWASICLI(t, "", guest, "--wasi", "--", "args", "a"); r.code != 0 || r.stdout != "a\n" {
		t.Errorf("sandboxd run %q --wasi: %s", guest, r)
	}
	if out, errText, code := sandboxdCall(t, plugin, "greet", "--input", "x", "--allow-wasi", "--allow-log"); code != 0 || string(out) != "Hello, x!" {
		t.Errorf("sandboxd call %q: exit %d, stdout %q, stderr %q", plugin, code, out, errText)
	}
}
