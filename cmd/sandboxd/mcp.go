package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/mcpserver"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
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
	shared := newSidecarFlags(fs, "none: modules come as WAT or base64 only")
	logOut, logger, status, ok := shared.start("mcp", args, stdout, stderr, exitMCPFlags)
	if !ok {
		return status // 0 for --help
	}
	defer logOut.close(time.Second)
	stderr = logOut // from here on stderr never blocks (sidecarFlags.start)
	def, maxLimits := shared.limits()
	if err := shared.check(); err != nil {
		fmt.Fprintf(stderr, "sandboxd mcp: %v\n", err)
		return exitMCPFlags
	}
	srvOpts := mcpserver.Options{Defaults: def, Maximums: maxLimits,
		DefaultVarBytes: *shared.defaultVarBytes, MaxVarBytes: *shared.maxVarBytes,
		MaxConcurrency: *shared.maxConc, MaxQueue: *shared.maxQueue, MaxQueueBytes: *shared.maxQueueBytes,
		MaxMessageBytes: *shared.maxMsg, ModuleDirs: shared.pathDirs, WASIDirs: shared.wasiDirs,
		Version: version, Logger: logger}
	// The options are checked before the engine reserves its pool.
	if err := srvOpts.Check(); err != nil {
		fmt.Fprintf(stderr, "sandboxd mcp: %v\n", err)
		return exitMCPFlags
	}
	// Snippets in the languages whose runtime is installed (none: no
	// snippet tools).
	dir := snippet.FindDir()
	var languages []protocol.Language
	for _, lang := range protocol.Languages() {
		if _, err := os.Stat(filepath.Join(dir, snippet.RuntimeFile(lang))); err == nil {
			languages = append(languages, lang)
		}
	}
	engCfg := shared.engineConfig(def, maxLimits)
	engCfg.MaxRuns += len(languages) * snippet.DefaultSpares // each language's spare holds a run's store
	eng, err := sandbox.NewEngine(engCfg)
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd mcp: %v\n", err)
		return exitMCPFlags
	}
	defer eng.Close()
	// The runner keeps a started interpreter of each language used, as
	// the sidecar's does.
	runner, err := snippet.New(eng, snippet.Config{Dir: dir, Maximums: maxLimits,
		PruneStale: os.Getenv(snippet.RuntimesEnv) == "", // the runtimes next to the binary are its own
		Notice:     func(m string) { logger.Info(m) }})
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd mcp: %v\n", err)
		return exitMCPFlags
	}
	defer runner.Close()
	mcpEng := mcpEngine{sidecarEngine: sidecarEngine{eng: eng}, runner: runner, languages: languages, maximums: maxLimits}
	if len(languages) == 0 {
		logger.Warn("no snippet runtime installed: run_snippet and the session tools are not offered", "dir", dir)
	}
	srv, err := mcpserver.New(mcpEng, srvOpts)
	if err != nil {
		fmt.Fprintf(stderr, "sandboxd mcp: %v\n", err)
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
		fmt.Fprintf(stderr, "sandboxd mcp: %v\n", err)
		return exitMCPFlags
	}
	return exitMCPOK
}

// mcpEngine is the sidecar's engine with snippets (mcpserver.SnippetEngine).
type mcpEngine struct {
	sidecarEngine
	runner    *snippet.Runner
	languages []protocol.Language // those with a runtime installed
	maximums  limits.Limits
}

func (e mcpEngine) Languages() []protocol.Language { return e.languages }

func (e mcpEngine) EvalDefaults(lang protocol.Language) limits.Limits {
	l := snippet.Defaults(lang)
	for _, f := range limits.Fields() {
		f.Set(&l, min(f.Get(l), f.Get(e.maximums)))
	}
	return l
}

func (e mcpEngine) Eval(ctx context.Context, ev protocol.Eval) (*protocol.EvalOutcome, error) {
	return e.runner.Eval(ctx, ev)
}
