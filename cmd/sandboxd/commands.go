package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sandboxd/sandboxd/protocol"
)

// A command is one of sandboxd's commands as the usage, each command's
// -h, the man page and the completion scripts describe it. The flags are
// not written down here: they are the FlagSet the command parses its
// arguments with (see flagsOf), so no description can list a flag the
// command does not take, or miss one.
type command struct {
	name     string // what follows "sandboxd": "run", "run --wasi"
	synopsis string // what follows the name in a usage line ("FILE [flags]")
	summary  string // one line, for sandboxd help
	about    string // paragraphs for -h and the man page, lines of at most 80 columns
}

var commands = []command{
	{name: "serve", synopsis: "[flags]", summary: "serve JSON-RPC on stdin/stdout (see docs/protocol.md)",
		about: `Serves the JSON-RPC 2.0 protocol of docs/protocol.md on stdin and stdout,
framed like a language server (Content-Length headers) or one message a
line (--framing ndjson), for a parent process that spawns it; its own log
goes to stderr. A request's limits default to the --default-* flags and may
be raised up to the --max-* flags. It exits 0 when its input ends or after
shutdown and exit, 1 after exit without shutdown or for bad flags, and 2
when its input cannot be split into messages.`},
	{name: "mcp", synopsis: "[flags]", summary: "serve MCP tools on stdin/stdout, for AI agents and editors (see docs/mcp.md)",
		about: `Serves the Model Context Protocol on stdin and stdout (one JSON message a
line), for an AI agent or an editor that spawns it: tools that run a WASI
program (run_wasi), call an export of a wasm module (run_export), call an
Extism plugin function (call_plugin) and, with the snippet runtimes
installed (--runtimes), evaluate JavaScript, Lua or Starlark (run_snippet,
and session_create, session_eval, session_close to keep an interpreter's
state), each under the fuel, deadline and memory fences. A call's limits
default to the --default-* flags (a snippet's memoryBytes to the larger of
--default-memory-bytes and its language's need) and may not pass the
--max-* flags. Modules are read from files only inside --allow-path-dir, and
WASI programs get host directories only inside --allow-dir: by default
nothing on the host is readable or writable. While more than
--output-high-water bytes wait for a client that does not read, no further
request is read and no run starts. Its log goes to stderr. It
exits 0 when its input ends, 1 for bad flags.`},
	{name: "run", synopsis: "FILE [flags]", summary: "run one export of a .wasm or .wat file",
		about: `Runs one export of a .wasm or .wat FILE under the fuel, deadline and memory
fences, with the arguments given by --arg, and prints its results on stdout
("result: ...") and the fuel consumed and the peak memory on stderr (with
--json, one JSON object on stdout instead). Guest log lines (--allow-log)
are printed as the guest writes them. A WASI program runs with --wasi
(sandboxd run --wasi -h).`},
	{name: "run --wasi", synopsis: "FILE [flags] [-- ARGS...]",
		summary: "run a WASI preview1 program (its stdio and exit code pass through)",
		about: `Runs a WASI preview1 program (docs/wasi.md). Its argv is the file's base name
and ARGS; its environment exactly the --env pairs; its stdin this command's
stdin (read to the end first, at most 64 MiB); its stdout and stderr this
command's, unchanged, as it writes them. --dir preopens a host directory at
GUEST (default: HOST as given), read-only unless :rw; --file makes HOSTFILE's
bytes a read-only file at the absolute path GUEST. The exit status is the
guest's exit code, or for a failure its kind's code.`},
	{name: "call", synopsis: "FILE FUNCTION [flags]",
		summary: "call an Extism plugin function; its output goes to stdout",
		about: `Calls an Extism plugin function (a module importing extism:host/env) and
writes the bytes it outputs to stdout, unchanged. With --loop N the same
instance is called N times (vars persist between the calls); when N > 1
each output is followed by a newline (with N = 1 the bytes are exactly the
output, as without --loop). Log lines ([guest log] LEVEL: line) and the
plugin's WASI stdout and stderr go to stderr. A plugin error exits 10 (the
plugin's message is printed on stderr).`},
	{name: "eval", synopsis: "--lang js|lua|starlark FILE|-|-e CODE [flags]",
		summary: "evaluate a snippet of JavaScript, Lua or Starlark (docs/snippets.md)",
		about: `Evaluates a snippet in a fresh interpreter of its language, a runtime that
runs under the fuel, deadline and memory fences like any guest (docs/
snippets.md). The snippet is FILE, stdin (-) or the text of -e; --input is
its global input. What it prints passes through to stdout and stderr as it
prints it; its value follows on stdout as one line of JSON (with --json, one
JSON object instead). A script error (a syntax error, an uncaught
exception) exits 13 with the language's message, position and stack trace
on stderr. The runtimes are found next to the binary (make build builds and
compiles them); one not yet compiled for this build is compiled once, with
a notice on stderr.`},
	{name: "completion", synopsis: "bash|zsh|fish", summary: "print a shell completion script",
		about: `Prints a completion script for the shell, made from the same flag tables as
-h. make install installs all three; to try one in the current shell:
source <(sandboxd completion bash).`},
	{name: "man", summary: "print the manual page (roff; view it with: sandboxd man | man -l -)"},
	{name: "version", summary: "print the version (also --version)"},
	{name: "help", summary: "print this usage (also -h, --help)"},
}

