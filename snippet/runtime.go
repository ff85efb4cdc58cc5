package snippet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox"
)

// The guest contract (runtimes/README.md): a runtime is an Extism plugin
// whose one function, eval, answers {"code", "input"} with {"value"} or
// {"error"}; a Go reactor, started by _initialize; it needs WASI for its
// clocks, randomness and stdout and stderr, and nothing else.
const (
	evalFunction = "eval"
)

// runtime is one language's interpreter: its module, loaded on first use
// and kept for the Runner's life, and its spares.
type runtime struct {
	lang protocol.Language
	file string

	loading chan struct{} // a token: held while loading, so one load runs at a time

	mu     sync.Mutex
	module *sandbox.Module // set once loaded
	spares *sparePool      // made with the module, when Config.Spares > 0
}

// load returns the runtime's module, loading it the first time: the file
// read, then its compiled artefact loaded or, for a runtime this build has
// not compiled, compiled once (Notice says so) and written for the next
// time. A failure is not kept: the next evaluation tries again (the
// operator may have run make runtimes meanwhile).
func (rt *runtime) load(ctx context.Context, r *Runner) (*sandbox.Module, error) {
	if m := rt.loaded(); m != nil {
		return m, nil
	}
	select {
	case rt.loading <- struct{}{}:
		defer func() { <-rt.loading }()
	case <-ctx.Done():
		return nil, &sandbox.Error{Kind: sandbox.KindCancelled, Message: "cancelled while the " + string(rt.lang) + " runtime was loading"}
	}
	if m := rt.loaded(); m != nil {
		return m, nil
	}
	wasm, err := readRuntime(rt.file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &sandbox.Error{Kind: sandbox.KindHost, Message: fmt.Sprintf(
			"the %s runtime is not installed: %v (make build builds and compiles the runtimes; docs/snippets.md says where they are looked for)", rt.lang, err)}
	}
	if err != nil {
		return nil, &sandbox.Error{Kind: sandbox.KindHost, Message: fmt.Sprintf(
			"the %s runtime cannot be used: %v (docs/snippets.md says what a runtime's file and directory must be)", rt.lang, err)}
	}
	var compileStart time.Time
	compiling := func() {
		compileStart = time.Now()
		r.notice(fmt.Sprintf("compiling the %s runtime (%s, %.1f MB) for this build of sandboxd, once: up to two minutes or more of CPU, since it is compiled twice, to pre-initialise it and then pre-initialised (make build does it ahead of time)",
			rt.lang, rt.file, float64(len(wasm))/1e6))
	}
	// Pre-initialised: the Go runtime's start and the interpreter's setup
	// (3-5 ms of every fresh instance) run once, here, and every instance
	// starts from the memory they left (docs/preinit.md); the guest
	// reseeds its session's random source per instance
	// (runtimes/script/random.go).
	src := sandbox.Source{Wasm: wasm, CompileTimeout: CompileTimeout, CompileMemoryBytes: CompileMemoryBytes, Preinitialize: true}
	m, _, err := r.eng.CompileStored(ctx, src, r.cfg.CompiledDirs, compiling)
	var snap *sandbox.SnapshotError
	if errors.As(err, &snap) { // no Go reactor: not what make runtimes builds
		return nil, &sandbox.Error{Kind: sandbox.KindHost, Message: fmt.Sprintf(
			"%s is not a sandboxd runtime: it is not an Extism plugin exporting %q that can be pre-initialised (%v)", rt.file, evalFunction, snap)}
	}
	if err != nil {
		return nil, err
	}
	if !compileStart.IsZero() {
		r.notice(fmt.Sprintf("compiled the %s runtime in %v", rt.lang, time.Since(compileStart).Round(100*time.Millisecond)))
		if r.cfg.PruneStale {
			r.pruneStale()
		}
	}
	if err := checkRuntime(rt, m); err != nil {
		return nil, err
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.module = m
	if r.cfg.Spares > 0 {
		rt.spares = newSparePool(r.cfg.Spares, func(ctx context.Context) (*sandbox.Instance, error) {
			return r.start(ctx, m, rt.lang, r.spareLimits(rt.lang), false)
		})
	}
	return m, nil
}

func (rt *runtime) loaded() *sandbox.Module {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.module
}

func (rt *runtime) sparePool() *sparePool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.spares
}

// readRuntime reads a runtime's file, bounded, opened as the compiled
// artefacts are (sandbox.ReadTrustedFile): without blocking (a FIFO there
// would otherwise hang the load) or following a link, and only a regular
// file of the process's user or root that no one else can write, since
// every snippet of every caller runs in what it holds.
func readRuntime(path string) ([]byte, error) {
	return sandbox.ReadTrustedFile(path, MaxRuntimeBytes)
}

// checkRuntime refuses a module that is not a runtime: what the file
// names must keep the guest contract, or every evaluation would fail in
// a way that blames the snippet.
func checkRuntime(rt *runtime, m *sandbox.Module) error {
	exp, ok := m.Export(evalFunction)
	if !isPlugin(m) || !ok || !exp.PluginFunction() {
		return &sandbox.Error{Kind: sandbox.KindHost, Message: fmt.Sprintf(
			"%s is not a sandboxd runtime: it is not an Extism plugin exporting %q", rt.file, evalFunction)}
	}
	return nil
}

func isPlugin(m *sandbox.Module) bool {
	for _, imp := range m.Imports {
		if imp.Module == protocol.ExtismEnvModule {
			return true
		}
	}
	return false
}

// start starts an interpreter of module m under l (its store limits for
// life, its per-call budgets the defaults of its evaluations), fenced by
// StartFuel and StartTimeout: listed (a session, an instance of the
// engine's table) or the caller's alone (a one-shot evaluation's).
func (r *Runner) start(ctx context.Context, m *sandbox.Module, lang protocol.Language, l limits.Limits, listed bool) (*sandbox.Instance, error) {
	req := sandbox.InstanceRequest{
		Module:       m,
		Capabilities: sandbox.Capabilities{WASI: &sandbox.WASI{Argv0: string(lang)}},
		Limits:       l,
		Start:        sandbox.CallLimits{Fuel: StartFuel, Timeout: StartTimeout},
	}
	if listed {
		return r.eng.Instantiate(ctx, req)
	}
	return r.eng.InstantiateUnlisted(ctx, req)
}

// RuntimeID is the id under which the compiled artefact of the runtime
// file wasm is stored: its pre-initialised module's (sandbox.PreinitID),
// so that an artefact compiled before runtimes were pre-initialised is
// not loaded.
func RuntimeID(wasm []byte) string { return sandbox.PreinitID(wasm) }

// runtimeFile is lang's runtime in dir.
func runtimeFile(dir string, lang protocol.Language) string {
	return filepath.Join(dir, RuntimeFile(lang))
}

// pruneStale removes from the first compiled directory what this build
// cannot load: other builds' artefacts, and those of runtimes no longer
// in Dir. A failure only leaves files behind.
func (r *Runner) pruneStale() {
	var keep []string
	for _, lang := range protocol.Languages() {
		if wasm, err := readRuntime(runtimeFile(r.cfg.Dir, lang)); err == nil {
			keep = append(keep, RuntimeID(wasm))
		}
	}
	if n, err := sandbox.PruneArtefacts(r.cfg.CompiledDirs[0], keep); err != nil {
		r.notice(fmt.Sprintf("removing stale compiled runtimes: %v", err))
	} else if n > 0 {
		r.notice(fmt.Sprintf("removed %d stale compiled runtimes from %s", n, r.cfg.CompiledDirs[0]))
	}
}
