package main

// `sandboxd eval`, through the binary make build makes (SANDBOXD_BIN) and
// the runtimes it compiled next to it: values, input, output, script
// errors, every fence's exit code, --json, usage errors.

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// evalBin is the binary of make build, whose runtimes make build
// compiled (a binary built by the tests would compile them again, a
// minute of CPU per build).
func evalBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("SANDBOXD_BIN")
	if bin == "" {
		t.Fatal("SANDBOXD_BIN is not set: run make build, then SANDBOXD_BIN=$PWD/bin/sandboxd go test ./cmd/sandboxd (make test does both)")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(bin), "runtimes", "js.wasm")); err != nil {
		t.Fatalf("%v: make build builds the runtimes next to the binary", err)
	}
	return bin
}

// runEval runs `sandboxd eval args...` with stdin, bounded by a minute.
func runEval(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, evalBin(t), append([]string{"eval"}, args...)...)
	cmd.Env = append(os.Environ(), "SANDBOXD_RUNTIMES=") // the runtimes next to the binary
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("sandboxd eval %s: did not finish within a minute", strings.Join(args, " "))
	}
	r := cliResult{stdout: stdout.String(), stderr: stderr.String(), code: exitCode(err)}
	if strings.Contains(r.stderr, "compiling the") {
		t.Errorf("a runtime was compiled at a snippet (make build compiles them): %s", r.stderr)
	}
	return r
}

func TestEvalCLIValues(t *testing.T) {
	file := filepath.Join(t.TempDir(), "snippet.lua")
	if err := os.WriteFile(file, []byte("local t = {}\nfor i = 1, input do t[i] = i end\nreturn t\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		stdin  string
		args   []string
		stdout string
	}{
		{"", []string{"--lang", "js", "-e", "1+1"}, "2\n"},
		{"", []string{"--lang", "lua", "-e", "1+1"}, "2\n"},
		{"", []string{"--lang", "starlark", "-e", "1+1"}, "2\n"},
		{"", []string{"--lang", "js", "--input", `{"n": [1, 2]}`, "-e", "input.n.map(x => x * 10)"}, "[10,20]\n"},
		{"", []string{"--lang", "lua", "--input", "3", file}, "[1,2,3]\n"},
		{"def f(x):\n    return x * 2\nf(input)\n", []string{"--lang", "starlark", "--input", "21", "-"}, "42\n"},
		{"", []string{"--lang", "js", "-e", "console.log('hi', {a: 1}); 'done'"}, "hi {\"a\":1}\n\"done\"\n"},
		{"", []string{"--lang", "starlark", "-e", "print('a')\nNone"}, "a\nnull\n"},
	} {
		r := runEval(t, c.stdin, c.args...)
		if r.code != 0 || r.stdout != c.stdout {
			t.Errorf("%q: %s; want stdout %q", c.args, r, c.stdout)
		}
	}
}

func TestEvalCLIScriptError(t *testing.T) {
	for _, c := range []struct {
		lang, code string
		want       []string
	}{
		{"js", "let a = 1;\nlet b = ;", []string{"sandboxd: script_error: SyntaxError", "at line 2, column 9"}},
		{"js", "function f() { throw new Error('deep') }\nf()", []string{"Error: deep", "at line 1", "  at f (snippet:1"}},
		{"lua", "x = 1\nerror('boom')", []string{"snippet:2: boom", "at line 2", "stack traceback"}},
		{"starlark", "x = 1\ny = (", []string{"snippet:2:6", "at line 2, column 6"}},
	} {
		r := runEval(t, "", "--lang", c.lang, "-e", c.code)
		if r.code != 13 || r.stdout != "" {
			t.Errorf("%s %q: %s; want exit 13", c.lang, c.code, r)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s %q: stderr lacks %q: %s", c.lang, c.code, w, r.stderr)
			}
		}
	}
}

