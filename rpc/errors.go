package rpc

import (
	"errors"
	"fmt"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/sandboxd/sandboxd/sandbox"
)

// ParamError is an invalid-params error naming the offending field with
// its path in the params object, e.g. "limits.fuel" or "args[1]".
type ParamError struct {
	Field   string
	Problem string
}

func (e *ParamError) Error() string { return e.Field + ": " + e.Problem }

func paramErr(field, format string, args ...any) *ParamError {
	return &ParamError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// protocolError builds a JSON-RPC error with a standard code.
func protocolError(code int64, format string, args ...any) *jsonrpc2.Error {
	return &jsonrpc2.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorObject turns the error of a run or compile into the JSON-RPC error
// the sidecar sends (and the CLI's --json prints). Run outcomes use the
// kind's code from sandbox.Kinds and carry the details in data; parameter
// errors become -32602.
func ErrorObject(err error) *jsonrpc2.Error {
	var pe *ParamError
	if errors.As(err, &pe) {
		return &jsonrpc2.Error{Code: CodeInvalidParams, Message: pe.Error()}
	}
	var je *jsonrpc2.Error
	if errors.As(err, &je) {
		return je
	}
	var se *sandbox.Error
	if !errors.As(err, &se) {
		se = &sandbox.Error{Kind: sandbox.KindOf(err), Message: err.Error()}
	}
	info := se.Kind.Info()
	out := &jsonrpc2.Error{Code: int64(info.RPCCode), Message: se.Error()}
	data := errorData(se)
	out.SetError(data)
	return out
}

// errorData lists the details of an error kind as the protocol names them.
func errorData(se *sandbox.Error) ErrorData {
	d := ErrorData{Kind: string(se.Kind)}
	u64 := func(v uint64) *uint64 { return &v }
	str := func(s string) *string { return &s }
	switch se.Kind {
	case sandbox.KindFuelExhausted:
		d.Budget = u64(se.Budget)
	case sandbox.KindTimeout:
		d.TimeoutMs = u64(se.TimeoutMs)
	case sandbox.KindMemoryLimitExceeded, sandbox.KindCompileLimitExceeded:
		d.Limit = u64(se.Limit)
		d.Resource = string(se.Resource)
		if se.Requested > 0 {
			d.Requested = u64(se.Requested)
		}
	case sandbox.KindDisallowedImport:
		d.Module, d.Name = str(se.Module), str(se.Name)
	case sandbox.KindExport:
		d.Function = str(se.Function)
	case sandbox.KindTrap:
		d.TrapCode = se.TrapCode
		for _, f := range se.Frames {
			d.Frames = append(d.Frames, FrameInfo{Func: f.Func, FuncIndex: f.FuncIndex, ModuleOffset: f.ModuleOffs})
		}
	}
	if se.Usage != nil {
		d.FuelConsumed = u64(se.Usage.FuelConsumed)
		d.PeakMemoryBytes = u64(se.Usage.PeakMemoryBytes)
	}
	return d
}

// busyError is the response to a run that found the queue full.
func busyError(queued, maxQueue int) *jsonrpc2.Error {
	e := protocolError(CodeBusy, "busy: %d runs are queued (the maximum is %d)", queued, maxQueue)
	e.SetError(struct {
		Queued   int `json:"queued"`
		MaxQueue int `json:"maxQueue"`
	}{queued, maxQueue})
	return e
}
