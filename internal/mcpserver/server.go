// Package mcpserver serves sandboxd's engine to AI agents and editors as
// Model Context Protocol tools (docs/mcp.md): run a WASI program, run an
// export of a wasm module, call an Extism plugin function, and where the
// engine has snippet runtimes evaluate a snippet, one-shot or in a
// session. It speaks MCP
// on stdio (newline-delimited JSON) through the official Go SDK
// (github.com/modelcontextprotocol/go-sdk), and the engine through the
// interfaces the sidecar uses (rpc.Engine, rpc.InstanceEngine), so it
// builds without cgo and its tests run over the fake engine of
// internal/rpctest; cmd/sandboxd wires the real one.
//
// Every call runs under the operator's limits: a call may ask for less
// than the maximums, never more; nothing on the host is readable or
// writable unless the operator allowed its directory. Whatever a call
// does wrong (bad arguments, a fence, a trap) comes back as a tool result
// with isError and a typed kind; the server keeps serving.
package mcpserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sync/semaphore"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

// Options configure a Server. Zero fields take the documented defaults.
type Options struct {
	// Defaults are a call's limits where it asks for none; Maximums the
	// most it may ask for. Default limits.Defaults() (each at most its
	// maximum) and limits.DefaultMaximums().
	Defaults, Maximums limits.Limits
	// DefaultVarBytes and MaxVarBytes are a plugin's varBytes (its vars,
	// keys and values together), as for the sidecar. Default
	// protocol.DefaultVarBytes and protocol.MaxVarBytes.
	DefaultVarBytes, MaxVarBytes uint64
	// MaxConcurrency is how many runs execute at once; more wait for a
	// slot. Default runtime.NumCPU().
	MaxConcurrency int
	// MaxQueue bounds the requests read and not yet answered, and
	// MaxQueueBytes their summed size; a request past either is answered
	// busy (-32000) at once. Defaults rpc.DefaultMaxQueue and
	// rpc.DefaultMaxQueueBytes (at least MaxMessageBytes).
	MaxQueue      int
	MaxQueueBytes int64
	// MaxMessageBytes is the longest message (one line) read; a longer one
	// is answered with an error and skipped. Default
	// rpc.DefaultMaxMessageBytes.
	MaxMessageBytes int64
	// OutputHighWater is how many bytes may wait to be written to a
	// client that does not read before the server reads no further call
	// and starts no run (backpressure.go). Default
	// rpc.DefaultOutputHighWater, as the sidecar's.
	OutputHighWater int64
	// ModuleDirs are the directories a module given by path may be read
	// from (the engine checks the opened file against them). None: no
	// module is read by path.
	ModuleDirs []string
	// WASIDirs are the directories a WASI program may be given (the
	// engine checks them); the tool's description lists them.
	WASIDirs []string
	// Version is the server's version, as initialize reports it.
	Version string
	// Logger gets the server's diagnostics (stderr); default discards.
	Logger *slog.Logger
}

// Check says what is wrong with the options, as New would, so that a
// command can refuse its flags before it builds an engine.
func (o Options) Check() error {
	_, err := o.withDefaults()
	return err
}

func (o Options) withDefaults() (Options, error) {
	if o.Maximums == (limits.Limits{}) {
		o.Maximums = limits.DefaultMaximums()
	}
	if o.Defaults == (limits.Limits{}) { // the documented defaults, within the maximums
		o.Defaults = limits.Defaults()
		for _, f := range limits.Fields() {
			f.Set(&o.Defaults, min(f.Get(o.Defaults), f.Get(o.Maximums)))
		}
	}
	if o.MaxVarBytes == 0 {
		o.MaxVarBytes = protocol.MaxVarBytes
	}
	if o.DefaultVarBytes == 0 {
		o.DefaultVarBytes = min(protocol.DefaultVarBytes, o.MaxVarBytes)
	}
	if o.MaxConcurrency == 0 {
		o.MaxConcurrency = runtime.NumCPU()
	}
	if o.MaxQueue == 0 {
		o.MaxQueue = rpc.DefaultMaxQueue
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = rpc.DefaultMaxMessageBytes
	}
	if o.MaxQueueBytes == 0 {
		o.MaxQueueBytes = max(rpc.DefaultMaxQueueBytes, o.MaxMessageBytes)
	}
	if o.OutputHighWater == 0 {
		o.OutputHighWater = rpc.DefaultOutputHighWater
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.MaxConcurrency < 1:
		return o, errors.New("max-concurrency: must be >= 1")
	case o.MaxQueue < 1:
		return o, errors.New("max-queue: must be >= 1")
	case o.MaxMessageBytes < 1024:
		return o, errors.New("max-message-bytes: must be >= 1024")
	case o.OutputHighWater < 0:
		return o, errors.New("output-high-water: must be >= 0")
	case o.MaxQueueBytes < o.MaxMessageBytes:
		return o, errors.New("max-queue-bytes: must be >= max-message-bytes")
	case o.MaxVarBytes > protocol.MaxVarBytes:
		return o, errors.New("max-varBytes: must be <= " + itoa(protocol.MaxVarBytes) + " (the sidecar's maximum)")
	case o.DefaultVarBytes > o.MaxVarBytes:
		return o, errors.New("default-varBytes: must be <= max-varBytes")
	}
	if err := o.Maximums.Validate(limits.HardMaximums()); err != nil {
		return o, errors.New("max-" + err.Error())
	}
	if err := o.Defaults.Validate(o.Maximums); err != nil {
		return o, errors.New("default-" + err.Error())
	}
	for _, d := range o.ModuleDirs {
		if !filepath.IsAbs(d) {
			return o, errors.New("allow-path-dir: " + protocol.Quote(d) + " is not an absolute path")
		}
	}
	return o, nil
}

