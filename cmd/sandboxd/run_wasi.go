package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox"
)

// maxCLIStdinBytes bounds what `sandboxd run --wasi` reads from its stdin
// for the guest (the guest's stdin is bytes, read before the run).
const maxCLIStdinBytes = 64 << 20

// wantsWASI says whether a `sandboxd run` command line asks for WASI
// (--wasi before any "--", or --wasi=V for any true V the flag package
// reads: run's own --wasi flag only lists the mode in -h).
func wantsWASI(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if name != "wasi" || !strings.HasPrefix(a, "-") {
			continue
		}
		if on, err := strconv.ParseBool(value); !hasValue || (err == nil && on) {
			return true
		}
	}
	return false
}

// runWASIMain is `sandboxd run FILE --wasi ...`: the CLI's stdin is the
// guest's stdin, the guest's stdout and stderr stream through unchanged as
// it writes them (sandboxd's own messages go to stderr, and only when the
// run fails), and the CLI exits with the guest's exit code; a fence or
// another failure exits with its kind's code.
func runWASIMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var guestArgs []string
	for i, a := range args {
		if a == "--" {
			args, guestArgs = args[:i], args[i+1:]
			break
		}
	}
	fs := flag.NewFlagSet("sandboxd run --wasi", flag.ContinueOnError)
	fs.Bool("wasi", true, "grant WASI preview1 (this mode)")
	invoke := fs.String("invoke", "", "the export to call (default _start)")
	var envs, dirs, files multiFlag
	fs.Var(&envs, "env", "an environment variable NAME=VALUE (repeat for each)")
	fs.Var(&dirs, "dir", "preopen HOST[:GUEST][:rw] (repeat for each)")
	fs.Var(&files, "file", "a read-only file GUEST=HOSTFILE (repeat for each)")
	readLimits := cliLimitFlags(fs, nil)
	maxOpenFiles := fs.Int("max-open-files", sandbox.DefaultMaxOpenFiles, "host descriptors the guest may hold, preopens included (past it path_open gets EMFILE)")
	seed := fs.String("seed", "", "make random_get deterministic, seeded with this unsigned integer")
	asJSON := fs.Bool("json", false, "print one JSON object, the sidecar's run result (stdout and stderr inside it) or {\"error\": ...}, instead of passing the output through")
	positional, status, ok := parseCommandLine(fs, args, stdout, stderr)
	if !ok {
		return status
	}
	fail := func(format string, a ...any) int {
		sayf(stderr, format, a...)
		return exitUsage
	}
	if len(positional) != 1 {
		return fail("give exactly one FILE (.wasm or .wat)")
	}
	l, err := readLimits()
	if err != nil {
		return fail("%v", err)
	}
	grant := &sandbox.WASI{Argv0: guestArgv0(positional[0]), Args: guestArgs, Env: map[string]string{}}
	for _, kv := range envs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fail("--env %q: want NAME=VALUE", kv)
		}
		grant.Env[k] = v
	}
	var allowed []string
	for _, d := range dirs {
		dir, err := parseDirFlag(d)
		if err != nil {
			return fail("--dir %q: %v", d, err)
		}
		grant.Dirs = append(grant.Dirs, dir)
		allowed = append(allowed, dir.Host) // the CLI's user is the operator
	}
	fileFlags := map[string]string{} // guest path → its --file flag
	for _, f := range files {
		guest, host, ok := strings.Cut(f, "=")
		if !ok || guest == "" || host == "" {
			return fail("--file %q: want GUEST=HOSTFILE", f)
		}
		b, err := readBounded(host, maxCLIStdinBytes)
		if err != nil {
			return fail("--file %q: %v", f, err)
		}
		if grant.Files == nil {
			grant.Files = map[string][]byte{}
		}
		grant.Files[guest] = b
		fileFlags[guest] = f
	}
	// A grant the engine would refuse is a usage error, named by its flag,
	// found before the module is compiled.
	grantFailure := func(ge *sandbox.GrantError) int {
		return fail("%s", escapeText(cliGrantField(ge, dirs, fileFlags)+": "+ge.Problem))
	}
	var ge *sandbox.GrantError
	if errors.As(grant.Check(), &ge) {
		return grantFailure(ge)
	}
	caps := sandbox.Capabilities{WASI: grant}
	if *seed != "" {
		v, err := sandbox.ParseValue(sandbox.I64, *seed)
		if err != nil || strings.HasPrefix(*seed, "-") {
			return fail("--seed: %q is not an unsigned integer", *seed)
		}
		caps.Random, caps.Seed = true, v.Bits
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *maxOpenFiles < 1 {
		return fail("--max-open-files: must be > 0")
	}
	eng, err := sandbox.NewEngine(sandbox.Config{WASIDirs: allowed, OneShot: true, MaxOpenFiles: *maxOpenFiles})
	if err != nil {
		return fail("%v", err)
	}
	defer eng.Close()
	out := &cliOutput{stdout: stdout, stderr: stderr, json: true}
	failure := func(err error) int {
		if *asJSON {
			return out.failure(err)
		}
		return wasiFailure(stderr, err)
	}
	mod, _, err := eng.Compile(ctx, sandbox.Source{Path: positional[0], CompileTimeout: l.CompileTimeout, CompileMemoryBytes: l.CompileMemoryBytes})
	if err != nil {
		return failure(err)
	}
	in, err := readStdin(ctx, stdin, l.Timeout)
	if se := (*sandbox.Error)(nil); errors.As(err, &se) {
		return failure(err)
	}
	if err != nil {
		return fail("%v", err)
	}
	grant.Stdin = in

	req := sandbox.Request{Module: mod, Function: *invoke, Limits: l, Capabilities: caps}
	streams := newStreamPrinter(stdout, stderr)
	if !*asJSON { // with --json the output is inside the one JSON object
		req.Output = streams.add
	}
	res, err := eng.Run(ctx, req)
	streams.close() // all the guest's output is out before our own lines
	if err != nil {
		if errors.As(err, &ge) {
			return grantFailure(ge)
		}
		return failure(err)
	}
	if *asJSON {
		out.printJSON(protocol.RunResult{
			Values: protocol.EncodeValues(res.Values), FuelConsumed: res.FuelConsumed, PeakMemoryBytes: res.PeakMemoryBytes,
			ElapsedMicros: res.Elapsed.Microseconds(), ModuleID: mod.ID, LogLines: res.LogLines, LogTruncated: res.LogTruncated,
			WASIResult: &protocol.WASIResult{ExitCode: res.ExitCode, Stdout: res.Output.Stdout, Stderr: res.Output.Stderr,
				OutputTruncated: res.Output.Truncated},
		})
		return res.ExitCode
	}
	if res.Output != nil && res.Output.Truncated {
		sayf(stderr, "output truncated: at most %d bytes per stream (--output-bytes), and its pieces' wire size at most %d",
			l.OutputBytes, sandbox.OutputWireBudget(l.OutputBytes))
	}
	return res.ExitCode
}

