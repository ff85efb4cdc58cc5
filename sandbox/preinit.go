package sandbox

// Pre-initialisation: a reactor's initialiser run once, ahead of time,
// and its effect kept as the module's initial state, so that no instance
// runs it again. A Go reactor (a Go PDK plugin, the interpreter runtimes)
// spends 3-5 ms in _initialize starting the Go runtime and running its
// package inits; the pre-initialised module starts where that left off,
// and with the pooling allocator's copy-on-write memory images a fresh
// instance maps its memory instead of building it.
//
// The rewrite is wasmbin's (PrepareSnapshot, ApplySnapshot: what it
// refuses, and why, is listed there); the run is a store like any other,
// fenced by the caller's limits: fuel, deadline and memory cap hold
// against a hostile initialiser, and end it with their usual errors. While
// it runs, WASI calls are answered as in any run (so what Go's runtime
// reads at start, its random seed, the clock, an empty environment and
// arguments, becomes part of the image); any other import traps and
// refuses the snapshot, since its effect (a plugin kernel's state, the
// parent's answer) would not be in the image.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox/internal/wasmbin"
)

// SnapshotError is why a module cannot be pre-initialised, before or
// while its initialiser runs (errors.As from the *Error Preinitialize
// returns, of kind invalid_module).
type SnapshotError = wasmbin.SnapshotError

// PreinitOptions fence a pre-initialisation.
type PreinitOptions struct {
	// Limits fence the initialiser (the start function and
	// _initialize), as a call's: fuel, timeout, memory and table caps,
	// output, and the compile limits of the copy it runs in. The zero
	// value takes limits.Defaults(). The memory the
	// initialiser leaves becomes the module's minimum, so it should be the
	// cap its instances will have.
	Limits limits.Limits
	// Argv0 is the WASI program name the initialiser sees (PreinitArgv0
	// when empty); it has no other arguments and no environment.
	Argv0 string
	// MaxModuleBytes bounds the module emitted (0: no bound). The memory
	// the initialiser leaves becomes data segments, so without a bound a
	// module of a few bytes could come back as one of 4 GiB.
	MaxModuleBytes int
}

// PreinitArgv0 is the program name an initialiser sees by default.
const PreinitArgv0 = "sandboxd-preinit"

// PreinitInfo says what a pre-initialisation did.
type PreinitInfo struct {
	FuelConsumed uint64        // by the initialiser: what each instance no longer spends
	MemoryBytes  uint64        // the memory image's size
	Elapsed      time.Duration // compile of the copy, initialiser and rewrite
}

// PreinitID is the id under which a pre-initialised module of the binary
// wasm is stored (CompileStored): the snapshot's own bytes differ from
// one pre-initialisation to the next (a random seed, the clock), so it is
// known by what it was made from.
func PreinitID(wasm []byte) string {
	return ModuleID(append([]byte(preinitKey), wasm...))
}

// preinitKey versions the snapshot's format: a change to what
// Preinitialize emits changes it, so no stale snapshot is loaded.
const preinitKey = "sandboxd preinit v1\x00"

