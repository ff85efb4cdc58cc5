package sandbox

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/limits"
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
	// happen (within limits.OutputBytes per stream), like Log. data is
	// read-only and stays valid.
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

	wasi *wasiRun // nil unless the run was granted WASI (wasi.go)
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
	if req.Module == nil {
		return nil, newError(KindHost, "no module")
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
	fn := inst.GetFunc(r.store, r.req.Function)
	if fn == nil { // checkSignature proved it exists; keep the guard anyway
		return nil, &Error{Kind: KindExport, Function: r.req.Function, Message: fmt.Sprintf("export %q not found", r.req.Function)}
	}
	args := make([]any, len(r.req.Args))
	for i, a := range r.req.Args {
		args[i] = toWasmtime(a)
	}
	out, err := fn.Call(r.store, args...)
	if err != nil {
		return nil, err
	}
	exp, _ := r.module.Export(r.req.Function)
	return fromWasmtime(out, exp.Results), nil
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
	if r.fence != nil {
		r.fence.free()
	}
	r.wasi.close()
	runtime.KeepAlive(r.store)
}

// classify turns the error of a failed run into an *Error. The order is the
// point: a cancellation is what the caller asked for; a denied growth
// explains whatever the guest did next (unreachable, an out-of-bounds store,
// spinning until fuel or time ran out); only then come the fences' own
// verdicts and the trap codes. A trap with no denial recorded is reported
// as the trap it is, even right at the cap.
func (r *run) classify(err error) *Error {
	var se *Error
	if errors.As(err, &se) {
		return se
	}
	l := r.req.Limits
	if r.fence.reason() == stopCancelled {
		return cancelledError()
	}
	info := r.module.info
	if bytes := r.getGlobalIf(info.GrowsMemory || info.GrowsTable, wasmbin.ExportMemDeniedBytes); bytes > 0 {
		return &Error{Kind: KindMemoryLimitExceeded, Resource: ResourceMemory, Limit: l.MemoryBytes,
			Requested: bytes,
			Message:   fmt.Sprintf("memory growth to %d bytes denied: the cap is %d bytes (linear memory and tables together)", bytes, l.MemoryBytes)}
	}
	if elems := r.getGlobalIf(info.GrowsTable, wasmbin.ExportTableDenied); elems > 0 {
		return &Error{Kind: KindMemoryLimitExceeded, Resource: ResourceTable, Limit: l.TableElements,
			Requested: elems,
			Message:   fmt.Sprintf("table growth to %d elements denied: the cap is %d elements", elems, l.TableElements)}
	}
	if r.fence.reason() == stopTimedOut {
		return timeoutError(l)
	}
	if r.hostTrap != "" {
		return &Error{Kind: KindTrap, TrapCode: "memory_out_of_bounds", Message: r.hostTrap}
	}
	var trap *wasmtime.Trap
	if errors.As(err, &trap) {
		code := trap.Code()
		if code == nil {
			return &Error{Kind: KindTrap, TrapCode: "host", Frames: frames(trap, r.module.info),
				Message: "guest trapped: " + firstLine(trap.Message())}
		}
		switch raw := int(*code); {
		case raw == rawTrapOutOfFuel:
			return fuelError(l)
		case raw == rawTrapInterrupt:
			return timeoutError(l)
		case raw < len(TrapCodes):
			fr := frames(trap, r.module.info)
			return &Error{Kind: KindTrap, TrapCode: TrapCodes[raw], Frames: fr,
				Message: "guest trapped: " + strings.ReplaceAll(TrapCodes[raw], "_", " ") + where(fr)}
		}
	}
	return &Error{Kind: KindHost, Message: cleanMessage(err.Error())}
}

// releaseWasmtimeError frees the C side of a wasmtime error now rather than
// at some later garbage collection: a stack-overflow trap carries
// thousands of frames. classify has copied what it needs, and no *Error
// keeps a reference to wasmtime's objects.
func releaseWasmtimeError(err error) {
	var trap *wasmtime.Trap
	if errors.As(err, &trap) {
		trap.Close()
		return
	}
	var werr *wasmtime.Error
	if errors.As(err, &werr) {
		werr.Close()
	}
}

func fuelError(l limits.Limits) *Error {
	return &Error{Kind: KindFuelExhausted, Budget: l.Fuel,
		Message: fmt.Sprintf("fuel budget of %d exhausted", l.Fuel)}
}

func timeoutError(l limits.Limits) *Error {
	ms := uint64(l.Timeout / time.Millisecond)
	return &Error{Kind: KindTimeout, TimeoutMs: ms,
		Message: fmt.Sprintf("deadline of %d ms exceeded", ms)}
}

func cancelledError() *Error {
	return &Error{Kind: KindCancelled, Message: "run cancelled by the caller", err: errCancelled}
}

// firstLine is the first line of a wasmtime message, without the "wasm
// backtrace" block (frames are reported separately) or host frames.
func firstLine(msg string) string {
	msg = cleanMessage(msg)
	if i := strings.Index(msg, "\n"); i >= 0 {
		msg = msg[:i]
	}
	return msg
}

// where names the innermost frame of a trap, for the message.
func where(fr []Frame) string {
	if len(fr) == 0 {
		return ""
	}
	name := fr[0].Func
	if name == "" {
		name = fmt.Sprintf("function %d", fr[0].FuncIndex)
	}
	return fmt.Sprintf(" in %s at module offset %#x", name, fr[0].ModuleOffs)
}

