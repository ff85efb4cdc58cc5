package main

// The command table against what the commands really parse: every
// command answers -h, every limit has a flag in every command, and the
// completion scripts and the man page list every flag of every command
// (they are made from the same FlagSets, so they cannot drift from -h).

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// withFlags lists the commands that take flags, with their FlagSets.
func withFlags(t *testing.T) map[string]*flag.FlagSet {
	t.Helper()
	out := map[string]*flag.FlagSet{}
	for _, c := range commands {
		if fs := flagsOf(c); fs != nil {
			out[c.name] = fs
		}
	}
	for _, name := range []string{"serve", "run", "run --wasi", "call", "completion", "man"} {
		if out[name] == nil {
			t.Fatalf("flagsOf(%q) found no FlagSet", name)
		}
	}
	return out
}

func TestEveryCommandHasUsage(t *testing.T) {
	for name, fs := range withFlags(t) {
		if fs.Name() != "sandboxd "+name {
			t.Errorf("the FlagSet of %q is named %q: -h would not find its usage", name, fs.Name())
		}
	}
	sets := withFlags(t)
	for _, c := range commands {
		var stdout, stderr bytes.Buffer
		if code := dispatch(append(strings.Fields(c.name), "-h"), nil, &stdout, &stderr); code != 0 || stderr.Len() > 0 {
			t.Errorf("sandboxd %s -h: exit %d, stderr %q", c.name, code, stderr.String())
		}
		if sets[c.name] != nil && !strings.HasPrefix(stdout.String(), strings.TrimSpace("Usage: sandboxd "+c.name+" "+c.synopsis)+"\n\n") {
			t.Errorf("sandboxd %s -h does not print its usage:\n%s", c.name, stdout.String())
		}
		if !strings.Contains(usage(), "sandboxd "+c.name) {
			t.Errorf("the usage does not list %q", c.name)
		}
	}
}

func TestEveryLimitHasAFlagInEveryCommand(t *testing.T) {
	sets := withFlags(t)
	byField := map[string]cliLimit{}
	for _, c := range cliLimits {
		byField[c.field] = c
	}
	if len(byField) != len(limits.Fields()) {
		t.Errorf("cliLimits has %d limits, limits.Fields() %d", len(byField), len(limits.Fields()))
	}
	for _, f := range limits.Fields() {
		c, ok := byField[f.Name]
		if !ok {
			t.Errorf("limit %s has no entry in cliLimits", f.Name)
			continue
		}
		for _, name := range []string{"run", "run --wasi", "call", "eval"} {
			if sets[name].Lookup(c.flag) == nil {
				t.Errorf("sandboxd %s has no --%s for the limit %s", name, c.flag, f.Name)
			}
		}
		for _, prefix := range []string{"default-", "max-"} {
			flagName := prefix + kebab(f.Name)
			if renamed, ok := renamedLimitFlags[flagName]; ok {
				flagName = renamed
			}
			if sets["serve"].Lookup(flagName) == nil {
				t.Errorf("sandboxd serve has no --%s for the limit %s", flagName, f.Name)
			}
		}
	}
}

