package main

// What the CLI says when a command fails, through the real binary: one
// prefix on every line of its own, a bad flag named as the user typed it,
// and the flag that grants WASI named where a WASI module is refused.

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCLIErrorLinesArePrefixed runs each command's failure paths and
// checks every line of stderr: it starts with errorPrefix, or it is one of
// the lines the case allows that are not an error (the usage figures after
// a failed run, a usage after an unknown command). The first line is
// always an error line.
func TestCLIErrorLinesArePrefixed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	wb := fixture("well_behaved.wat")
	plugin := pluginPath(t, "wat/plugin.wat")
	guest := wasiGuest("guest_c.wasm")
	notWasm := writeFile(t, dir, "not.wasm", "not a module")
	usageFigures := regexp.MustCompile(`^(fuel consumed: \d+.*|peak memory: \d+ bytes)$`)
	anyLine := regexp.MustCompile(``)
	for _, c := range []struct {
		args []string
		code int
		also *regexp.Regexp // lines after the first that need no prefix
	}{
		{[]string{"bogus"}, 2, anyLine}, // then sandboxd's usage
		{[]string{"run"}, 1, nil},
		{[]string{"run", wb, "--bogus"}, 1, nil},
		{[]string{"run", wb, "--fuel", "x"}, 1, nil},
		{[]string{"run", wb, "--invoke", "add", "--arg", "x", "--arg", "1"}, 1, nil},
		{[]string{"run", wb, "--seed", "-1"}, 1, nil},
		{[]string{"run", wb, "--memory-mb", "99999999999999"}, 1, nil},
		{[]string{"run", filepath.Join(dir, "missing.wasm")}, 1, usageFigures},
		{[]string{"run", notWasm}, 6, usageFigures},
		{[]string{"run", wb, "--invoke", "nope"}, 7, usageFigures},
		{[]string{"run", fixture("infinite_loop.wat"), "--fuel", "100000000000", "--timeout-ms", "100"}, 3, usageFigures},
		{[]string{"run", fixture("disallowed_import.wat")}, 5, usageFigures},
		{[]string{"run", guest}, 5, usageFigures},
		{[]string{"run", guest, "--wasi", "--file", "rel=x", "--", "echo"}, 1, nil},
		{[]string{"run", guest, "--wasi", "--bogus"}, 1, nil},
		{[]string{"run", guest, "--wasi", "--timeout-ms", "200", "--", "sleep", "5000"}, 3, nil},
		{[]string{"call"}, 1, nil},
		{[]string{"call", plugin, "greet", "--loop", "0"}, 1, nil},
		{[]string{"call", plugin, "greet", "--config", "novalue"}, 1, nil},
		{[]string{"call", plugin, "fail", "--input", "oops"}, 10, nil},
		{[]string{"call", plugin, "memory"}, 7, nil},
		{[]string{"call", wb, "add"}, 1, nil},
		{[]string{"call", guest, "_start"}, 5, nil},
		{[]string{"eval"}, 1, nil},
		{[]string{"eval", "--lang", "python", "-e", "1"}, 1, nil},
		{[]string{"eval", "--lang", "js"}, 1, nil},
		{[]string{"eval", "--lang", "js", "-e", "1", "--input", "{"}, 1, nil},
		{[]string{"eval", "--lang", "js", "-e"}, 1, nil},
		{[]string{"completion", "tcsh"}, 1, nil},
		{[]string{"completion", "bash", "zsh"}, 1, nil},
		{[]string{"completion", "--bogus"}, 1, nil},
		{[]string{"man", "extra"}, 1, nil},
		{[]string{"serve", "--bogus"}, 1, nil},
		{[]string{"serve", "extra"}, 1, nil},
		{[]string{"serve", "--max-compiles", "0"}, 1, nil},
		{[]string{"serve", "--log-level", "bogus"}, 1, nil},
		{[]string{"serve", "--cpuprofile", filepath.Join(dir, "missing", "cpu.pprof")}, 1, nil},
		{[]string{"mcp", "--bogus"}, 1, nil},
		{[]string{"mcp", "extra"}, 1, nil},
		{[]string{"mcp", "--max-instances", "0"}, 1, nil},
		{[]string{"mcp", "--log-level", "bogus"}, 1, nil},
	} {
		r := sandboxdCLI(t, append(c.args, hangFlagsFor(c.args)...)...)
		name := "sandboxd " + strings.Join(c.args, " ")
		if r.code != c.code {
			t.Errorf("%s: want exit %d, got %s", name, c.code, r)
		}
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		if r.stderr == "" || !strings.HasPrefix(lines[0], errorPrefix) {
			t.Errorf("%s: the first stderr line is not an error line starting %q: %q", name, errorPrefix, r.stderr)
			continue
		}
		for _, line := range lines[1:] {
			if !strings.HasPrefix(line, errorPrefix) && (c.also == nil || !c.also.MatchString(line)) {
				t.Errorf("%s: stderr line %q does not start with %q", name, line, errorPrefix)
			}
		}
	}
}

// hangFlagsFor bounds the deadline and compile time of run and call where
// the case sets none (not after a "--": a WASI program's arguments).
func hangFlagsFor(args []string) []string {
	if len(args) == 0 || (args[0] != "run" && args[0] != "call") || strings.Contains(strings.Join(args, " "), " -- ") {
		return nil
	}
	return hangFlags(args)
}