// findCommand is the command named name ("run --wasi"), or nil.
func findCommand(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// usage is sandboxd's own usage: every command with its summary.
func usage() string {
	var b strings.Builder
	b.WriteString("sandboxd runs untrusted WebAssembly under fuel, deadline and memory fences.\n\nUsage:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-46s %s\n", strings.TrimSpace("sandboxd "+c.name+" "+c.synopsis), c.summary)
	}
	b.WriteString("\nRun \"sandboxd COMMAND -h\" for a command's flags, \"sandboxd man\" for all of them.\n")
	return b.String()
}

// printCommandUsage is the -h of the command whose FlagSet is fs: its
// synopsis, what it does, its flags (if it has any) and, for the commands
// that run a guest, the exit codes.
func printCommandUsage(fs *flag.FlagSet) {
	w := fs.Output()
	c := findCommand(strings.TrimPrefix(fs.Name(), "sandboxd "))
	if c == nil { // every FlagSet is named after its command (TestEveryCommandHasUsage)
		fmt.Fprintf(w, "Usage of %s:\n", fs.Name())
		fs.PrintDefaults()
		return
	}
	about := c.about
	if about == "" {
		about = strings.ToUpper(c.summary[:1]) + c.summary[1:] + "."
	}
	fmt.Fprintf(w, "%s\n\n%s\n", usageLine(*c), about)
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprint(w, "\nFlags:\n")
		fs.PrintDefaults()
	}
	if runsGuest[c.name] {
		fmt.Fprintf(w, "\n%s\n", wrap("Exit codes: "+exitCodes()+".", 80))
	}
}

// usageLine is the first line of c's -h: "Usage: sandboxd run FILE [flags]".
func usageLine(c command) string {
	return strings.TrimSpace("Usage: sandboxd " + c.name + " " + c.synopsis)
}

// runsGuest lists the commands whose exit status is a run's: their -h
// lists the exit codes.
var runsGuest = map[string]bool{"run": true, "run --wasi": true, "call": true, "eval": true}

// exitCodes lists the exit codes of the commands that run a guest, from
// the table of kinds: "0 ok, 1 host (or a usage error), 2 fuel_exhausted, …".
func exitCodes() string {
	parts := []string{"0 ok"}
	for _, k := range protocol.Kinds() {
		parts = append(parts, fmt.Sprintf("%d %s%s", k.ExitCode, k.Kind, exitCodeNotes[k.Kind]))
	}
	return strings.Join(parts, ", ")
}

var exitCodeNotes = map[protocol.Kind]string{
	protocol.KindHost:        " (or a usage error)",
	protocol.KindCancelled:   " (SIGINT)",
	protocol.KindPluginError: " (sandboxd call)",
	protocol.KindScriptError: " (sandboxd eval)",
}

// wrap fills text into lines of at most width columns.
func wrap(text string, width int) string {
	var b strings.Builder
	n := 0
	for _, word := range strings.Fields(text) {
		if n > 0 && n+1+len(word) > width {
			b.WriteByte('\n')
			n = 0
		} else if n > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}

// flagTable, passed as a command's stdout, asks it for its flags instead
// of running it: parseCommandLine hands it the command's FlagSet, with
// every flag declared, and the command returns at once. The man page and
// the completion scripts are made this way from the FlagSets the commands
// really parse.
type flagTable struct{ fs *flag.FlagSet }

func (*flagTable) Write(p []byte) (int, error) { return len(p), nil }

// flagsOf is the FlagSet of a command, or nil for one without flags.
func flagsOf(c command) *flag.FlagSet {
	var t flagTable
	dispatch(strings.Fields(c.name), nil, &t, io.Discard)
	return t.fs
}

// flagInfo is one flag as the man page and the completion scripts show it.
type flagInfo struct {
	name, usage, def string
	arg              string // the placeholder of its value ("uint", "string"); "" for a boolean flag
}

// flagInfos lists fs's flags in name order.
func flagInfos(fs *flag.FlagSet) []flagInfo {
	var out []flagInfo
	fs.VisitAll(func(f *flag.Flag) {
		arg, text := flag.UnquoteUsage(f)
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			arg = ""
		}
		def := f.DefValue
		if def == "0" || def == "false" || (arg != "" && def == "") {
			def = "" // PrintDefaults shows no default for these
		}
		out = append(out, flagInfo{name: f.Name, usage: text, def: def, arg: arg})
	})
	return out
}
