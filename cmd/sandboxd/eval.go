package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/snippet"
)

// maxCLICodeBytes bounds a snippet read from a file or stdin.
const maxCLICodeBytes = 16 << 20

// evalMain is `sandboxd eval --lang LANG [FILE|-]`: one snippet in a
// fresh interpreter (docs/snippets.md). The snippet's stdout and stderr
// pass through as it writes them; its value follows on stdout, one JSON
// line. A script error exits 13 with the language's text on stderr; a
// fence, its kind's code.
func evalMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sandboxd eval", flag.ContinueOnError)
	langName := fs.String("lang", "", "the language: js, lua or starlark")
	code := fs.String("e", "", "the snippet, as text (instead of FILE)")
	input := fs.String("input", "", "the snippet's input, one JSON value: its global input (default null)")
	asJSON := fs.Bool("json", false, "print one JSON object: the value, the usage, stdout and stderr; or {\"error\": ...}")
	runtimes := fs.String("runtimes", "", "the runtimes' directory (default $"+snippet.RuntimesEnv+", else runtimes/ next to the binary)")
	readLimits := cliLimitFlags(fs, map[string]string{
		"memory-mb":          "memory cap in MiB, the interpreter's own included (default: the language's: js 64, lua and starlark 32)",
		"output-bytes":       "bytes of the snippet's stdout and of its stderr kept (each), and the most its value's JSON may take",
		"compile-timeout-ms": "accepted for symmetry; a runtime is compiled once, under its own limits",
		"compile-memory-mb":  "accepted for symmetry; a runtime is compiled once, under its own limits",
	})
	fs.Lookup("memory-mb").DefValue = "0" // the language's, not the run default
	positional, status, ok := parseCommandLine(fs, args, stdout, stderr)
	if !ok {
		return status
	}
	fail := func(format string, a ...any) int {
		sayf(stderr, format, a...)
		return exitUsage
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	lang, err := protocol.ParseLanguage(*langName)
	if err != nil {
		return fail("--lang: %v", err)
	}
	var src []byte
	switch {
	case len(positional) > 1:
		return fail("give one FILE (or - for stdin), or the snippet with -e")
	case len(positional) == 1 && given["e"]:
		return fail("give FILE or -e, not both")
	case given["e"]:
		src = []byte(*code)
	case len(positional) == 0:
		return fail("give the snippet: a FILE, - for stdin, or -e CODE")
	case positional[0] == "-":
		if src, err = io.ReadAll(io.LimitReader(stdin, maxCLICodeBytes+1)); err == nil && len(src) > maxCLICodeBytes {
			err = fmt.Errorf("larger than %d bytes", maxCLICodeBytes)
		}
		if err != nil {
			return fail("stdin: %v", err)
		}
	default:
		if src, err = readBounded(positional[0], maxCLICodeBytes); err != nil {
			return fail("%v", err)
		}
	}
	var in []byte
	if given["input"] {
		in = []byte(*input)
		if err := protocol.CheckEvalInput(in); err != nil {
			return fail("--%v", err)
		}
	}
	all, err := readLimits()
	if err != nil {
		return fail("%v", err)
	}
	l := givenLimits(all, given) // the rest: the language's defaults

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	eng, err := sandbox.NewEngine(sandbox.Config{OneShot: true})
	if err != nil {
		return fail("%v", err)
	}
	defer eng.Close()
	// The runtimes next to the binary are its own: compiling one there
	// removes what other builds left (a directory given is not pruned).
	prune := *runtimes == "" && os.Getenv(snippet.RuntimesEnv) == ""
	runner, err := snippet.New(eng, snippet.Config{Dir: *runtimes, Spares: snippet.NoSpares, Maximums: limits.HardMaximums(), PruneStale: prune,
		Notice: func(m string) { sayf(stderr, "%s", m) }})
	if err != nil {
		return fail("%v", err)
	}
	defer runner.Close()

	streams := newStreamPrinter(stdout, stderr)
	output := streams.add
	if *asJSON {
		output = nil // in the object
	}
	o, err := runner.Eval(ctx, protocol.Eval{Language: lang, Limits: l,
		Snippet: protocol.Snippet{Code: string(src), Input: in, Output: output}})
	streams.close() // the snippet's output before its value or error
	out := &cliOutput{stdout: stdout, stderr: stderr, json: *asJSON}
	if err != nil {
		if *asJSON {
			out.printJSON(rpc.ErrorResponse{Error: rpc.ErrorObject(err)})
			return sandbox.KindOf(err).Info().ExitCode
		}
		return evalFailure(stderr, err)
	}
	if *asJSON {
		out.printJSON(protocol.EvalResultOf(lang, o))
		return 0
	}
	fmt.Fprintf(stdout, "%s\n", escapeJSON(o.Value))
	if o.Output != nil && o.Output.Truncated {
		sayf(stderr, "output truncated to %d bytes a stream (--output-bytes)", limitsOf(lang, l).OutputBytes)
	}
	return 0
}

// givenLimits keeps of all the limits whose flags were given; the others
// are zero, which the Runner reads as the language's default.
func givenLimits(all limits.Limits, given map[string]bool) limits.Limits {
	fields := map[string]limits.Field{}
	for _, f := range limits.Fields() {
		fields[f.Name] = f
	}
	var l limits.Limits
	for _, c := range cliLimits {
		if given[c.flag] {
			fields[c.field].Set(&l, fields[c.field].Get(all))
		}
	}
	return l
}

// limitsOf are the limits an evaluation in lang ran under, given l.
func limitsOf(lang protocol.Language, l limits.Limits) limits.Limits {
	d := snippet.Defaults(lang)
	for _, f := range limits.Fields() {
		if v := f.Get(l); v != 0 {
			f.Set(&d, v)
		}
	}
	return d
}

// evalFailure prints why an evaluation failed: for a script error the
// language's own text (its stack trace) and the position, for a fence
// the error and the usage, as run does.
func evalFailure(stderr io.Writer, err error) int {
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Kind != sandbox.KindScriptError || se.Script == nil {
		return (&cliOutput{stderr: stderr}).failure(err)
	}
	s := se.Script
	sayf(stderr, "%s: %s", se.Kind, escapeText(se.Message))
	if s.Line > 0 {
		fmt.Fprintf(stderr, "at line %d, column %d\n", s.Line, s.Column)
	}
	if s.Text != "" && s.Text != se.Message {
		for _, line := range strings.Split(strings.TrimRight(s.Text, "\n"), "\n") {
			fmt.Fprintf(stderr, "  %s\n", escapeText(strings.ReplaceAll(line, "\t", "  ")))
		}
	}
	return se.Kind.Info().ExitCode
}
