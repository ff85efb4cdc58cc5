package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/mcpserver"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/snippet"
)

// Exit statuses of `sandboxd mcp`.
const (
	exitMCPOK    = 0 // the client closed stdin (or SIGINT, SIGTERM)
	exitMCPFlags = 1 // bad flags, or the session broke (stderr says how)
)

// mcpMain serves the engine as MCP tools on stdin and stdout
// (internal/mcpserver; docs/mcp.md), with serve's flags: the operator's
// defaults and maximums, run slots, module and WASI directories.
func mcpMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sandboxd mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	maxSessions := fs.Int("max-instances", sandbox.DefaultMaxInstances, "snippet sessions live at once (session_create); more are refused with too_many_sessions")
	sessionIdle := fs.Duration("instance-idle", sandbox.DefaultInstanceIdle, "a session without an evaluation for this long is closed (a Go duration, e.g. 30s, 10m)")
	runtimes := fs.String("runtimes", "", "the snippet runtimes' directory (default $"+snippet.RuntimesEnv+", else runtimes/ next to the binary); none installed: no snippet tools")
	shared := newSidecarFlags(fs, "none: modules come as WAT or base64 only")
	logOut, logger, status, ok := shared.start("mcp", args, stdout, stderr, exitMCPFlags)
	if !ok {
		return status // 0 for --help
	}
	defer logOut.close(time.Second)
	stderr = logOut // from here on stderr never blocks (sidecarFlags.start)
	def, maxLimits := shared.limits()
	if err := shared.check(); err != nil {
		fmt.Fprintf(stderr, "sandboxd: %v\n", err)
		return exitMCPFlags
	}
	srvOpts := mcpserver.Options{Defaults: def, Maximums: maxLimits,
		DefaultVarBytes: *shared.defaultVarBytes, MaxVarBytes: *shared.maxVarBytes,
		MaxConcurrency: *shared.maxConc, MaxQueue: *shared.maxQueue, MaxQueueBytes: *shared.maxQueueBytes,
		MaxMessageBytes: *shared.maxMsg, OutputHighWater: *shared.outputHighWater, ModuleDirs: shared.pathDirs, WASIDirs: shared.wasiDirs,
		Version: version, Logger: logger}
	// The options are checked before the engine reserves its pool.
	if err := srvOpts.Check(); err != nil {
		fmt.Fprintf(stderr, "sandboxd: %v\n", err)
		return exitMCPFlags
	}
	if err := checkInstanceFlags(*maxSessions, *sessionIdle); err != nil {
		fmt.Fprintf(stderr, "sandboxd: %v\n", err)
		return exitMCPFlags
	}
	engCfg := shared.engineConfig(def, maxLimits)
	engCfg.MaxInstances, engCfg.InstanceIdle = *maxSessions, *sessionIdle
	engCfg.MaxRuns += snippetConfig(*runtimes, def, maxLimits, false, logger).SpareStores() // the snippets' spares hold runs' stores
	eng, err := sandbox.NewEngine(engCfg)
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd: %v\n", err)
		return exitMCPFlags
	}
	defer eng.Close()
	// Snippets in the languages whose runtime is installed (none: no
	// snippet tools); sessions are the engine's instances.
	snippets, err := newSnippetRunner(eng, *runtimes, def, maxLimits, logger)
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd: %v\n", err)
		return exitMCPFlags
	}
	defer snippets.Close() // before the engine's
	if len(snippets.Installed()) == 0 {
		dir := *runtimes
		if dir == "" {
			dir = snippet.FindDir()
		}
		logger.Warn("no snippet runtime installed: run_snippet and the session tools are not offered", "dir", dir)
	}
	srv, err := mcpserver.New(sidecarEngine{eng: eng, idle: *sessionIdle, snippets: snippets}, srvOpts)
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd: %v\n", err)
		return exitMCPFlags
	}

	// As serve: a client that dies closes our stdout (EPIPE, not a
	// SIGPIPE death); SIGINT and SIGTERM end the session in order.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
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
	if err := srv.Serve(ctx, stdin, stdout); err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "sandboxd: %v\n", err)
		return exitMCPFlags
	}
	return exitMCPOK
}
