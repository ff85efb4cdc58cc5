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
	"sync"

	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox"
)

// maxCLIInputBytes bounds a plugin call's --input-file.
const maxCLIInputBytes = 64 << 20

// callMain is `sandboxd call FILE FUNCTION`: an Extism plugin function
// called on one instance (--loop times), its output bytes written to
// stdout exactly as the plugin set them, like `extism call`. Log lines
// and the plugin's WASI stdout and stderr go to stderr. A plugin error
// exits 10; a fence or another failure exits with its kind's code.
func callMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sandboxd call", flag.ContinueOnError)
	input := fs.String("input", "", "the input, as text")
	inputFile := fs.String("input-file", "", "read the input bytes from this file (at most 64 MiB)")
	var configs multiFlag
	fs.Var(&configs, "config", "a config entry KEY=VALUE for config_get (repeat for each)")
	allowWASI := fs.Bool("allow-wasi", false, "grant WASI preview1 (plugins built with the Go PDK need it)")
	allowLog := fs.Bool("allow-log", false, "grant the log functions (log_info … and host::log)")
	loop := fs.Int("loop", 1, "call the function this many times on the same instance")
	readLimits := cliLimitFlags(fs, map[string]string{
		"fuel":         "fuel budget of each call (instructions)",
		"timeout-ms":   "wall-clock deadline of each call in milliseconds",
		"memory-mb":    "memory cap in MiB for the instance's life (the plugin's memory and the kernel's, tables included)",
		"log-bytes":    "guest log bytes kept per call",
		"output-bytes": "bytes of each call's output kept (and of WASI stdout and stderr); the rest is dropped",
	})
	varBytes := fs.Uint64("var-bytes", sandbox.DefaultVarBytes, "cap on the plugin's vars (keys and values together)")
	preinit := fs.Bool("preinitialize", false, "pre-initialise the plugin first: its _initialize run once and its state kept as the module's (docs/preinit.md); here it shows the plugin works so, the speed is for a sidecar's compile")
	positional, status, ok := parseCommandLine(fs, args, stdout, stderr)
	if !ok {
		return status
	}
	fail := func(format string, a ...any) int {
		sayf(stderr, format, a...)
		return exitUsage
	}
	if len(positional) != 2 {
		return fail("give a FILE (.wasm or .wat) and a FUNCTION")
	}
	file, fn := positional[0], positional[1]
	if *loop < 1 {
		return fail("--loop: must be >= 1")
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var in []byte // nil: no input given (an empty --input is an empty input)
	switch {
	case given["input"] && given["input-file"]:
		return fail("give --input or --input-file, not both")
	case given["input-file"]:
		b, err := readBounded(*inputFile, maxCLIInputBytes)
		if err != nil {
			return fail("--input-file: %v", err)
		}
		in = b
	case given["input"]:
		in = []byte(*input)
	}
	config := map[string]string{}
	for _, kv := range configs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fail("--config %q: want KEY=VALUE", kv)
		}
		config[k] = v
	}
	if *varBytes == 0 || *varBytes > sandbox.MaxVarBytes {
		return fail("--var-bytes: must be in [1, %d]", sandbox.MaxVarBytes)
	}
	l, err := readLimits()
	if err != nil {
		return fail("%v", err)
	}
	caps := sandbox.Capabilities{Log: *allowLog}
	if *allowWASI {
		caps.WASI = &sandbox.WASI{Argv0: guestArgv0(file)}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	eng, err := sandbox.NewEngine(sandbox.Config{OneShot: true})
	if err != nil {
		return fail("%v", err)
	}
	defer eng.Close()
	logs := newLogPrinter(stderr)
	streams := newStreamPrinter(stderr, stderr) // stdout carries the plugin's output only
	var flushOnce sync.Once
	flush := func() { flushOnce.Do(func() { logs.close(); streams.close() }) }
	defer flush()
	report := func(err error) int {
		flush() // the guest's lines come before ours
		msg := err.Error()
		closed := errors.Is(err, sandbox.ErrInstanceClosed)
		switch {
		case !*allowWASI && wasiRefused(err):
			msg += ": grant WASI with --allow-wasi"
		case closed && fn == sandbox.StartExport && *loop > 1:
			msg += fmt.Sprintf(": %s runs once per instance (a WASI command's main cannot run again): drop --loop", fn)
		}
		sayf(stderr, "%s", escapeText(msg))
		if closed {
			return sandbox.KindHost.Info().ExitCode
		}
		return sandbox.KindOf(err).Info().ExitCode
	}
	if err := eng.CheckWASIGrant(sandbox.Source{Path: file}, caps); err != nil {
		return report(err) // before spending seconds compiling it
	}
	mod, _, err := eng.Compile(ctx, sandbox.Source{Path: file, CompileTimeout: l.CompileTimeout, CompileMemoryBytes: l.CompileMemoryBytes, Preinitialize: *preinit})
	if err != nil {
		return report(err)
	}
	logLine := func(level sandbox.LogLevel, line string) {
		if level != "" {
			line = string(level) + ": " + line
		}
		logs.add(line)
	}
	inst, err := eng.Instantiate(ctx, sandbox.InstanceRequest{Module: mod, Capabilities: caps, Limits: l, Config: config,
		VarBytes: *varBytes, Log: logLine, Output: streams.add})
	if err != nil {
		return report(err)
	}
	defer inst.Release()
	if !inst.IsPlugin() {
		return fail("%s is not an Extism plugin (it imports nothing from %s)", file, sandbox.ExtismEnvModule)
	}
	if exp, ok := mod.Export(fn); ok && !exp.PluginFunction() {
		sayf(stderr, "export: %q is not a plugin function (%s; it is %s)", fn, protocol.PluginFunctionShape, exportShape(exp))
		return sandbox.KindExport.Info().ExitCode
	}
	for i := 0; i < *loop; i++ {
		res, err := inst.Call(ctx, sandbox.CallRequest{Function: fn, Input: in, Log: logLine, Output: streams.add})
		if err != nil {
			return report(err)
		}
		if _, err := stdout.Write(res.PluginOutput); err != nil {
			return fail("writing the output: %v", err)
		}
		if *loop > 1 {
			fmt.Fprintln(stdout)
		}
		if res.PluginOutputTruncated {
			sayf(stderr, "output truncated to %d bytes (--output-bytes)", l.OutputBytes)
		}
		if res.LogDropped > 0 {
			sayf(stderr, "%d log lines dropped (--allow-log shows them)", res.LogDropped)
		}
	}
	return 0
}

// exportShape describes an export for a message: "a func (i32) -> (i32)",
// "a memory".
func exportShape(e sandbox.Export) string {
	if e.Kind != "func" {
		return "a " + e.Kind
	}
	return fmt.Sprintf("a func (%s) -> (%s)", strings.Join(e.Params, ", "), strings.Join(e.Results, ", "))
}