// TestEvalCLIFences: a hostile snippet of each language ends with its
// fence's exit code, and the usage on stderr.
func TestEvalCLIFences(t *testing.T) {
	forever := map[string]string{"js": "while(true){}", "lua": "while true do end", "starlark": "while True:\n    pass"}
	bomb := map[string]string{"js": "var s = 'x'; for(;;) s += s", "lua": "local s = 'x' while true do s = s .. s end",
		"starlark": "s = 'x'\nwhile True:\n    s += s"}
	recursion := map[string]string{"js": "function r(n){ return r(n+1) + 1 }\nr(0)",
		"lua": "local function r(n) return r(n + 1) + 1 end\nreturn r(0)", "starlark": "def r(n):\n    return r(n + 1) + 1\nr(0)"}
	for _, lang := range []string{"js", "lua", "starlark"} {
		for _, c := range []struct {
			code string
			args []string
			exit int
			want string
		}{
			{forever[lang], []string{"--fuel", "50000000", "--timeout-ms", "60000"}, 2, "fuel_exhausted"},
			{forever[lang], []string{"--timeout-ms", "200"}, 3, "timeout"},
			{bomb[lang], []string{"--timeout-ms", "60000"}, 4, "memory_limit_exceeded"},
			{bomb[lang], []string{"--timeout-ms", "60000", "--memory-mb", "40"}, 4, "41943040"},
			{recursion[lang], []string{"--timeout-ms", "60000"}, 13, "script_error"},
		} {
			r := runEval(t, "", append([]string{"--lang", lang, "-e", c.code}, c.args...)...)
			if r.code != c.exit || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
				t.Errorf("%s %q %q: %s; want exit %d and %q", lang, c.code, c.args, r, c.exit, c.want)
			}
			if c.exit != 13 && !strings.Contains(r.stderr, "fuel consumed: ") {
				t.Errorf("%s %q: no usage on stderr: %s", lang, c.code, r.stderr)
			}
		}
	}
}

// TestEvalCLIOutputBounded: a snippet printing far more than
// --output-bytes gets that many bytes through, then a notice.
func TestEvalCLIOutputBounded(t *testing.T) {
	r := runEval(t, "", "--lang", "lua", "--output-bytes", "10000", "--timeout-ms", "60000",
		"-e", "for i = 1, 100000 do print(string.rep('x', 99)) end return 1")
	if r.code != 0 || r.stdout != strings.Repeat(strings.Repeat("x", 99)+"\n", 100)+"1\n" ||
		!strings.Contains(r.stderr, "output truncated to 10000 bytes") {
		t.Errorf("%d bytes of stdout, exit %d, stderr %q", len(r.stdout), r.code, r.stderr)
	}
}

func TestEvalCLIJSON(t *testing.T) {
	r := runEval(t, "", "--json", "--lang", "js", "--input", "[1,2]", "-e", "console.log('x'); input.length")
	var res struct {
		Language     string                `json:"language"`
		Value        json.RawMessage       `json:"value"`
		FuelConsumed uint64                `json:"fuelConsumed"`
		Stdout       struct{ Text string } `json:"stdout"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || r.code != 0 {
		t.Fatalf("%v: %s", err, r)
	}
	if res.Language != "js" || string(res.Value) != "2" || res.FuelConsumed == 0 || res.Stdout.Text != "x\n" {
		t.Errorf("%+v", res)
	}
	r = runEval(t, "", "--json", "--lang", "lua", "-e", "error('no')")
	var e struct {
		Error struct {
			Data struct {
				Kind, Language, Message string
				Line                    int
			}
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &e); err != nil || r.code != 13 {
		t.Fatalf("%v: %s", err, r)
	}
	if d := e.Error.Data; d.Kind != "script_error" || d.Language != "lua" || d.Line != 1 || !strings.Contains(d.Message, "no") {
		t.Errorf("%+v", d)
	}
}

func TestEvalCLIUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-e", "1"}, "--lang: unknown language"},
		{[]string{"--lang", "python", "-e", "1"}, `Starlark, a dialect of Python, is "starlark"`},
		{[]string{"--lang", "js"}, "give the snippet"},
		{[]string{"--lang", "js", "-e", "1", "file.js"}, "not both"},
		{[]string{"--lang", "js", "--input", "{", "-e", "1"}, "--input: not one JSON value"},
		{[]string{"--lang", "js", "/nonexistent/snippet.js"}, "no such file"},
		{[]string{"--lang", "js", "--fuel", "0", "-e", "1"}, "--fuel"},
		{[]string{"--lang", "js", "--runtimes", "/nonexistent", "-e", "1"}, "the js runtime is not installed"},
	} {
		r := runEval(t, "", c.args...)
		if r.code != 1 || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("%q: %s; want exit 1 and %q", c.args, r, c.want)
		}
	}
}
