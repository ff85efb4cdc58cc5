package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/pipewait"
	"github.com/sandboxd/sandboxd/rpc"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/snippet"
)

// Exit statuses of `sandboxd serve`.
const (
	exitServeOK         = 0 // stdin ended, or exit after shutdown
	exitServeNoShutdown = 1 // exit without shutdown, or bad flags
	exitServeFraming    = 2 // the input stream could not be split into messages
)

func serveMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sandboxd serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	framing := fs.String("framing", string(rpc.FramingContentLength), "message framing: content-length or ndjson")
	maxInstances := fs.Int("max-instances", sandbox.DefaultMaxInstances, "long-lived instances (instantiate) live at once; more are refused with -32002")
	instanceIdle := fs.Duration("instance-idle", sandbox.DefaultInstanceIdle, "an instance without a call for this long is evicted (a Go duration, e.g. 30s, 10m)")
	cpuProfile := fs.String("cpuprofile", "", "write a pprof CPU profile of the whole session to this file")
	traceFile := fs.String("trace", "", "write a runtime/trace execution trace of the whole session to this file (go tool trace)")
	runtimes := fs.String("runtimes", "", "the snippet runtimes' directory (default $"+snippet.RuntimesEnv+", else runtimes/ next to the binary)")
	shared := newSidecarFlags(fs, "any regular file")
	logOut, logger, status, ok := shared.start("serve", args, stdout, stderr, exitServeNoShutdown)
	if !ok {
		return status // 0 for --help
	}
	defer logOut.close(time.Second)
	stderr = logOut // from here on stderr never blocks (sidecarFlags.start)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "sandboxd: --cpuprofile: %v\n", err)
			return exitServeNoShutdown
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "sandboxd: --cpuprofile: %v\n", err)
			return exitServeNoShutdown
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if *traceFile != "" {
		f, err := os.Create(*traceFile)
		if err != nil {
			fmt.Fprintf(stderr, "sandboxd: --trace: %v\n", err)
			return exitServeNoShutdown
		}
		if err := trace.Start(f); err != nil {
			fmt.Fprintf(stderr, "sandboxd: --trace: %v\n", err)
			return exitServeNoShutdown
		}
		defer func() { trace.Stop(); f.Close() }()
	}

	def, maxLimits := shared.limits()
	if err := shared.check(); err != nil {
		fmt.Fprintf(stderr, "sandboxd: %v\n", err)
		return exitServeNoShutdown
	}
	if err := checkInstanceFlags(*maxInstances, *instanceIdle); err != nil {
		fmt.Fprintf(stderr, "sandboxd: %v\n", err)
		return exitServeNoShutdown
	}
	engCfg := shared.engineConfig(def, maxLimits)
	engCfg.MaxInstances, engCfg.InstanceIdle = *maxInstances, *instanceIdle
	engCfg.MaxRuns += snippetConfig(*runtimes, def, maxLimits, false, logger).SpareStores() // the snippets' spares hold runs' stores
	eng, err := sandbox.NewEngine(engCfg)
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd: %v\n", err)
		return exitServeNoShutdown
	}
	// A job Serve left behind (Unfinished: stuck in a system call) may
	// still use the engine, whose Close would wait for it: then the
	// process exits without closing it (the compile children end with
	// it: PDEATHSIG, and their stdin closes).
	leftBehind := false
	defer func() {
		if !leftBehind {
			eng.Close()
		}
	}()
	snippets, err := newSnippetRunner(eng, *runtimes, def, maxLimits, logger)
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd: %v\n", err)
		return exitServeNoShutdown
	}
	defer func() { // before the engine's
		if !leftBehind {
			snippets.Close()
		}
	}()
	srv, err := rpc.NewServer(sidecarEngine{eng: eng, idle: *instanceIdle, snippets: snippets}, rpc.Options{
		Framing: rpc.Framing(*framing), MaxConcurrency: *shared.maxConc, MaxQueue: *shared.maxQueue,
		MaxMessageBytes: *shared.maxMsg, MaxQueueBytes: *shared.maxQueueBytes, OutputHighWater: *shared.outputHighWater,
		Defaults: def, Maximums: maxLimits, Logger: logger,
		DefaultVarBytes: *shared.defaultVarBytes, MaxVarBytes: *shared.maxVarBytes,
		Version: version, EngineVersion: wasmtimeVersion(),
	})
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd: %v\n", err)
		return exitServeNoShutdown
	}

	// A parent that dies closes our stdout: with SIGPIPE observed, writes
	// fail with EPIPE and the server ends in order instead of being killed
	// mid-write. SIGINT/SIGTERM end it in order too.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger.Debug("serving", "framing", *framing, "maxConcurrency", *shared.maxConc)
	if f, ok := stdin.(*os.File); ok {
		var restore func()
		stdin, restore = parentInput(f)
		defer restore()
	}
	if f, ok := stdout.(*os.File); ok {
		var restore func()
		stdout, restore = pollable(f)
		defer restore()
	}
	err = srv.Serve(ctx, stdin, stdout)
	if n := srv.Unfinished(); n > 0 {
		leftBehind = true
		logger.Warn("exiting without closing the engine: jobs stuck after their cancellation still use it", "jobs", n)
	}
	var fe *rpc.FramingError
	switch {
	case err == nil:
		return exitServeOK
	case errors.Is(err, rpc.ErrExitWithoutShutdown):
		return exitServeNoShutdown
	case errors.As(err, &fe):
		fmt.Fprintf(stderr, "sandboxd: %v; exiting\n", fe)
		return exitServeFraming
	default:
		fmt.Fprintf(stderr, "sandboxd: %v\n", err)
		return exitServeNoShutdown
	}
}

// parentInput returns what the server reads the parent's requests from.
// A pipe or socket is waited on asleep in ppoll(2) on Linux (pipewait):
// with Go's poller the thread that parked the reader spun looking for
// work between every two requests, as much CPU as a request itself on two
// cores. Close still ends the wait (exit, SIGTERM) while the parent keeps
// its end open. Elsewhere, and for anything else, pollable.
func parentInput(f *os.File) (io.Reader, func()) {
	if p, err := pipewait.New(f, false); err == nil {
		return p, p.Restore
	}
	return pollable(f)
}

// pollable returns f switched to non-blocking mode, so that Go's network
// poller serves it, when f is a pipe or a socket. A goroutine reading or
// writing it then parks instead of holding an OS thread in a blocking
// system call, and the goroutine it hands work to can run on the same
// thread at once: this halves the sidecar's round trip. Terminals and
// files are left alone. O_NONBLOCK belongs to the file description, which
// another process may share, so restore puts blocking mode back at exit.
func pollable(f *os.File) (_ *os.File, restore func()) {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
		return f, func() {}
	}
	fd := int(f.Fd()) // Fd puts f in blocking mode; we take the descriptor over below
	if err := syscall.SetNonblock(fd, true); err != nil {
		return f, func() {}
	}
	return os.NewFile(uintptr(fd), f.Name()), func() { _ = syscall.SetNonblock(fd, false) }
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// wasmtimeVersion reports the linked wasmtime-go module version.
func wasmtimeVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/bytecodealliance/wasmtime-go/v39" {
				return dep.Version
			}
		}
	}
	return sandbox.WasmtimeVersion
}