// Preinitialize runs the initialiser of the binary module wasm once,
// under opts, and returns wasm with the state it left as its initial
// state (docs/preinit.md says what a guest sees change). Errors are
// *Error: invalid_module (with a *SnapshotError) for a module that cannot
// be pre-initialised, compile_limit_exceeded or invalid_module from
// compiling it, the fence's kind when the initialiser ran into one (a
// trap, fuel_exhausted, timeout, memory_limit_exceeded), cancelled.
func (e *Engine) Preinitialize(ctx context.Context, wasm []byte, opts PreinitOptions) ([]byte, PreinitInfo, error) {
	start := time.Now()
	l := opts.Limits
	if l == (limits.Limits{}) {
		l = limits.Defaults()
	}
	if err := l.Validate(limits.HardMaximums()); err != nil {
		return nil, PreinitInfo{}, &Error{Kind: KindHost, Message: "pre-initialisation limits." + err.Error(), err: err}
	}
	cp, plan, err := wasmbin.PrepareSnapshot(wasm)
	if err != nil {
		return nil, PreinitInfo{}, snapshotRefused(err)
	}
	// The copy compiles under the caller's compile limits, as the module
	// it pre-initialises will: the engine's defaults would let a compile
	// asked to finish in 100 ms run for minutes before its initialiser.
	m, _, err := e.compileNew(ctx, moduleBytes{bin: cp}, "", e.compileLimits(Source{CompileTimeout: l.CompileTimeout, CompileMemoryBytes: l.CompileMemoryBytes}))
	if err != nil {
		return nil, PreinitInfo{}, err
	}
	if exp, ok := m.Export(InitializeExport); plan.Initialize && (!ok || len(exp.Params) != 0 || len(exp.Results) != 0) {
		return nil, PreinitInfo{}, snapshotRefused(&SnapshotError{Reason: fmt.Sprintf("its %q takes or returns values, so it is not a WASI reactor's initialiser", InitializeExport)})
	}
	var caps Capabilities
	for _, imp := range m.Imports {
		if imp.Kind != "func" {
			return nil, PreinitInfo{}, snapshotRefused(&SnapshotError{Reason: fmt.Sprintf("it imports %s::%s, a %s, whose state lives outside the module", boundedName(imp.Module), boundedName(imp.Name), imp.Kind)})
		}
		if imp.Module == WASIModule {
			caps.WASI = &WASI{Argv0: cmp.Or(opts.Argv0, PreinitArgv0)}
		}
	}
	spec := storeSpec{module: m, caps: caps, limits: l}
	if err := spec.checkCaps(); err != nil {
		return nil, PreinitInfo{}, err
	}
	// The initialiser runs, and its image is copied and rewritten, under
	// one of the compile slots, as the rest of a compile: a compile
	// request holds no run slot, so without it parallel requests would
	// each hold a memory and two copies of it.
	select {
	case e.compileSlots <- struct{}{}:
		defer func() { <-e.compileSlots }()
	case <-ctx.Done():
		return nil, PreinitInfo{}, cancelledError()
	}
	s, err := e.openStore(ctx, spec)
	if err != nil {
		return nil, PreinitInfo{}, err
	}
	defer s.close()
	var called string // the first import other than WASI the initialiser called
	o := s.call(ctx, callSpec{limits: l}, func() ([]Value, error) {
		return nil, s.preinitialize(&called)
	})
	if called != "" { // refused even if the guest went on past the trap
		return nil, PreinitInfo{}, snapshotRefused(&SnapshotError{Reason: fmt.Sprintf(
			"its initialiser called %s, whose effect a snapshot cannot keep (while it runs, only the WASI calls that leave the WASI context as it was are answered)", called)})
	}
	if o.err != nil {
		var se *Error
		if errors.As(o.err, &se) && se.Kind == KindTrap && se.TrapCode == TrapCodeExit {
			// The module stopped half way through making its state
			// (docs/preinit.md lists this as a refusal, not a trap).
			return nil, PreinitInfo{}, snapshotRefused(&SnapshotError{Reason: fmt.Sprintf("its initialiser exited (status %d)", se.ExitCode)})
		}
		if errors.As(o.err, &se) {
			se.Message = "pre-initialisation: " + se.Message
		}
		return nil, PreinitInfo{}, o.err
	}
	if o.exited {
		return nil, PreinitInfo{}, snapshotRefused(&SnapshotError{Reason: fmt.Sprintf("its initialiser exited (status %d)", o.res.ExitCode)})
	}
	img := wasmbin.SnapshotImage{}
	if plan.HasMemory {
		ext := s.instance.GetExport(s.wt, wasmbin.MemoryExportName(0))
		if ext == nil || ext.Memory() == nil {
			return nil, PreinitInfo{}, newError(KindHost, "pre-initialisation: the instrumented copy has no memory export")
		}
		// Not copied: read while the store is open (it closes when
		// Preinitialize returns), and it may be 4 GiB.
		img.Memory = ext.Memory().UnsafeData(s.wt)
	}
	for _, g := range plan.Globals {
		ext := s.instance.GetExport(s.wt, g.Export)
		if ext == nil || ext.Global() == nil {
			return nil, PreinitInfo{}, newError(KindHost, "pre-initialisation: the copy does not export global %d", g.Index)
		}
		img.Globals = append(img.Globals, valBits(ext.Global().Get(s.wt)))
	}
	out, err := wasmbin.ApplySnapshot(wasm, plan, img, opts.MaxModuleBytes)
	var refused *SnapshotError
	if errors.As(err, &refused) {
		return nil, PreinitInfo{}, snapshotRefused(err)
	}
	if err != nil {
		return nil, PreinitInfo{}, &Error{Kind: KindHost, Message: "pre-initialisation: " + err.Error(), err: err}
	}
	return out, PreinitInfo{FuelConsumed: o.res.Usage.FuelConsumed, MemoryBytes: uint64(len(img.Memory)), Elapsed: time.Since(start)}, nil
}

