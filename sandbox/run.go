package sandbox

import (
	"context"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
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
	// HostFunctions are imports the caller serves: a guest's call of one
	// is Host's to answer (host_parent.go), while the guest waits within
	// its fences. Host is called on the guest's thread and must return
	// when its context is done.
	HostFunctions []HostFunction
	Host          HostCaller
}

// Result is what a successful run returns.
type Result struct {
	Values []Value
	Usage
	Elapsed      time.Duration // instantiation + start + call
	LogLines     int           // lines delivered to Request.Log
	LogTruncated bool          // some lines were cut or dropped by the log caps
	LogDropped   int           // a plugin's log lines dropped for want of the log capability
	// ExitCode is a WASI guest's proc_exit status (0 when it returned).
	ExitCode int
	Output   *Output // a WASI run's stdout and stderr; nil otherwise
}

// Run executes req. It returns a *Result, or an *Error whose Kind says why
// the run stopped. Cancelling ctx stops the guest within a few ticks with
// kind cancelled. Run is safe for concurrent use; runs share nothing.
//
// A run is a store of its own (store.go): checks (imports, signature,
// static caps; no store yet) → open (store, limiter, fence, WASI) → one
// call that instantiates (the start section was removed by the
// instrumentation, so no guest code runs there), sets the in-module caps,
// runs the original start function and calls the export → close.
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
	if err := protocol.CheckHostFunctions(req.HostFunctions); err != nil {
		return nil, err
	}
	spec := storeSpec{module: m, caps: req.Capabilities, limits: req.Limits, hostFunctions: req.HostFunctions}
	fn := entryPoint(m, req.Function)
	if err := spec.checkImports(); err != nil {
		return nil, err
	}
	if err := checkSignature(m, fn, req.Args); err != nil {
		return nil, err
	}
	if err := spec.checkCaps(); err != nil {
		return nil, err
	}
	s, err := e.openStore(ctx, spec)
	if err != nil {
		return nil, err
	}
	defer s.freeAfterAnswer(ctx, s.close)
	call := callSpec{limits: req.Limits, output: req.Output, host: req.Host}
	if req.Log != nil {
		call.log = func(_ LogLevel, line string) { req.Log(line) }
	}
	o := s.call(ctx, call, func() ([]Value, error) {
		if err := s.instantiate(false); err != nil {
			return nil, err
		}
		exp, _ := m.Export(fn)
		return callFunction(s.wt, s.instance, fn, req.Args, exp.Results)
	})
	if o.err != nil {
		return nil, o.err
	}
	return o.res, nil
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