// A bad flag is named as the user typed it, -name or --name (the flag
// package says -name either way), in one line that says where the flags
// are listed.
func TestCLIBadFlagNamedAsTyped(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--bogus"}, "sandboxd: unknown flag: --bogus (sandboxd run -h lists the flags)\n"},
		{[]string{"run", "-bogus"}, "sandboxd: unknown flag: -bogus (sandboxd run -h lists the flags)\n"},
		{[]string{"run", "f.wasm", "--bogus=1"}, "sandboxd: unknown flag: --bogus (sandboxd run -h lists the flags)\n"},
		{[]string{"run", "f.wasm", "--wasi", "--bogus"}, "sandboxd: unknown flag: --bogus (sandboxd run --wasi -h lists the flags)\n"},
		{[]string{"serve", "--bogus"}, "sandboxd: unknown flag: --bogus (sandboxd serve -h lists the flags)\n"},
		// A value that looks like a flag is the previous flag's value.
		{[]string{"call", "p.wasm", "f", "--input", "--bogus", "-bogus"}, "sandboxd: unknown flag: -bogus (sandboxd call -h lists the flags)\n"},
		{[]string{"call", "p.wasm", "f", "--allow-log", "--input=-x", "--bogus"}, "sandboxd: unknown flag: --bogus (sandboxd call -h lists the flags)\n"},
		{[]string{"run", "f.wasm", "--fuel", "x"}, `sandboxd: invalid value "x" for flag --fuel: parse error (sandboxd run -h lists the flags)` + "\n"},
		{[]string{"run", "f.wasm", "-fuel=x"}, `sandboxd: invalid value "x" for flag -fuel: parse error (sandboxd run -h lists the flags)` + "\n"},
		{[]string{"run", "f.wasm", "--fuel", " for flag -fuel: x"}, `sandboxd: invalid value " for flag -fuel: x" for flag --fuel: parse error (sandboxd run -h lists the flags)` + "\n"},
		{[]string{"run", "f.wasm", "--allow-log=maybe"}, `sandboxd: invalid boolean value "maybe" for --allow-log: parse error (sandboxd run -h lists the flags)` + "\n"},
		{[]string{"eval", "--lang", "js", "--e"}, "sandboxd: flag needs an argument: --e (sandboxd eval -h lists the flags)\n"},
		{[]string{"eval", "--lang", "js", "-e"}, "sandboxd: flag needs an argument: -e (sandboxd eval -h lists the flags)\n"},
		{[]string{"run", "f.wasm", "---x"}, "sandboxd: bad flag syntax: ---x (sandboxd run -h lists the flags)\n"},
	} {
		var stdout, stderr bytes.Buffer
		code := dispatch(c.args, nil, &stdout, &stderr)
		if code != exitUsage || stdout.Len() > 0 || stderr.String() != c.want {
			t.Errorf("sandboxd %s: exit %d, stdout %q, stderr %q; want exit 1 and %q", strings.Join(c.args, " "), code, stdout.String(), stderr.String(), c.want)
		}
	}
}

// A WASI module run without the grant is refused with the flag that grants
// it on the CLI (--wasi for run, --allow-wasi for call); a WASI import
// refused under the grant (a function WASI does not have) gets no hint,
// as no flag mends it.
func TestCLIWASIRefusalNamesTheFlag(t *testing.T) {
	t.Parallel()
	guest := wasiGuest("guest_c.wasm")
	r := sandboxdCLI(t, "run", guest)
	if r.code != 5 || !strings.Contains(r.stderr, "fd_write") ||
		!strings.Contains(r.stderr, "sandboxd: disallowed_import: ") || !strings.HasSuffix(strings.SplitN(r.stderr, "\n", 2)[0], ": this is a WASI program: run it with --wasi") {
		t.Errorf("run without --wasi: %s", r)
	}
	r = sandboxdCLI(t, "call", guest, "_start")
	if r.code != 5 || !strings.HasSuffix(r.stderr, ": grant WASI with --allow-wasi\n") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("call without --allow-wasi: %s", r)
	}
	unknown := writeFile(t, t.TempDir(), "unknown_wasi.wat", `(module
  (import "extism:host/env" "output_set" (func (param i64 i64)))
  (import "wasi_snapshot_preview1" "no_such_function" (func))
  (memory (export "memory") 1)
  (func (export "f") (result i32) (i32.const 0)))`)
	r = sandboxdCLI(t, "call", unknown, "f", "--allow-wasi")
	if r.code != 5 || !strings.Contains(r.stderr, "no_such_function") || strings.Contains(r.stderr, "--allow-wasi") {
		t.Errorf("call --allow-wasi of a module importing an unknown WASI function: %s", r)
	}
	unknownProgram := writeFile(t, t.TempDir(), "unknown_wasi_program.wat", `(module
  (import "wasi_snapshot_preview1" "no_such_function" (func))
  (memory (export "memory") 1)
  (func (export "_start")))`)
	r = sandboxdCLI(t, "run", unknownProgram, "--wasi")
	if r.code != 5 || !strings.Contains(r.stderr, "no_such_function") || strings.Contains(r.stderr, "--wasi") {
		t.Errorf("run --wasi of a module importing an unknown WASI function: %s", r)
	}
}
