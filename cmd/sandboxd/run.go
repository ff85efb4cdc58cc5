package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/sandboxd/sandboxd/rpc"
	"github.com/sandboxd/sandboxd/sandbox"
)

// exitUsage is the status of a usage error (the host kind's code).
const exitUsage = 1

func runMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sandboxd run", flag.ContinueOnError)
	invoke := fs.String("invoke", "run", "the export to call")
	var argTexts multiFlag
	fs.Var(&argTexts, "arg", "an argument, parsed by the export's parameter type (repeat for each; floats accept nan, inf, -inf, -0 and 0x<bits>)")
	fs.Bool("wasi", false, "run a WASI preview1 program instead: its flags are listed by sandboxd run --wasi -h")
	readLimits := cliLimitFlags(fs, nil)
	allowLog := fs.Bool("allow-log", false, "grant host::log")
	seed := fs.String("seed", "", "grant host::random, seeded with this unsigned integer")
	allowClock := fs.Bool("allow-clock", false, "grant host::now_ns")
	asJSON := fs.Bool("json", false, "print one JSON object: the sidecar's run result, or {\"error\": ...}")
	positional, status, ok := parseCommandLine(fs, args, stdout, stderr)
	if !ok {
		return status
	}
	if len(positional) != 1 {
		sayf(stderr, "give exactly one FILE (.wasm or .wat)")
		return exitUsage
	}
	l, err := readLimits()
	if err != nil {
		sayf(stderr, "%v", err)
		return exitUsage
	}
	caps := sandbox.Capabilities{Log: *allowLog, Clock: *allowClock}
	if *seed != "" {
		v, err := sandbox.ParseValue(sandbox.I64, *seed)
		if err != nil || strings.HasPrefix(*seed, "-") {
			sayf(stderr, "--seed: %q is not an unsigned integer", *seed)
			return exitUsage
		}
		caps.Random, caps.Seed = true, v.Bits
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	eng, err := sandbox.NewEngine(sandbox.Config{OneShot: true})
	if err != nil {
		sayf(stderr, "%v", err)
		return exitUsage
	}
	defer eng.Close()

	out := &cliOutput{stdout: stdout, stderr: stderr, json: *asJSON, wasiHint: "this is a WASI program: run it with --wasi"}
	if err := eng.CheckWASIGrant(sandbox.Source{Path: positional[0]}, caps); err != nil {
		return out.failure(err) // before spending seconds compiling it
	}
	mod, _, err := eng.Compile(ctx, sandbox.Source{Path: positional[0], CompileTimeout: l.CompileTimeout, CompileMemoryBytes: l.CompileMemoryBytes})
	if err != nil {
		return out.failure(err)
	}
	var vals []sandbox.Value
	if exp, ok := mod.Export(*invoke); ok && exp.Kind == "func" && len(exp.Params) == len(argTexts) {
		for i, text := range argTexts {
			v, err := sandbox.ParseValue(sandbox.ValType(exp.Params[i]), text)
			if err != nil {
				sayf(stderr, "--arg %d: %v", i+1, err)
				return exitUsage
			}
			vals = append(vals, v)
		}
	} else {
		for range argTexts { // let the engine name the arity or export problem
			vals = append(vals, sandbox.Value{Type: "?"})
		}
	}
	logDest := stdout
	if *asJSON { // stdout carries exactly one JSON object
		logDest = stderr
	}
	logs := newLogPrinter(logDest)
	res, err := eng.Run(ctx, sandbox.Request{Module: mod, Function: *invoke, Args: vals, Limits: l, Capabilities: caps,
		Log: logs.add})
	logs.close() // every log line is out before the result
	if err != nil {
		return out.failure(err)
	}
	return out.success(mod, res)
}

// logPrinter prints guest log lines, escaped, through a printQueue:
// host::log only queues (the queue holds at most the run's logBytes, as
// every line costs at least its length).
type logPrinter struct{ *printQueue[string] }

func newLogPrinter(w io.Writer) logPrinter {
	bw := bufio.NewWriter(w)
	return logPrinter{newPrintQueue(func(lines []string) {
		for _, line := range lines {
			fmt.Fprintf(bw, "[guest log] %s\n", escapeText(line))
		}
		_ = bw.Flush() // a closed stdout only loses the lines
	})}
}

// cliOutput prints a run's outcome the way the CLI promises (after the
// logPrinter has printed the log lines): values on stdout, usage on
// stderr; or one JSON object. Guest text is escaped for the terminal (see
// escapeText).
type cliOutput struct {
	stdout, stderr io.Writer
	json           bool
	wasiHint       string // added to a WASI refusal (wasiRefused): only for a run that does not grant WASI
}

func (o *cliOutput) success(mod *sandbox.Module, res *sandbox.Result) int {
	if o.json {
		o.printJSON(rpc.RunResult{
			Values: rpc.EncodeValues(res.Values), FuelConsumed: res.FuelConsumed, PeakMemoryBytes: res.PeakMemoryBytes,
			ElapsedMicros: res.Elapsed.Microseconds(), ModuleID: mod.ID, LogLines: res.LogLines, LogTruncated: res.LogTruncated,
		})
		return 0
	}
	texts := make([]string, len(res.Values))
	for i, v := range res.Values {
		texts[i] = v.String()
	}
	if len(texts) == 0 {
		texts = []string{"()"} // the export returns nothing
	}
	fmt.Fprintf(o.stdout, "result: %s\n", strings.Join(texts, ", "))
	fmt.Fprintf(o.stderr, "fuel consumed: %d\npeak memory: %d bytes\n", res.FuelConsumed, res.PeakMemoryBytes)
	if res.LogTruncated {
		sayf(o.stderr, "guest log truncated by the log limits")
	}
	return 0
}

// fuelNote explains the fuel figure of a run stopped abruptly: wasmtime
// writes the fuel counter back to the store only at calls and returns, so
// a guest stopped inside call-free code (a spin loop) reports less than it
// burned, even 0.
const fuelNote = " (counted up to the guest's last call or return; a guest stopped inside call-free code burned more)"

func (o *cliOutput) failure(err error) int {
	kind := sandbox.KindOf(err)
	if o.json {
		o.printJSON(rpc.ErrorResponse{Error: rpc.ErrorObject(err)})
	} else {
		msg := err.Error()
		if o.wasiHint != "" && wasiRefused(err) {
			msg += ": " + o.wasiHint
		}
		sayf(o.stderr, "%s", escapeText(msg)) // quotes guest names
		var se *sandbox.Error
		if errors.As(err, &se) && se.Usage != nil {
			note := ""
			if kind == sandbox.KindTimeout || kind == sandbox.KindCancelled || kind == sandbox.KindTrap {
				note = fuelNote
			}
			fmt.Fprintf(o.stderr, "fuel consumed: %d%s\npeak memory: %d bytes\n", se.Usage.FuelConsumed, note, se.Usage.PeakMemoryBytes)
		}
	}
	return kind.Info().ExitCode
}

func (o *cliOutput) printJSON(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		sayf(o.stderr, "%v", err)
		return
	}
	fmt.Fprintf(o.stdout, "%s\n", escapeJSON(b))
}

// wasiRefused says err refuses a WASI import. For a run that does not
// grant WASI that is always the refusal of the grant (naming every WASI
// function imported), to which the CLI adds the flag that grants it (the
// sidecar's message names the wasi capability, its request field); under
// the grant it is an unknown function or a wrong signature, which no flag
// mends.
func wasiRefused(err error) bool {
	var se *sandbox.Error
	return errors.As(err, &se) && se.Kind == sandbox.KindDisallowedImport && se.Module == sandbox.WASIModule
}