// preinitialize instantiates the snapshot copy, WASI linked as for any run
// and every other import a function that records its name in called and
// traps, then runs the start function and _initialize. Inside call.
func (s *store) preinitialize(called *string) error {
	var linker *wasmtime.Linker
	if s.wasi != nil {
		var err error
		if linker, err = s.e.wasiLinker(s.wasi.cheapShadows()); err != nil {
			return err
		}
	}
	imports := s.module.wt.Imports()
	externs := make([]wasmtime.AsExtern, 0, len(imports))
	for i, imp := range imports {
		name := ""
		if n := imp.Name(); n != nil {
			name = *n
		}
		if imp.Module() == WASIModule && linker != nil && preinitAnswers(name, s.module.Imports[i].Type) {
			ext := linker.Get(s.wt, WASIModule, name)
			if ext == nil {
				return fmt.Errorf("%s::%s is not defined", WASIModule, name)
			}
			externs = append(externs, ext)
			continue
		}
		what := imp.Module() + "::" + name
		externs = append(externs, wasmtime.NewFunc(s.wt, imp.Type().FuncType(),
			func(*wasmtime.Caller, []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
				if *called == "" {
					*called = what
				}
				return nil, wasmtime.NewTrap("pre-initialisation: the initialiser called " + what)
			}))
	}
	inst, err := wasmtime.NewInstance(s.wt, s.module.wt, externs)
	if err != nil {
		return err
	}
	return s.boot(inst, true)
}

// preinitAnswers says whether the initialiser's call of the WASI function
// name, imported with the signature typ, is answered. Not answered (the
// stub that refuses the snapshot when called): a name or signature WASI
// has not, which instantiation refuses later with disallowed_import (a
// call of it would be refused too, not answered here with a host error);
// and the calls that change the WASI context rather than read it, since
// each instance gets a fresh context: stdout closed by an initialiser
// (fd_close, fd_renumber) would be open again in every instance.
func preinitAnswers(name, typ string) bool {
	want, known := wasiFuncs[name]
	return known && typ == want && name != "fd_close" && name != "fd_renumber"
}

// preinitLimits fence the initialiser of a module pre-initialised as it
// is compiled (Source.Preinitialize): the run defaults, but the compile's
// deadline and the compile limits of the request (the copy's compile and
// the initialiser are part of the compile), the compile's memory limit as
// the initialiser's if it is lower, and the largest memory and tables
// a run may have, up to MaxPreinitMemoryBytes (what the initialiser
// leaves is the module's minimum, so a cap lower than that would only
// refuse it here instead of at instantiation).
func (e *Engine) preinitLimits(lim compileLimits) limits.Limits {
	l := limits.Defaults()
	l.Timeout = lim.timeout
	l.CompileTimeout, l.CompileMemoryBytes = lim.timeout, lim.memoryBytes
	// The initialiser's memory is the compile's too: a parent cannot give
	// a compile limits.memoryBytes, so without this every pre-initialising
	// compile of a hostile module could hold the largest memory a run may
	// ask for, whatever the parent asked.
	l.MemoryBytes = min(e.cfg.Maximums.MemoryBytes, lim.memoryBytes, MaxPreinitMemoryBytes)
	l.TableElements = e.cfg.Maximums.TableElements
	return l
}

