package sandbox

// The life of a store. Every run and every long-lived instance owns one
// wasmtime store from open to close, and all guest code that ever runs in
// it runs inside a call:
//
//	open   the checks that need no store (imports, static caps, the
//	       grant), the WASI grant laid out, the wasmtime store with its
//	       limiter, WASI attached, the C fence installed. No guest code
//	       runs.
//	call   the per-call fences armed (fuel, the fence's deadline and
//	       cancellation, the ticker's lease, the log and output budgets),
//	       the body run, usage read, the outcome classified. Instantiation
//	       (the start function, _initialize) is a call like any other.
//	close  the store freed, then the fence the store's callback points
//	       at, then the WASI state.
//
// A run is open → call(instantiate, start, export) → close (run.go); an
// instance is open → call(instantiate, start, _initialize), one call per
// turn, close (instance.go).

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox/internal/wasmbin"
)

// storeSpec is what a store is opened with.
type storeSpec struct {
	module *Module
	caps   Capabilities
	// limits hold for the store's whole life (memory, tables, instances,
	// memories) and are the defaults of each call (the rest).
	limits limits.Limits
	// plugin, if set, makes the store an Extism plugin's (extism.go).
	plugin *pluginConfig
	// longLived says the store is a long-lived instance's: it takes its
	// pool slots from the instances' share (pool.go).
	longLived bool
	// hostFunctions are the imports the caller serves (host_parent.go).
	hostFunctions []HostFunction
}

// checkImports refuses, before any store exists, an import that is not
// granted (imports.go).
func (spec storeSpec) checkImports() error {
	if err := checkImports(spec.module, spec.caps, spec.hostFunctions, spec.plugin != nil); err != nil {
		return err
	}
	return nil
}

// checkCaps refuses, before any store exists, a module whose initial
// memories and tables (with a plugin's kernel) or whose WASI grant's host
// bytes exceed the memory cap.
func (spec storeSpec) checkCaps() error {
	var kernel uint64
	if spec.plugin != nil {
		kernel = kernelInitialBytes
	}
	if err := checkStaticCaps(spec.module.info, spec.limits, kernel); err != nil {
		return err
	}
	if err := checkGrantBytes(spec.caps.WASI, spec.limits); err != nil {
		return err
	}
	return nil
}

// store is one wasmtime store and what lives in it: the module's
// instance, the fence, the WASI and plugin state, and the call in
// progress. Only the goroutine that holds it (a run, an instance's turn)
// touches it.
type store struct {
	e        *Engine
	module   *Module
	limits   limits.Limits
	wt       *wasmtime.Store
	fence    *fence
	instance *wasmtime.Instance
	random   splitmix64
	slots    poolSlots // what the store took from the engine's pool (pool.go)
	// poolWait is how long openStore waited for slots: it counts against
	// the deadline of the store's first call (the run, or the
	// instantiation), which then has only the rest.
	poolWait time.Duration
	wasi     *wasiRun                   // nil without the wasi capability (wasi.go)
	plugin   *pluginState               // nil unless an Extism plugin (extism.go)
	declared map[[2]string]HostFunction // the imports the parent serves, by module and name (host_parent.go)
	bound    boundExports               // looked up once after instantiation

	// cur is the call in progress, begun by call; the host functions
	// read its limits and record into it.
	cur callState
}

// callState is one call's share of a store.
type callState struct {
	ctx      context.Context // the call's: done at a cancel or a stop
	host     HostCaller      // asks the parent (host_parent.go)
	limits   limits.Limits
	log      logSink
	hostTrap string // set when a host function trapped the guest, with why
	fault    *Error // set when a host function failed (guarded)
	started  time.Time
}

// wasmFunc is a host function as wasmtime-go calls it.
type wasmFunc = func(*wasmtime.Caller, []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap)

// guarded wraps host function fn (named name) so that a panic in it, a
// bug of ours whatever the guest passed, stops the guest and is the
// call's error (kind host, naming the function), instead of unwinding
// through wasmtime into whoever made the call.
func (s *store) guarded(name string, fn wasmFunc) wasmFunc {
	return func(c *wasmtime.Caller, args []wasmtime.Val) (vals []wasmtime.Val, trap *wasmtime.Trap) {
		defer s.recoverHostPanic(name, &vals, &trap)
		return fn(c, args)
	}
}

