package main

import (
	"context"
	"errors"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/snippet"
)

// sidecarEngine adapts *sandbox.Engine to rpc.Engine. The sidecar speaks
// protocol types only (so rpc and the Go client build without cgo), and
// the sandbox knows nothing of the sidecar: this is the one place where
// the two meet, field by field. Errors need no conversion: *sandbox.Error
// describes itself as a protocol.Outcome.
type sidecarEngine struct {
	eng      *sandbox.Engine
	idle     time.Duration   // the engine's InstanceIdle, reported by initialize
	snippets *snippet.Runner // nil: no snippets (engine_eval.go)
}

// compiledModule is a *sandbox.Module as the server sees it.
type compiledModule struct {
	mod  *sandbox.Module
	info protocol.ModuleInfo
}

func (m *compiledModule) Info() *protocol.ModuleInfo { return &m.info }

func (e sidecarEngine) Compile(ctx context.Context, src protocol.Source) (rpc.Module, protocol.CompileInfo, error) {
	mod, info, err := e.eng.Compile(ctx, src)
	if err != nil {
		return nil, protocol.CompileInfo{}, err
	}
	return wrapModule(mod), protocol.CompileInfo{Cached: info.Cached, Elapsed: info.Elapsed}, nil
}

// wrapModule is mod as the server sees it. The module's lists are the
// protocol's types, shared read-only.
func wrapModule(mod *sandbox.Module) *compiledModule {
	return &compiledModule{mod: mod, info: protocol.ModuleInfo{ID: mod.ID, Imports: mod.Imports, Exports: mod.Exports}}
}

func (e sidecarEngine) Run(ctx context.Context, mod rpc.Module, run protocol.Run) (*protocol.RunOutcome, error) {
	res, err := e.eng.Run(ctx, sandbox.Request{
		Module: mod.(*compiledModule).mod, Function: run.Function, Args: run.Args, Limits: run.Limits,
		Capabilities:  sandboxCaps(run.Capabilities),
		Log:           run.Log,
		Output:        run.Output,
		HostFunctions: run.HostFunctions,
		Host:          run.Host,
	})
	if err != nil {
		var ge *sandbox.GrantError
		if errors.As(err, &ge) { // a grant the engine refuses is a params problem
			return nil, &rpc.ParamError{Field: ge.Field, Problem: ge.Problem}
		}
		return nil, err
	}
	out := &protocol.RunOutcome{
		Values:       res.Values,
		Usage:        protocol.Usage{FuelConsumed: res.FuelConsumed, PeakMemoryBytes: res.PeakMemoryBytes},
		Elapsed:      res.Elapsed,
		LogLines:     res.LogLines,
		LogTruncated: res.LogTruncated,
		LogDropped:   res.LogDropped,
		ExitCode:     res.ExitCode,
	}
	if res.Output != nil {
		out.Output = &protocol.Output{Stdout: res.Output.Stdout, Stderr: res.Output.Stderr, Truncated: res.Output.Truncated}
	}
	return out, nil
}

// CheckGrant refuses a WASI module run without the grant before it is
// compiled (rpc calls it when the engine has it).
func (e sidecarEngine) CheckGrant(src protocol.Source, caps protocol.Capabilities) error {
	if m, ok := e.eng.Cached(src); ok { // a module compiled before: no need to parse its text again
		src = sandbox.Source{ID: m.ID}
	}
	return e.eng.CheckWASIGrant(src, sandboxCaps(caps))
}

// CompileCached is Compile when the module is in the cache, and false
// without reading, converting or compiling anything otherwise (rpc
// prepares such runs where it read them, so a path, whose file must be
// read, is never found here).
func (e sidecarEngine) CompileCached(src protocol.Source) (rpc.Module, bool) {
	mod, ok := e.eng.Lookup(src)
	if !ok {
		return nil, false
	}
	return wrapModule(mod), true
}

func sandboxCaps(c protocol.Capabilities) sandbox.Capabilities {
	// The WASI grant is the protocol's type: the engine reads it, never writes it.
	return sandbox.Capabilities{Log: c.Log, Random: c.Random, Seed: c.Seed, Clock: c.Clock, WASI: c.WASI}
}

func (e sidecarEngine) CacheStats() protocol.CacheStats {
	c := e.eng.CacheStats()
	return protocol.CacheStats{Entries: c.Entries, Bytes: c.Bytes, Hits: c.Hits, Misses: c.Misses}
}