// Server serves the tools. It holds no state between calls besides the
// engine's (its module cache).
type Server struct {
	eng  rpc.Engine
	inst rpc.InstanceEngine // nil: the engine keeps no instances, no plugin tool
	snip rpc.SnippetEngine  // nil: the engine evaluates no snippets, no snippet tools
	// languages are those snip has a runtime for.
	languages []protocol.Language
	opts      Options
	slots     *semaphore.Weighted // run slots, MaxConcurrency
	// out counts the bytes waiting to be written to the client: no run
	// starts while they pass the high water.
	out *outputGate
	// moduleDirs are opts.ModuleDirs cleaned, and again with their
	// symlinks resolved where that differs (namesModuleDir).
	moduleDirs []string
}

// New returns a server of eng's tools; an engine that implements
// rpc.InstanceEngine gets the plugin tool too, and one that implements
// rpc.SnippetEngine (with a language installed) run_snippet, and the
// session tools if it keeps instances too.
func New(eng rpc.Engine, opts Options) (*Server, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{eng: eng, opts: opts, slots: semaphore.NewWeighted(int64(opts.MaxConcurrency)),
		out: newOutputGate(opts.OutputHighWater)}
	s.inst, _ = eng.(rpc.InstanceEngine)
	if s.snip, _ = eng.(rpc.SnippetEngine); s.snip != nil {
		s.languages = s.snip.Languages()
	}
	for _, d := range opts.ModuleDirs {
		s.moduleDirs = append(s.moduleDirs, filepath.Clean(d))
		if real, err := filepath.EvalSymlinks(d); err == nil && real != filepath.Clean(d) {
			s.moduleDirs = append(s.moduleDirs, real)
		}
	}
	return s, nil
}

// Serve speaks MCP on in and out until in ends (or ctx is done, or out
// breaks), then waits for the calls in flight to be answered. Only
// protocol messages are written to out. A Server serves once.
func (s *Server) Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	srv := mcp.NewServer(&mcp.Implementation{Name: "sandboxd", Title: "sandboxd", Version: s.opts.Version},
		&mcp.ServerOptions{
			Instructions: s.instructions(),
			Logger:       slog.New(atLeast{s.opts.Logger.Handler(), slog.LevelWarn}),
			// tools only, and the list never changes
			Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
		})
	// calls ends the calls running: when serving ends, or drainGrace
	// after the input ended (transport.go).
	calls, endCalls := context.WithCancel(ctx)
	defer endCalls()
	for _, t := range s.tools() {
		srv.AddTool(t.def, s.handler(calls, t))
	}
	conn := newTransport(in, out, transportLimits{maxMessage: s.opts.MaxMessageBytes, maxQueue: s.opts.MaxQueue,
		maxQueueBytes: s.opts.MaxQueueBytes}, s.out, s.opts.Logger, endCalls)
	err := srv.Run(ctx, conn)
	conn.finished()
	if errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed) {
		return nil // the client closed its end: the usual way to stop
	}
	return err
}

// atLeast passes on the records of h at or above min: the SDK logs every
// session's start and end at info, which an editor's log pane does not
// need.
type atLeast struct {
	slog.Handler
	min slog.Level
}

func (a atLeast) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= a.min && a.Handler.Enabled(ctx, l)
}

func (a atLeast) WithAttrs(attrs []slog.Attr) slog.Handler {
	return atLeast{a.Handler.WithAttrs(attrs), a.min}
}

func (a atLeast) WithGroup(name string) slog.Handler {
	return atLeast{a.Handler.WithGroup(name), a.min}
}

// instructions are the server's instructions to the client's model.
func (s *Server) instructions() string {
	text := `sandboxd runs untrusted WebAssembly under fuel, wall-clock and memory fences. ` +
		`run_wasi runs a WASI preview1 program (its argv, env, stdin and in-memory files are yours to give; ` +
		`its stdout, stderr and exit code come back); run_export calls one exported function of a wasm module ` +
		`given as WAT text or base64; call_plugin calls an Extism plugin function with input bytes. `
	if len(s.languages) > 0 {
		text += `run_snippet evaluates a snippet of ` + s.languagesText() + ` in a fresh interpreter and returns its value ` +
			`as JSON; session_create, session_eval and session_close keep an interpreter's state between snippets. `
	}
	return text + `Each call may ask for limits below the operator's maximums (see each tool's limits). ` +
		`Failures come back as results with isError and error.kind (fuel_exhausted, timeout, memory_limit_exceeded, trap, ` +
		`script_error, ...).`
}