// A limit flag's default is limits.Defaults(), in the flag's unit, and a
// refused value is named by its flag.
func TestLimitFlagsReadBack(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	read := cliLimitFlags(fs, nil)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if l, err := read(); err != nil || l != limits.Defaults() {
		t.Errorf("no flags: %+v, %v; want the defaults %+v", l, err, limits.Defaults())
	}
	if err := fs.Parse([]string{"--memory-mb", "64", "--table-elements", "20000", "--compile-timeout-ms", "1500"}); err != nil {
		t.Fatal(err)
	}
	l, err := read()
	if err != nil || l.MemoryBytes != 64<<20 || l.TableElements != 20000 || l.CompileTimeout.Milliseconds() != 1500 {
		t.Errorf("flags: %+v, %v", l, err)
	}
	if err := fs.Parse([]string{"--instances", "0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := read(); err == nil || err.Error() != "--instances: must be > 0" {
		t.Errorf("--instances 0: %v", err)
	}
}

func TestFlagValueHintsNameFlags(t *testing.T) {
	all := map[string]bool{}
	for _, fs := range withFlags(t) {
		fs.VisitAll(func(f *flag.Flag) { all[f.Name] = true })
	}
	for name := range flagValueHints {
		if !all[name] {
			t.Errorf("flagValueHints names --%s, which no command has", name)
		}
	}
}

// section is the part of text from the line start to the first end after it.
func section(t *testing.T, text, start, end string) string {
	t.Helper()
	_, rest, ok := strings.Cut(text, start)
	if !ok {
		t.Fatalf("no %q in:\n%s", start, text)
	}
	s, _, _ := strings.Cut(rest, end)
	return s
}

// eachFlag calls check for every flag of every command, with the word
// that names its command in a shell ("run" for run --wasi).
func eachFlag(t *testing.T, check func(word, name string)) {
	for cmd, fs := range withFlags(t) {
		word, _, _ := strings.Cut(cmd, " ")
		fs.VisitAll(func(f *flag.Flag) { check(word, f.Name) })
	}
}

func TestCompletionScriptsListEveryFlag(t *testing.T) {
	cmds := shellCommands()
	bash, zsh, fish := bashCompletion(cmds), zshCompletion(cmds), fishCompletion(cmds)
	eachFlag(t, func(word, name string) {
		if word == "completion" || word == "man" { // no flags but -h
			return
		}
		typed, fishOption := flagWord(name), " -l " // -e, --lang
		if len(name) == 1 {
			fishOption = " -s "
		}
		if flags := section(t, bash, "\n    "+word+")\n        flags=\"", "\"\n"); !strings.Contains(" "+flags+" ", " "+typed+" ") {
			t.Errorf("bash: %s has no %s", word, typed)
		}
		if z := section(t, zsh, "\n        "+word+")\n", ";;"); !regexp.MustCompile(`'` + regexp.QuoteMeta(typed) + `[=\[]`).MatchString(z) {
			t.Errorf("zsh: %s has no %s", word, typed)
		}
		if !strings.Contains(fish, "'__fish_seen_subcommand_from "+word+"'"+fishOption+name+" ") {
			t.Errorf("fish: %s has no %s", word, typed)
		}
	})
	for _, c := range cmds {
		for script, text := range map[string]string{"bash": bash, "zsh": zsh, "fish": fish} {
			if !strings.Contains(text, c.name) {
				t.Errorf("%s: no command %s", script, c.name)
			}
		}
	}
}

// The bash script completes as a user would see it (bash runs it; bash is
// part of every machine make test runs on).
func TestBashCompletionCompletes(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	for _, f := range []string{"guest.wasm", "guest.wat", "notes.txt"} {
		writeFile(t, dir, f, "")
	}
	script := bashCompletion(shellCommands()) + `
complete_line() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=(); _sandboxd; printf '%s\n' "${COMPREPLY[*]}"; }
complete_line sandboxd ru
complete_line sandboxd run --table-e
complete_line sandboxd run guest.wasm --wasi --tab
complete_line sandboxd call --inp
complete_line sandboxd serve --framing ""
complete_line sandboxd serve --default-fuel ""
complete_line sandboxd completion ""
complete_line sandboxd run ""
complete_line sandboxd eval --lang ""
complete_line sandboxd eval -e
complete_line sandboxd eval --e
complete_line sandboxd eval -e ""
`
	cmd := exec.Command("bash", "--norc", "--noprofile", "-c", script)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	want := "run\n--table-elements\n--table-elements\n--input --input-file\ncontent-length ndjson\n\nbash zsh fish\nguest.wasm guest.wat\n" +
		strings.Join(languageNames(), " ") + "\n-e\n\n\n" // --lang's values; -e offered as typed, with a value typed, not completed
	if string(out) != want {
		t.Errorf("completions:\n%s\nwant:\n%s", out, want)
	}
}

// The languages --lang completes are the protocol's, and one-letter flags
// are offered with one dash in every script.
func TestCompletionOffersLanguagesAndShortFlags(t *testing.T) {
	want := []string{"js", "lua", "starlark"}
	for _, l := range protocol.Languages() {
		if !slices.Contains(want, string(l)) {
			want = append(want, string(l))
		}
	}
	if got := flagValueHints["lang"]; !slices.Equal(got, languageNames()) || len(got) != len(want) {
		t.Errorf("--lang completes %q, want the languages %q", got, want)
	}
	cmds := shellCommands()
	bash, zsh, fish := bashCompletion(cmds), zshCompletion(cmds), fishCompletion(cmds)
	if strings.Contains(bash, " --e ") || strings.Contains(bash, `--e"`) || !strings.Contains(bash, " -e ") {
		t.Errorf("bash offers --e, or not -e:\n%s", section(t, bash, "\n    eval)\n", ";;"))
	}
	if strings.Contains(zsh, "'--e=[") || !strings.Contains(zsh, "'-e=[") {
		t.Errorf("zsh offers --e, or not -e")
	}
	if strings.Contains(fish, " -l e ") || !strings.Contains(fish, " -s e ") {
		t.Errorf("fish offers --e, or not -e")
	}
	if !strings.Contains(fish, "-l lang -x -a 'js lua starlark'") {
		t.Errorf("fish does not complete --lang's values")
	}
}

// sandboxd completion without a shell prints its usage and nothing else,
// on stderr (nothing a shell would source reaches stdout), and exits 1; a
// shell it does not know, one error line.
func TestCompletionWithoutAShell(t *testing.T) {
	help := sandboxdCLI(t, "completion", "-h")
	r := sandboxdCLI(t, "completion")
	if r.code != 1 || r.stdout != "" || r.stderr != help.stdout || !strings.HasPrefix(r.stderr, "Usage: sandboxd completion bash|zsh|fish\n") ||
		strings.Contains(r.stderr, "Exit codes") || strings.Contains(r.stderr, "Flags:") {
		t.Errorf("sandboxd completion: want exit 1 and its usage only on stderr (that of -h: %q), got %s", help.stdout, r)
	}
	if r := sandboxdCLI(t, "completion", "tcsh"); r.code != 1 || r.stdout != "" || r.stderr != "sandboxd: unknown shell \"tcsh\": give bash, zsh or fish\n" {
		t.Errorf("sandboxd completion tcsh: %s", r)
	}
}

// zsh and fish parse their scripts, and fish completes from it, where they
// are installed (Debian's zsh and fish packages; CI has neither).
func TestZshAndFishScriptsParse(t *testing.T) {
	cmds := shellCommands()
	ran := 0
	if _, err := exec.LookPath("zsh"); err == nil {
		ran++
		path := writeFile(t, t.TempDir(), "_sandboxd", zshCompletion(cmds))
		if out, err := exec.Command("zsh", "-n", path).CombinedOutput(); err != nil {
			t.Errorf("zsh -n: %v\n%s", err, out)
		}
	}
	if _, err := exec.LookPath("fish"); err == nil {
		ran++
		path := writeFile(t, t.TempDir(), "sandboxd.fish", fishCompletion(cmds))
		out, err := exec.Command("fish", "--no-config", "-c", "source "+path+`; complete -C "sandboxd run --table-e"; complete -C "sandboxd serve --framing "`).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "--table-elements\t") || !strings.Contains(string(out), "\nndjson\t") {
			t.Errorf("fish: %v\n%s", err, out)
		}
	}
	if ran == 0 {
		t.Skip("neither zsh nor fish is installed")
	}
}