// storeFunc is a host function shared by every store of an engine (a
// linker's, defined once, wasi_link.go): it finds its store through its
// caller, and is guarded as guarded guards a store's own.
func storeFunc(name string, fn func(*store, *wasmtime.Caller, []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap)) wasmFunc {
	return func(c *wasmtime.Caller, args []wasmtime.Val) (vals []wasmtime.Val, trap *wasmtime.Trap) {
		s := c.Data().(*store)
		defer s.recoverHostPanic(name, &vals, &trap)
		return fn(s, c, args)
	}
}

// recoverHostPanic, deferred by host function name, makes a panic in it
// the call's error and the guest's trap.
func (s *store) recoverHostPanic(name string, vals *[]wasmtime.Val, trap **wasmtime.Trap) {
	if p := recover(); p != nil {
		msg := fmt.Sprintf("sandboxd: internal error in %s: %v", name, p)
		s.cur.fault = &Error{Kind: KindHost, Message: msg}
		*vals, *trap = nil, wasmtime.NewTrap(msg)
	}
}

// boundExports are what every call reads or resets, looked up once: the
// rewriter's refusal records and every memory and table (the sum the cap
// bounds).
type boundExports struct {
	denied []*wasmtime.Global
	mems   []*wasmtime.Memory
	tables []*wasmtime.Table
	elem   []uint64 // each table's element size
}

// openStore makes a store for spec, whose checks (checkImports,
// checkCaps) have passed: everything before guest code runs. On error
// nothing is left open.
func (e *Engine) openStore(ctx context.Context, spec storeSpec) (s *store, err error) {
	m, l := spec.module, spec.limits
	s = &store{e: e, module: m, limits: l, random: splitmix64{spec.caps.Seed}, declared: declarations(spec.hostFunctions)}
	defer func() {
		if err != nil {
			s.close()
			s = nil
		}
	}()
	instances, memories := int64(l.Instances), int64(l.Memories)
	if spec.plugin != nil {
		s.plugin = newPluginState(s, *spec.plugin)
		instances++ // the kernel
		memories++  // the kernel's memory
	}
	if spec.caps.WASI != nil {
		if s.wasi, err = e.prepareWASI(ctx, m, spec.caps, l); err != nil {
			return s, err
		}
		instances++ // the WASI shim (wasi_shim.go)
	}
	if s.slots, s.poolWait, err = e.takeSlots(ctx, m.info, spec.plugin != nil, s.wasi != nil, l, spec.longLived, len(spec.hostFunctions) > 0); err != nil {
		return s, err
	}
	s.wt = wasmtime.NewStoreWithData(e.wt, s) // storeFunc finds s through a caller
	s.wt.Limiter(int64(l.MemoryBytes), int64(l.TableElements), instances, -1, memories)
	if s.wasi != nil {
		if err := s.wasi.attach(s.wt); err != nil {
			return s, err
		}
	}
	if s.fence, err = installFence(s.wt, l.Timeout); err != nil {
		return s, &Error{Kind: KindHost, Message: err.Error(), err: err}
	}
	return s, nil
}

// callSpec is one call's fences and sinks.
type callSpec struct {
	limits limits.Limits
	log    func(level LogLevel, line string)
	output func(stream string, data []byte)
	host   HostCaller // serves hostFunctions for this call
	// running, if set, is told how to stop the call while it runs (and
	// told nil when it has returned), for a caller that must be able to
	// stop it from elsewhere (an instance's Release).
	running func(stop func())
}

// outcome is how a call ended: a result, or an error; fatal when the
// store's state stopped where it can no longer be trusted (a trap, a
// fence), exited when the guest ended itself (proc_exit).
type outcome struct {
	res    *Result
	err    error
	fatal  bool
	exited bool
}