// guestArgv0 is the guest's argv[0] for the module file path: its base
// name, with any bytes that are not UTF-8 (a file may be named so; a
// guest's arguments may not) replaced by U+FFFD.
func guestArgv0(path string) string {
	return strings.ToValidUTF8(filepath.Base(path), "\uFFFD")
}

// cliGrantField names the command-line input behind a grant's wire field:
// "--dir \"/srv:/data\"" for capabilities.wasi.dirs[0].host.
func cliGrantField(ge *sandbox.GrantError, dirs []string, fileFlags map[string]string) string {
	field := strings.TrimPrefix(ge.Field, protocol.WASIField)
	var i int
	switch {
	case strings.HasPrefix(field, ".dirs["):
		if _, err := fmt.Sscanf(field, ".dirs[%d]", &i); err == nil && i < len(dirs) {
			return fmt.Sprintf("--dir %q", dirs[i])
		}
		return "--dir"
	case strings.HasPrefix(field, ".files["):
		// The field quotes the guest path, cut when it is long
		// (protocol.Quote): find the flag whose path quotes the same.
		guests := make([]string, 0, len(fileFlags))
		for g := range fileFlags {
			guests = append(guests, g)
		}
		sort.Strings(guests)
		for _, g := range guests {
			if field == ".files["+protocol.Quote(g)+"]" || field == ".files["+strconv.Quote(g)+"]" {
				return fmt.Sprintf("--file %q", fileFlags[g])
			}
		}
		return "--file"
	case field == ".files":
		return "--file"
	case strings.HasPrefix(field, ".env"):
		return "--env"
	case strings.HasPrefix(field, ".args["):
		if _, err := fmt.Sscanf(field, ".args[%d]", &i); err == nil {
			return fmt.Sprintf("argument %d after --", i+1)
		}
	}
	return ge.Field
}

