// Command sandboxd runs untrusted WebAssembly under fuel, deadline and
// memory fences.
//
//	sandboxd serve [flags]                 the JSON-RPC sidecar on stdin/stdout
//	sandboxd mcp [flags]                   an MCP server on stdin/stdout (tools for agents)
//	sandboxd run FILE [flags]              one run, for shell users
//	sandboxd run FILE --wasi [-- ARGS...]  a WASI program
//	sandboxd call FILE FUNCTION            an Extism plugin function, output on stdout
//	sandboxd eval --lang js FILE|-|-e CODE a snippet of JavaScript, Lua or Starlark
//	sandboxd completion bash|zsh|fish      a shell completion script
//	sandboxd man                           the manual page
//	sandboxd version                       (or --version)
//
// See README.md and docs/protocol.md; commands.go lists the commands.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sandboxd/sandboxd/sandbox"
)

// version is reported by `sandboxd version` and the sidecar's initialize.
const version = "0.1.0"

// exitNoCommand is the status of sandboxd without a command, or with one it
// does not know: 2, as Go's flag package and most CLIs give a usage error.
// (A command's own usage errors exit 1, the host kind's code: 2 is
// fuel_exhausted for the commands that run a guest.)
const exitNoCommand = 2

func main() {
	if sandbox.IsCompileChild() { // the engine's compile fence re-executes us
		os.Exit(sandbox.CompileChildMain())
	}
	os.Exit(dispatch(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func dispatch(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage())
		return exitNoCommand
	}
	switch args[0] {
	case "serve":
		return serveMain(args[1:], stdin, stdout, stderr)
	case "mcp":
		return mcpMain(args[1:], stdin, stdout, stderr) // mcp.go
	case "run":
		if wantsWASI(args[1:]) {
			return runWASIMain(args[1:], stdin, stdout, stderr) // run_wasi.go
		}
		return runMain(args[1:], stdout, stderr)
	case "call":
		return callMain(args[1:], stdout, stderr) // call.go
	case "eval":
		return evalMain(args[1:], stdin, stdout, stderr) // eval.go
	case "completion":
		return completionMain(args[1:], stdout, stderr) // completion.go
	case "man":
		return manMain(args[1:], stdout, stderr) // man.go
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "sandboxd %s (wasmtime-go %s)\n", version, wasmtimeVersion())
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage())
		return 0
	}
	fmt.Fprintf(stderr, errorPrefix+"unknown command %q\n\n%s", args[0], usage())
	return exitNoCommand
}

// errorPrefix begins every line of sandboxd's own on stderr that says why
// a command failed or warns (output truncated), whatever the command; an
// error's kind, where it has one, follows it: "sandboxd: timeout: ...".
// What is not sandboxd's own (the guest's output) or not an error (the
// usage figures, a usage, a script error's position and stack trace) has
// none. TestCLIErrorLinesArePrefixed runs each command's failure paths.
const errorPrefix = "sandboxd: "

// sayf writes one line of sandboxd's own on stderr: errorPrefix and the
// formatted text.
func sayf(w io.Writer, format string, a ...any) {
	fmt.Fprintf(w, errorPrefix+format+"\n", a...)
}

// parseCommandLine parses a command's flags (before or after positional
// arguments). -h or --help prints the command's usage to stdout and ends
// the command with status 0; a bad flag prints one error line to stderr,
// the problem with the flag as the user typed it (--bogus or -bogus) and
// where the flags are listed (not the flags themselves: a parent keeping
// the tail of a sidecar's stderr keeps the problem), and ends it with
// status 1. ok is false when the command must end with status. A
// *flagTable as stdout only takes fs (see flagsOf).
func parseCommandLine(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (positional []string, status int, ok bool) {
	if t, isTable := stdout.(*flagTable); isTable {
		t.fs = fs
		return nil, 0, false
	}
	fs.Usage = func() {}     // printed below, on the stream that fits
	fs.SetOutput(io.Discard) // the flag package's own message: reworded below
	positional, err := parseInterspersed(fs, args)
	fs.SetOutput(stderr)
	fs.Usage = func() { printCommandUsage(fs) }
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		fs.SetOutput(stderr)
		return nil, 0, false
	case err != nil:
		sayf(stderr, "%s (%s -h lists the flags)", flagError(fs, args, err), fs.Name())
		return nil, exitUsage, false
	}
	return positional, 0, true
}

// flagError is the flag package's error about args, with the flag it
// names written as the user typed it: the package says -NAME whether the
// user typed -NAME or --NAME. After a failed Parse, fs.Args() is what
// follows the offending flag (and its value), so the flag is the last one
// among the arguments before that.
func flagError(fs *flag.FlagSet, args []string, err error) string {
	msg := strings.Replace(err.Error(), "flag provided but not defined: ", "unknown flag: ", 1)
	dashes := "-"
	consumed := len(args) - len(fs.Args())
	for i := 0; i < consumed && i < len(args); i++ { // the flag package's own walk
		s := args[i]
		if len(s) < 2 || s[0] != '-' {
			continue // a positional argument (parseInterspersed parses on after it)
		}
		if s == "--" {
			break
		}
		name := strings.TrimPrefix(s[1:], "-")
		dashes = s[:len(s)-len(name)]
		name, _, hasValue := strings.Cut(name, "=")
		f := fs.Lookup(name)
		if f == nil || hasValue {
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
			i++ // its value
		}
	}
	// Where the package's message names the flag, "-NAME" follows a fixed
	// phrase; a quoted value comes before it, only a fixed problem after.
	for _, m := range []struct{ start, before string }{
		{"unknown flag: ", "unknown flag: "},
		{"flag needs an argument: ", "flag needs an argument: "},
		{"invalid value ", " for flag "},
		{"invalid boolean value ", " for "},
	} {
		if !strings.HasPrefix(msg, m.start) {
			continue
		}
		if i := strings.LastIndex(msg, m.before+"-"); i >= 0 {
			j := i + len(m.before) // the dash
			return msg[:j] + dashes + msg[j+1:]
		}
	}
	return msg
}