// call runs body under a fresh set of per-call fences and classifies how
// it ended.
func (s *store) call(ctx context.Context, c callSpec, body func() ([]Value, error)) outcome {
	if ctx.Err() != nil {
		return outcome{err: cancelledError()}
	}
	l := c.limits
	s.cur = callState{limits: l, log: logSink{budget: l.LogBytes}}
	if c.log != nil {
		s.cur.log.forward = func(line string) { c.log("", line) }
	}
	if s.plugin != nil {
		s.plugin.beginCall(c.log)
	}
	// One unit more than the budget: wasmtime checks fuel only at
	// function entries and loop headers, so straight-line code can end
	// past the budget, and what is left then reads 0 however far past.
	// With the spare unit, "nothing left" means the budget was overrun,
	// and the call is fuel_exhausted (below) rather than a success that
	// used more than it was given.
	if err := s.wt.SetFuel(l.Fuel + 1); err != nil {
		return outcome{err: &Error{Kind: KindHost, Message: "setting fuel: " + engineMessage(err.Error()), err: err}}
	}
	for _, g := range s.bound.denied { // a refusal an earlier call coped with is not this call's
		g.Set(s.wt, wasmtime.ValI64(0))
	}
	s.fence.rearm(max(l.Timeout-s.poolWait, 1))
	s.poolWait = 0
	s.wt.SetEpochDeadline(1)
	s.e.ticker.acquire()
	defer s.e.ticker.release()
	f := s.fence
	stop := f.cancel
	s.cur.ctx, s.cur.host = ctx, c.host
	if s.wasi != nil || s.declared != nil {
		// A guest asleep in poll_oneoff, an open's watchdog, a wait for
		// the parent's answer: each waits on a context, one that stop
		// cancels too.
		callCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		s.cur.ctx = callCtx
		stop = func() { f.cancel(); cancel() }
	}
	if s.wasi != nil {
		s.wasi.ctx = s.cur.ctx
		s.wasi.out.restart(l.OutputBytes, c.output)
	}
	if c.running != nil {
		c.running(stop)
		defer c.running(nil)
	}
	// The fence is freed with the store, so a cancellation that already
	// started must finish before call returns: wait for it when
	// stopWatching reports that.
	cancelDone := make(chan struct{})
	stopWatching := context.AfterFunc(ctx, func() { f.cancel(); close(cancelDone) })
	defer func() {
		if !stopWatching() {
			<-cancelDone
		}
	}()
	s.cur.started = time.Now()

	values, err := body()
	elapsed := time.Since(s.cur.started)
	usage := s.usage()
	if usage.FuelConsumed > l.Fuel {
		// The body ended past the budget, between two checks: returned,
		// exited or reported a plugin error on fuel it did not have.
		usage.FuelConsumed = l.Fuel
		if err == nil || isExit(err) || KindOf(err) == KindPluginError {
			releaseWasmtimeError(err)
			err = fuelError(l)
		}
	}
	res := &Result{Values: values, Usage: usage, Elapsed: elapsed, LogLines: s.cur.log.lines,
		LogTruncated: s.cur.log.truncated, LogDropped: s.cur.log.dropped, Output: s.wasi.output()}
	var pe *Error
	if errors.As(err, &pe) && pe.Kind == KindPluginError {
		pe.Usage = &usage
		return outcome{res: res, err: pe}
	}
	code, exited := wasiExitStatus(err)
	if err != nil && (!exited || s.exitAfterDenial(code)) {
		se := s.classify(err)
		se.Usage = &usage
		se.Output = res.Output
		releaseWasmtimeError(err)
		return outcome{err: se, fatal: true}
	}
	res.ExitCode = code
	return outcome{res: res, exited: exited}
}

// instantiate links and instantiates the module, sets the in-module caps,
// then runs the start function and, for an instance, _initialize. Inside
// call.
func (s *store) instantiate(initialize bool) error {
	inst, err := s.link() // with a plugin's kernel (extism_link.go)
	if err != nil {
		return err
	}
	return s.boot(inst, initialize)
}

// boot makes inst the store's instance, sets the in-module caps, then
// runs the start function and, for an instance, _initialize.
func (s *store) boot(inst *wasmtime.Instance, initialize bool) error {
	s.instance = inst
	s.bind()
	info := s.module.info
	if info.GrowsMemory || info.GrowsTable { // each export lookup costs: skip caps no code can reach
		s.setGlobal(wasmbin.ExportMemCapBytes, int64(s.guestCap()))
	}
	if info.GrowsTable {
		s.setGlobal(wasmbin.ExportTableCap, int64(s.limits.TableElements))
	}
	if info.HasStart {
		if _, err := inst.GetFunc(s.wt, wasmbin.ExportStart).Call(s.wt); err != nil {
			return s.exitedInstantiating(err, initialize, "the start function")
		}
	}
	if !initialize {
		return nil
	}
	if exp, ok := s.module.Export(InitializeExport); ok && exp.Kind == "func" && len(exp.Params) == 0 && len(exp.Results) == 0 {
		if _, err := inst.GetFunc(s.wt, InitializeExport).Call(s.wt); err != nil {
			return s.exitedInstantiating(err, true, `"`+InitializeExport+`"`)
		}
	}
	return nil
}

