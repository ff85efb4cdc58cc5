package rpctest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
)

// Host calls (docs/protocol.md, "Host functions served by the parent"):
// a run, an instantiation or a call whose function is "host:N" calls the
// first function it declares N times through its HostCaller, as a guest
// calling an import would, within the run's deadline (limits.timeoutMs).
// Before each call it logs "host i" (so that a test sees the log go out
// before the request). Call i passes, for each param, i as the type
// (bytes: "arg i"); the run returns the last call's results, a bytes
// result as its length (an i64). An instantiation calls them when the
// instance's config has "start" set to "host:N". The outcome of a
// failed host call is the engine's: the parent's error answer is
// host_function_error naming the function, the HostCaller returning
// because the deadline passed is timeout, because the run was cancelled
// cancelled, anything else host.

// hostCalls parses "host:N"; ok false for any other function.
func hostCalls(fn string) (n int, ok bool) {
	s, ok := strings.CutPrefix(fn, "host:")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// callHost is what a "host:N" guest does.
func callHost(ctx context.Context, n int, fns []protocol.HostFunction, host protocol.HostCaller, timeout time.Duration, log func(string)) ([]protocol.Value, error) {
	if len(fns) == 0 || host == nil {
		return nil, &protocol.Error{Kind: protocol.KindDisallowedImport, Message: "host:N declares no host function"}
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	fn := fns[0]
	var results []protocol.HostValue
	for i := range n {
		if log != nil {
			log("host " + strconv.Itoa(i))
		}
		args := make([]protocol.HostValue, len(fn.Params))
		for k, t := range fn.Params {
			args[k] = hostArg(protocol.ValType(t), i)
		}
		var err error
		results, err = host(ctx, protocol.HostCall{Module: fn.Module, Name: fn.Name, Args: args})
		if err != nil {
			return nil, hostOutcome(ctx, fn, timeout, err)
		}
		if len(results) != len(fn.Results) {
			return nil, fmt.Errorf("fake: the HostCaller gave %d results for %s", len(results), fn.Results)
		}
	}
	out := make([]protocol.Value, len(results))
	for k, r := range results {
		if r.Type == protocol.TypeBytes {
			out[k] = protocol.ValueI64(int64(len(r.Bytes)))
			continue
		}
		out[k] = r.Value
	}
	return out, nil
}

func hostArg(t protocol.ValType, i int) protocol.HostValue {
	switch t {
	case protocol.I32:
		return protocol.HostValue{Value: protocol.ValueI32(int32(i))}
	case protocol.I64:
		return protocol.HostValue{Value: protocol.ValueI64(int64(i))}
	case protocol.F32:
		return protocol.HostValue{Value: protocol.ValueF32(float32(i))}
	case protocol.F64:
		return protocol.HostValue{Value: protocol.ValueF64(float64(i))}
	}
	return protocol.HostValue{Value: protocol.Value{Type: protocol.TypeBytes}, Bytes: []byte("arg " + strconv.Itoa(i))}
}

// hostOutcome classifies a failed host call as the engine does
// (sandbox/host_parent.go): the context done first is the deadline or the
// cancel; the parent's error answer and any other error of the HostCaller
// are host_function_error, data.message the parent's own message.
func hostOutcome(ctx context.Context, fn protocol.HostFunction, timeout time.Duration, err error) error {
	var he *protocol.HostCallError
	name := fn.String()
	e := &protocol.Error{Kind: protocol.KindHostFunctionError, Data: protocol.ErrorData{Function: &name}}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		ms := uint64(timeout.Milliseconds())
		return &protocol.Error{Kind: protocol.KindTimeout, Message: "fake timeout", Data: protocol.ErrorData{TimeoutMs: &ms}}
	case ctx.Err() != nil:
		return cancelled(protocol.ErrorData{})
	case errors.As(err, &he):
		msg := he.Message
		e.Data.Message = &msg
		e.Message = "host function " + protocol.Quote(name) + ": the parent answered with an error: " + protocol.Quote(msg)
	default:
		e.Message = "host function " + protocol.Quote(name) + ": " + err.Error()
	}
	return e
}
