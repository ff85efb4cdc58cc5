package sandbox

import (
	"context"
	"runtime"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox/internal/wasmbin"
)

// Request is one run: call Function of Module with Args under Limits.
type Request struct {
	Module       *Module
	Function     string
	Args         []Value
	Limits       limits.Limits
	Capabilities Capabilities
	// Log receives each accepted guest log line, in order, on the guest's
	// thread, before Run returns. It must not block (queue, don't write):
	// the guest is paused while it runs.
	Log func(line string)
	// Output receives a WASI guest's writes to stdout and stderr as they
	// happen (within limits.OutputBytes per stream), coalesced into pieces
	// (wasi_output.go), all before Run returns. Calls never overlap and
	// must not block. data is read-only and stays valid.
	Output func(stream string, data []byte)
}

// Result is what a successful run returns.
type Result struct {
	Values []Value
	Usage
	Elapsed      time.Duration // instantiation + start + call
	LogLines     int           // lines delivered to Request.Log
	LogTruncated bool          // some lines were cut or dropped by the log caps
	// ExitCode is a WASI guest's proc_exit status (0 when it returned).
	ExitCode int
	Output   *Output // a WASI run's stdout and stderr; nil otherwise
}

// run is the state of one Run: its store, its fence and what the host
// functions record.
type run struct {
	req      Request
	module   *Module
	store    *wasmtime.Store
	fence    *fence
	instance *wasmtime.Instance
	started  time.Time
	random   splitmix64
	log      logSink
	hostTrap string // set when a host function trapped the guest, with why

	slots  poolSlots    // what the store took from the engine's pool (pool.go)
	wasi   *wasiRun     // nil unless the run was granted WASI (wasi.go)
	plugin *pluginState // nil unless an Extism plugin instance (extism.go)
}

// Run executes req. It returns a *Result, or an *Error whose Kind says why
// the run stopped. Cancelling ctx stops the guest within a few ticks with
// kind cancelled. Run is safe for concurrent use; runs share nothing.
//
// The pipeline: check imports and signature (no store yet) → fresh store
// with fuel, epoch fence and limiter → instantiate (the start section was
// removed by the instrumentation, so no guest code runs here) → set the
// in-module caps → call the original start function → call the export →
// classify.
func (e *Engine) Run(ctx context.Context, req Request) (*Result, error) {
	if err := e.checkModule(req.Module); err != nil {
		return nil, err
	}
	if err := req.Limits.Validate(limits.HardMaximums()); err != nil {
		return nil, &Error{Kind: KindHost, Message: "limits." + err.Error(), err: err}
	}
	if ctx.Err() != nil {
		return nil, cancelledError()
	}
	m := req.Module
	if err := checkRunImports(m, req.Capabilities); err != nil {
		return nil, err
	}
	req.Function = entryPoint(m, req.Function)
	if err := checkSignature(m, req.Function, req.Args); err != nil {
		return nil, err
	}
	if err := checkStaticCaps(m.info, req.Limits); err != nil {
		return nil, err
	}

	r := &run{req: req, module: m, random: splitmix64{req.Capabilities.Seed}}
	r.log = logSink{budget: req.Limits.LogBytes, forward: req.Log}
	defer r.close()
	instances := int64(req.Limits.Instances)
	if req.Capabilities.WASI != nil {
		w, err := e.prepareWASI(ctx, &req)
		if err != nil {
			return nil, err
		}
		r.wasi = w
		instances++ // the poll_oneoff helper (wasi.go)
	}

	var err error
	if r.slots, err = e.takeSlots(ctx, m.info, false, r.wasi != nil, req.Limits.TableElements, false); err != nil {
		return nil, err
	}
	r.store = wasmtime.NewStore(e.wt)
	if err := r.store.SetFuel(req.Limits.Fuel); err != nil {
		return nil, &Error{Kind: KindHost, Message: "setting fuel: " + cleanMessage(err.Error()), err: err}
	}
	l := req.Limits
	r.store.Limiter(int64(l.MemoryBytes), int64(l.TableElements), instances, -1, int64(l.Memories))
	if r.wasi != nil {
		if err := r.wasi.attach(r.store); err != nil {
			return nil, err
		}
	}
	r.store.SetEpochDeadline(1)
	f, err := installFence(r.store, req.Limits.Timeout)
	if err != nil {
		return nil, &Error{Kind: KindHost, Message: err.Error(), err: err}
	}
	r.fence = f
	e.ticker.acquire()
	defer e.ticker.release()
	// The fence is freed when Run returns, so a cancellation that already
	// started must finish before then: wait for it when stop reports that.
	cancelDone := make(chan struct{})
	stopWatching := context.AfterFunc(ctx, func() { f.cancel(); close(cancelDone) })
	defer func() {
		if !stopWatching() {
			<-cancelDone
		}
	}()
	r.started = time.Now()

	values, err := r.execute()
	elapsed := time.Since(r.started)
	usage := r.usage()
	exitCode, exited := wasiExitStatus(err)
	if err != nil && (!exited || r.exitAfterDenial(exitCode)) {
		se := r.classify(err)
		se.Usage = &usage
		se.Output = r.wasi.output()
		releaseWasmtimeError(err)
		return nil, se
	}
	return &Result{Values: values, Usage: usage, Elapsed: elapsed, LogLines: r.log.lines, LogTruncated: r.log.truncated,
		ExitCode: exitCode, Output: r.wasi.output()}, nil
}