// MaxPreinitMemoryBytes bounds the memory an initialiser may leave when a
// module is pre-initialised as it is compiled, whatever the compile's and
// the sidecar's memory limits: the memory is scanned in place and the
// module made of it is bounded by the largest module, but the guest's
// memory itself is held for the whole compile. goja, the largest
// initialiser measured, leaves 12.3 MB.
const MaxPreinitMemoryBytes = 256 << 20

// compilePreinit is Compile of a source with Preinitialize: the module
// pre-initialised, then compiled, kept in the cache and the persistent
// cache under PreinitID of its bytes (never under the bytes themselves,
// which name the module as it is).
func (e *Engine) compilePreinit(ctx context.Context, src Source) (*Module, CompileInfo, error) {
	start := time.Now()
	if ctx.Err() != nil {
		return nil, CompileInfo{}, cancelledError()
	}
	if countSources(src) != 1 || src.ID != "" {
		return nil, CompileInfo{}, newError(KindHost, "module: preinitialize takes the module's bytes (wasm or path), exactly one of them")
	}
	mod, err := e.loadBytes(src)
	if err != nil {
		return nil, CompileInfo{}, err
	}
	if !mod.isWasmBinary() {
		return nil, CompileInfo{}, newError(KindInvalidModule, "module: preinitialize takes a binary module (wasm, or a path to a .wasm file), not WebAssembly text")
	}
	id := PreinitID(mod.bin)
	if m, ok := e.cache.get(id); ok {
		return m, CompileInfo{Cached: true, Elapsed: time.Since(start)}, nil
	}
	lim := e.compileLimits(src)
	r, shared, err := e.flight.do(ctx, flightKey(id, lim), func(ctx context.Context) (flightResult, error) {
		if m, ok := e.cache.peek(id); ok {
			return flightResult{m: m, cached: true}, nil
		}
		e.cache.miss()
		// A snapshot stored by an engine with a larger MaxModuleBytes is
		// pre-initialised again, and refused as this engine's would be.
		if m := e.loadFromDisk(ctx, id); m != nil && m.snapshotSize <= e.cfg.MaxModuleBytes {
			e.cache.put(m, 0, moduleBytes{})
			return flightResult{m: m, fromDisk: true}, nil
		}
		m, compiled, err := e.compileMaybePreinit(ctx, Source{Wasm: mod.bin, Preinitialize: true}, id, lim, e.cfg.MaxModuleBytes)
		if err != nil {
			return flightResult{}, err
		}
		e.saveToDisk(m, compiled)
		e.cache.put(m, 0, moduleBytes{})
		return flightResult{m: m}, nil
	})
	if err != nil {
		return nil, CompileInfo{}, err
	}
	cached := shared || r.cached
	if cached {
		e.cache.hit()
	}
	return r.m, CompileInfo{Cached: cached, FromDisk: r.fromDisk && !shared, Elapsed: time.Since(start)}, nil
}

// cachedPreinit is Cached for a source with Preinitialize.
func (e *Engine) cachedPreinit(src Source) (*Module, bool) {
	if countSources(src) != 1 || src.ID != "" {
		return nil, false
	}
	mod, err := e.loadBytes(src)
	if err != nil || !mod.isWasmBinary() {
		return nil, false
	}
	return e.cache.peek(PreinitID(mod.bin))
}

// snapshotRefused is the *Error of a module that cannot be
// pre-initialised: a *SnapshotError as invalid_module, any other error
// of the rewriter's (bytes it cannot parse) too.
func snapshotRefused(err error) *Error {
	return &Error{Kind: KindInvalidModule, Message: err.Error(), err: err}
}