// parseDirFlag reads HOST[:GUEST][:rw] (or :ro).
func parseDirFlag(s string) (sandbox.Dir, error) {
	parts := strings.Split(s, ":")
	d := sandbox.Dir{}
	if n := len(parts); n > 1 && (parts[n-1] == "rw" || parts[n-1] == "ro") {
		d.Writable = parts[n-1] == "rw"
		parts = parts[:n-1]
	}
	switch len(parts) {
	case 1:
		d.Host, d.Guest = parts[0], parts[0]
	case 2:
		d.Host, d.Guest = parts[0], parts[1]
	default:
		return d, errors.New("want HOST[:GUEST][:rw]")
	}
	if d.Host == "" || d.Guest == "" {
		return d, errors.New("want HOST[:GUEST][:rw]")
	}
	return d, nil
}

func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = fmt.Errorf("larger than %d bytes", max)
	}
	return b, err
}

// wasiFailure prints a failed run on stderr (after the guest's output) and
// returns its kind's exit code.
func wasiFailure(stderr io.Writer, err error) int {
	sayf(stderr, "%s", escapeText(err.Error())) // WASI is granted: no flag mends a WASI import refused here
	return sandbox.KindOf(err).Info().ExitCode
}

// streamPrinter writes the guest's output through a printQueue:
// Request.Output must not block, so a stalled stdout cannot hold the guest
// inside fd_write past its deadline. What it queues is bounded by the run's
// outputBytes per stream.
type streamPrinter struct{ q *printQueue[chunk] }

type chunk struct {
	stderr bool
	data   []byte
}

func newStreamPrinter(stdout, stderr io.Writer) streamPrinter {
	return streamPrinter{newPrintQueue(func(chunks []chunk) {
		for _, c := range chunks {
			w := stdout
			if c.stderr {
				w = stderr
			}
			_, _ = w.Write(c.data) // a closed stdout only loses the output
		}
	})}
}

func (p streamPrinter) add(stream string, data []byte) {
	p.q.add(chunk{stream == sandbox.StreamStderr, data})
}

// close waits until everything queued is written.
func (p streamPrinter) close() { p.q.close() }

// readStdin reads the command's stdin, the guest's, to its end (at most
// maxCLIStdinBytes), as far as SIGINT (ctx) and the run's deadline let
// it: a stdin that stays open would otherwise hold the command before the
// guest ever started, deaf to both. The deadline counts from the start of
// the read, and the guest then gets its own (a run takes at most twice
// timeout). A stop is the kind it is (cancelled, timeout).
func readStdin(ctx context.Context, stdin io.Reader, timeout time.Duration) ([]byte, error) {
	type read struct {
		b   []byte
		err error
	}
	done := make(chan read, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(stdin, maxCLIStdinBytes+1))
		done <- read{b, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-done:
		switch {
		case r.err != nil:
			return nil, fmt.Errorf("reading stdin: %v", r.err)
		case len(r.b) > maxCLIStdinBytes:
			return nil, fmt.Errorf("stdin is larger than %d bytes", maxCLIStdinBytes)
		}
		return r.b, nil
	case <-ctx.Done():
		return nil, &sandbox.Error{Kind: sandbox.KindCancelled, Message: "cancelled while reading stdin"}
	case <-t.C:
		ms := uint64(timeout / time.Millisecond)
		return nil, &sandbox.Error{Kind: sandbox.KindTimeout, TimeoutMs: ms,
			Message: fmt.Sprintf("deadline of %d ms exceeded while reading stdin (it was not closed)", ms)}
	}
}