func TestManPageListsEveryFlag(t *testing.T) {
	page := manPage()
	sets := withFlags(t)
	for cmd, fs := range sets {
		text := section(t, page, ".SS \"sandboxd "+roff(cmd)+"\"\n", "\n.S")
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.Contains(text, `\fB`+roff(flagWord(f.Name))+`\fR`) {
				t.Errorf("the man page's %s has no %s", cmd, flagWord(f.Name))
			}
		})
	}
	for _, c := range commands {
		if !strings.Contains(page, `\fBsandboxd `+roff(c.name)+`\fR`) {
			t.Errorf("the man page's synopsis has no %s", c.name)
		}
	}
	if _, err := exec.LookPath("groff"); err != nil {
		return
	}
	cmd := exec.Command("groff", "-man", "-Tutf8", "-ww", "-z")
	cmd.Stdin = strings.NewReader(page)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("groff warns about the man page: %v\n%s", err, out)
	}
}

// writeFile writes text to dir/name and returns its path.
func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestWantsWASI(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"g.wasm", "--wasi"}, true},
		{[]string{"-wasi", "g.wasm"}, true},
		{[]string{"g.wasm", "--wasi=1"}, true},
		{[]string{"g.wasm", "-wasi=true"}, true},
		{[]string{"g.wasm", "--wasi=false"}, false},
		{[]string{"g.wasm", "--wasi=0"}, false},
		{[]string{"g.wasm", "--", "--wasi"}, false},
		{[]string{"wasi", "--wasix"}, false},
		{[]string{"g.wasm"}, false},
	} {
		if got := wantsWASI(c.args); got != c.want {
			t.Errorf("wantsWASI(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

// sandboxdCLI runs the binary with args under a hang bound.
func sandboxdCLI(t *testing.T, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return cliResult{stdout: stdout.String(), stderr: stderr.String(), code: exitCode(err)}
}

// Through the binary: what -h shows of the modes, the new commands, and
// the statuses of usage errors (1 for a command's, 2 for no command or an
// unknown one).
func TestCLIUsageStatuses(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // in stdout
	}{
		{[]string{"run", "--help"}, "-wasi\n"},
		{[]string{"run", "--wasi", "-h"}, "-table-elements uint"},
		{[]string{"run", "--wasi", "-h"}, "memory cap in MiB (all linear memories and table storage together)"},
		{[]string{"call", "-h"}, "-memories uint"},
		{[]string{"completion", "bash"}, "complete -F _sandboxd sandboxd"},
		{[]string{"man"}, ".TH SANDBOXD 1"},
	} {
		if r := sandboxdCLI(t, c.args...); r.code != 0 || !strings.Contains(r.stdout, c.want) || r.stderr != "" {
			t.Errorf("sandboxd %s: want exit 0 and %q on stdout, got %s", strings.Join(c.args, " "), c.want, r)
		}
	}
	for _, args := range [][]string{{"completion", "tcsh"}, {"man", "extra"}} {
		if r := sandboxdCLI(t, args...); r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "sandboxd") {
			t.Errorf("sandboxd %s: want exit 1 with the problem on stderr only, got %s", strings.Join(args, " "), r)
		}
	}
	// A bad flag: the problem and where the flags are, in one line (a
	// parent that keeps the tail of a sidecar's stderr keeps the problem).
	if r := sandboxdCLI(t, "serve", "--bogus"); r.stderr != "sandboxd: unknown flag: --bogus (sandboxd serve -h lists the flags)\n" {
		t.Errorf("sandboxd serve --bogus: stderr %q", r.stderr)
	}
	// No command: the usage on stdout, exit 2; an unknown one: on stderr.
	if r := sandboxdCLI(t); r.code != 2 || !strings.Contains(r.stdout, "sandboxd serve [flags]") || r.stderr != "" {
		t.Errorf("sandboxd: want exit 2 with the usage on stdout, got %s", r)
	}
	if r := sandboxdCLI(t, "bogus"); r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, `unknown command "bogus"`) {
		t.Errorf("sandboxd bogus: want exit 2 with the usage on stderr, got %s", r)
	}
}

// The README's list of exit codes is the table of kinds (with the notes
// -h shows): exitCodes, backquotes aside.
func TestReadmeExitCodes(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, list, ok := strings.Cut(string(readme), "checks this\nlist against the table of kinds): ")
	if !ok {
		t.Fatal("README.md has no list of exit codes (after \"checks this list against the table of kinds): \")")
	}
	list, _, _ = strings.Cut(list, ". ")
	list = strings.Join(strings.Fields(strings.ReplaceAll(list, "`", "")), " ")
	if list != exitCodes() {
		t.Errorf("README.md lists the exit codes\n%s\nthe table of kinds has\n%s", list, exitCodes())
	}
}