// execute instantiates, runs the start function and calls the export.
func (r *run) execute() ([]Value, error) {
	var inst *wasmtime.Instance
	var err error
	if r.wasi != nil {
		inst, err = r.instantiateWASI()
	} else {
		inst, err = wasmtime.NewInstance(r.store, r.module.wt, r.hostImports())
	}
	if err != nil {
		return nil, err
	}
	r.instance = inst
	info := r.module.info
	if info.GrowsMemory || info.GrowsTable { // each export lookup costs: skip caps no code can reach
		r.setGlobal(wasmbin.ExportMemCapBytes, int64(r.req.Limits.MemoryBytes))
	}
	if info.GrowsTable {
		r.setGlobal(wasmbin.ExportTableCap, int64(r.req.Limits.TableElements))
	}
	if r.module.info.HasStart {
		if _, err := inst.GetFunc(r.store, wasmbin.ExportStart).Call(r.store); err != nil {
			return nil, err
		}
	}
	exp, _ := r.module.Export(r.req.Function)
	return callFunction(r.store, inst, r.req.Function, r.req.Args, exp.Results)
}

// callFunction calls the function export name of inst, whose signature
// checkSignature accepted for args: in one cgo call when it can
// (callExport), through wasmtime-go otherwise.
func callFunction(store *wasmtime.Store, inst *wasmtime.Instance, name string, args []Value, results []string) ([]Value, error) {
	if values, err, ok := callExport(store, inst, name, args, len(results)); ok {
		return values, err
	}
	fn := inst.GetFunc(store, name)
	if fn == nil { // checkSignature proved it exists; keep the guard anyway
		return nil, &Error{Kind: KindExport, Function: name, Message: "export " + protocol.Quote(name) + " not found"}
	}
	wargs := make([]any, len(args))
	for i, a := range args {
		wargs[i] = toWasmtime(a)
	}
	out, err := fn.Call(store, wargs...)
	if err != nil {
		return nil, err
	}
	return fromWasmtime(out, results), nil
}

func (r *run) setGlobal(name string, v int64) {
	if ext := r.instance.GetExport(r.store, name); ext != nil && ext.Global() != nil {
		ext.Global().Set(r.store, wasmtime.ValI64(v))
	}
}

// getGlobalIf reads an injected i64 global, or 0 when used is false.
func (r *run) getGlobalIf(used bool, name string) uint64 {
	if !used || r.instance == nil {
		return 0
	}
	if ext := r.instance.GetExport(r.store, name); ext != nil && ext.Global() != nil {
		return uint64(ext.Global().Get(r.store).I64())
	}
	return 0
}

// usage reads fuel consumed and the peak of memory: the bytes of all
// linear memories plus the storage of all tables (ElemBytes per element),
// the same total the cap bounds. Neither ever shrinks, so the current total
// is the peak.
func (r *run) usage() Usage {
	var u Usage
	if left, err := r.store.GetFuel(); err == nil {
		u.FuelConsumed = r.req.Limits.Fuel - left
	}
	if r.instance == nil {
		return u
	}
	info := r.module.info
	for i := 0; i < info.ImportedMemories+len(info.Memories); i++ {
		ext := r.instance.GetExport(r.store, wasmbin.MemoryExportName(i))
		if ext == nil || ext.Memory() == nil {
			break
		}
		u.PeakMemoryBytes += uint64(ext.Memory().DataSize(r.store))
	}
	for i := 0; i < info.ImportedTables+len(info.Tables); i++ {
		ext := r.instance.GetExport(r.store, wasmbin.TableExportName(i))
		if ext == nil || ext.Table() == nil {
			break
		}
		u.PeakMemoryBytes += ext.Table().Size(r.store) * r.module.tableElemBytes(i)
	}
	return u
}

// close frees the store, then the fence the store's callback points at.
func (r *run) close() {
	if r.store != nil {
		r.store.Close()
	}
	r.slots.release()
	if r.fence != nil {
		r.fence.free()
	}
	r.wasi.close()
	runtime.KeepAlive(r.store)
}

func toWasmtime(v Value) wasmtime.Val {
	switch v.Type {
	case I32:
		return wasmtime.ValI32(v.I32())
	case I64:
		return wasmtime.ValI64(v.I64())
	case F32:
		return wasmtime.ValF32(v.F32())
	default:
		return wasmtime.ValF64(v.F64())
	}
}

// fromWasmtime converts Func.Call's result (nil, one Go value, or []Val)
// to Values of the declared result types.
func fromWasmtime(out any, types []string) []Value {
	var raw []any
	switch o := out.(type) {
	case nil:
	case []wasmtime.Val:
		for _, v := range o {
			raw = append(raw, v.Get())
		}
	default:
		raw = []any{o}
	}
	vals := make([]Value, 0, len(raw))
	for _, x := range raw {
		switch x := x.(type) {
		case int32:
			vals = append(vals, ValueI32(x))
		case int64:
			vals = append(vals, ValueI64(x))
		case float32:
			vals = append(vals, ValueF32(x))
		case float64:
			vals = append(vals, ValueF64(x))
		}
	}
	return vals
}