// exitedInstantiating turns a proc_exit during an instance's
// instantiation into the error it is: whatever the status, the module
// stopped half way through making its state, so there is no instance to
// call. (A run's start function may exit: the run's result says so.) A
// failing exit after a denied growth stays the denial's. Any other error
// is returned as it is.
func (s *store) exitedInstantiating(err error, instance bool, where string) error {
	code, exited := wasiExitStatus(err)
	if !instance || !exited || s.exitAfterDenial(code) {
		return err
	}
	return &Error{Kind: KindTrap, TrapCode: TrapCodeExit, ExitCode: code,
		Message: fmt.Sprintf("the guest exited with status %d in %s while being instantiated; no instance was made", code, where)}
}

// bind looks up, once, what every call reads or resets.
func (s *store) bind() {
	info := s.module.info
	global := func(name string) {
		if g := exportedGlobal(s.wt, s.instance, name); g != nil {
			s.bound.denied = append(s.bound.denied, g)
		}
	}
	if info.GrowsMemory || info.GrowsTable {
		global(wasmbin.ExportMemDeniedBytes)
	}
	if info.GrowsTable {
		global(wasmbin.ExportTableDenied)
	}
	for i := 0; i < info.ImportedMemories+len(info.Memories); i++ {
		if m := exportedMemory(s.wt, s.instance, wasmbin.MemoryExportName(i)); m != nil {
			s.bound.mems = append(s.bound.mems, m)
		}
	}
	for i := 0; i < info.ImportedTables+len(info.Tables); i++ {
		if t := exportedTable(s.wt, s.instance, wasmbin.TableExportName(i)); t != nil {
			s.bound.tables = append(s.bound.tables, t)
			s.bound.elem = append(s.bound.elem, s.module.tableElemBytes(i))
		}
	}
}

// guestCap is the byte cap of the module's own memories and tables: the
// store's cap less what the plugin kernel holds.
func (s *store) guestCap() uint64 {
	if s.plugin == nil {
		return s.limits.MemoryBytes
	}
	return s.limits.MemoryBytes - s.plugin.kernelBytes
}

// guestBytes is what the module's memories and tables hold now (never
// shrinking, so also their peak), as the cap counts it.
func (s *store) guestBytes(st wasmtime.Storelike) uint64 {
	var n uint64
	for _, m := range s.bound.mems {
		n += uint64(m.DataSize(st))
	}
	for i, t := range s.bound.tables {
		n += t.Size(st) * s.bound.elem[i]
	}
	return n
}

// usage is the call's fuel and the store's memory, plugin kernel included.
func (s *store) usage() Usage {
	var u Usage
	if left, err := s.wt.GetFuel(); err == nil {
		u.FuelConsumed = s.cur.limits.Fuel + 1 - left // the spare unit of call
	}
	u.PeakMemoryBytes = s.guestBytes(s.wt)
	if s.plugin != nil {
		u.PeakMemoryBytes += s.plugin.kernelBytes
	}
	return u
}

func (s *store) setGlobal(name string, v int64) {
	if g := exportedGlobal(s.wt, s.instance, name); g != nil {
		g.Set(s.wt, wasmtime.ValI64(v))
	}
}

// getGlobalIf reads an injected i64 global, or 0 when used is false.
func (s *store) getGlobalIf(used bool, name string) uint64 {
	if !used || s.instance == nil {
		return 0
	}
	if g := exportedGlobal(s.wt, s.instance, name); g != nil {
		return uint64(g.Get(s.wt).I64())
	}
	return 0
}

// close frees the store, then the fence the store's callback points at,
// then the WASI state. Idempotent.
func (s *store) close() {
	if s.wt != nil {
		s.wt.Close()
		runtime.KeepAlive(s.wt)
		s.wt = nil
	}
	s.slots.release() // the store's memories and tables are back in the pool
	if s.fence != nil {
		s.fence.free()
		s.fence = nil
	}
	s.wasi.close()
}

// freeAfterAnswer runs free (what closes the store) once the caller's
// answer is out, when ctx lets it put that off (protocol.AfterAnswer),
// and now otherwise. What the guest wrote is forwarded now: the answer's
// recipient sees a run's output before its answer. Call it once the
// store's last call has returned.
func (s *store) freeAfterAnswer(ctx context.Context, free func()) {
	s.wasi.output()
	protocol.DoAfterAnswer(ctx, free)
}

// isExit says whether err is the guest's proc_exit (without freeing it).
func isExit(err error) bool {
	var ge *guestExit
	var werr *wasmtime.Error
	if errors.As(err, &ge) {
		return true
	}
	if errors.As(err, &werr) {
		_, ok := werr.ExitStatus()
		return ok
	}
	return false
}