// MaxFrames caps the wasm frames reported with a trap: a stack overflow
// has thousands, and the innermost are the informative ones.
const MaxFrames = 32

// frames reports the trap's wasm frames in the caller's terms: frames of
// functions the rewriter injected (a bulk-operation helper that ran the
// original, trapping instruction) are left out, so the innermost frame is
// the caller's function at the instruction the helper stands for, and
// every offset is mapped back to the bytes the caller sent (for WAT, the
// wasm the text became). An offset with no original (or unknown to
// wasmtime) is reported as 0.
func frames(t *wasmtime.Trap, info *wasmbin.Info) []Frame {
	var out []Frame
	for _, f := range t.Frames() {
		if len(out) == MaxFrames {
			break
		}
		if f.FuncIndex() >= info.FirstInjectedFunc {
			continue
		}
		fr := Frame{FuncIndex: f.FuncIndex()}
		if off := f.ModuleOffset(); off != ^uint(0) { // wasmtime's "unknown"
			if orig, ok := info.Offsets.Original(int(off)); ok {
				fr.ModuleOffs = uint(orig)
			}
		}
		if n := f.FuncName(); n != nil {
			fr.Func = *n
		}
		out = append(out, fr)
	}
	return out
}

// checkSignature resolves the export and checks arity and types before
// any store exists.
func checkSignature(m *Module, name string, args []Value) *Error {
	exportErr := func(format string, a ...any) *Error {
		return &Error{Kind: KindExport, Function: name, Message: fmt.Sprintf(format, a...)}
	}
	exp, ok := m.Export(name)
	if !ok {
		return exportErr("export %q not found; the module exports %s", name, funcNames(m))
	}
	if exp.Kind != "func" {
		return exportErr("export %q is a %s, not a function", name, exp.Kind)
	}
	for _, t := range append(append([]string{}, exp.Params...), exp.Results...) {
		if !supported(t) {
			return exportErr("export %q uses unsupported value type %s (supported: i32, i64, f32, f64)", name, t)
		}
	}
	if len(args) != len(exp.Params) {
		return exportErr("export %q takes %d argument(s) %v, got %d", name, len(exp.Params), exp.Params, len(args))
	}
	for i, a := range args {
		if string(a.Type) != exp.Params[i] {
			return exportErr("argument %d of %q must be %s, got %s", i, name, exp.Params[i], a.Type)
		}
	}
	return nil
}

func funcNames(m *Module) string {
	var names []string
	for _, e := range m.Exports {
		if e.Kind == "func" {
			names = append(names, fmt.Sprintf("%q", e.Name))
		}
	}
	if len(names) == 0 {
		return "no functions"
	}
	return strings.Join(names, ", ")
}

func supported(t string) bool {
	for _, v := range ValueTypes {
		if string(v) == t {
			return true
		}
	}
	return false
}

// checkStaticCaps refuses, before instantiation, a module whose declared
// initial memories or tables already exceed the caps: that is a memory
// breach, not a host error from the instantiation.
func checkStaticCaps(info *wasmbin.Info, l limits.Limits) *Error {
	if n := uint64(len(info.Memories)); n > l.Memories {
		return &Error{Kind: KindMemoryLimitExceeded, Resource: ResourceMemories, Limit: l.Memories, Requested: n,
			Message: fmt.Sprintf("module defines %d memories; the limit is %d (raise limits.memories)", n, l.Memories)}
	}
	// Memories and tables share the cap, initial sizes included, so 100
	// tables of 10M funcref elements (8 GB in wasmtime) are refused here.
	// Table minimums are u32 (table64 is off) and there are fewer tables
	// than module bytes, so the sum cannot overflow.
	var memBytes, tableBytes uint64
	for _, mem := range info.Memories {
		memBytes += mem.MinPages * limits.WasmPageSize
	}
	for _, t := range info.Tables {
		tableBytes += t.Min * t.ElemBytes()
	}
	if total := memBytes + tableBytes; total > l.MemoryBytes {
		what := "initial memory"
		if tableBytes > 0 {
			what = fmt.Sprintf("initial memory and tables (%d bytes of table storage)", tableBytes)
		}
		return &Error{Kind: KindMemoryLimitExceeded, Resource: ResourceMemory, Limit: l.MemoryBytes, Requested: total,
			Message: fmt.Sprintf("%s of %d bytes exceeds the cap of %d bytes", what, total, l.MemoryBytes)}
	}
	for i, t := range info.Tables {
		if t.Min > l.TableElements {
			return &Error{Kind: KindMemoryLimitExceeded, Resource: ResourceTable, Limit: l.TableElements, Requested: t.Min,
				Message: fmt.Sprintf("table %d starts with %d elements; the cap is %d", i, t.Min, l.TableElements)}
		}
	}
	return nil
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

// tableElemBytes is the per-element storage of table i (imported tables
// first, as in the index space).
func (m *Module) tableElemBytes(i int) uint64 {
	if i < m.info.ImportedTables {
		return 8 // the larger element size: imports are never granted
	}
	return m.info.Tables[i-m.info.ImportedTables].ElemBytes()
}
