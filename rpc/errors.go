package rpc

import (
	"errors"
	"fmt"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/sandboxd/sandboxd/protocol"
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
// the sidecar sends (and the CLI's --json prints). Run outcomes
// (*protocol.Error, or any protocol.Outcome such as *sandbox.Error) use
// the kind's code from the table of kinds and carry the details in data;
// parameter errors become -32602; anything else is kind host.
func ErrorObject(err error) *jsonrpc2.Error {
	var pe *ParamError
	if errors.As(err, &pe) {
		return &jsonrpc2.Error{Code: CodeInvalidParams, Message: protocol.BoundMessage(pe.Error())}
	}
	var je *jsonrpc2.Error
	if errors.As(err, &je) {
		return boundedObject(je)
	}
	var re rpcErrorer
	if errors.As(err, &re) {
		return boundedObject(re.RPCError()) // -32001, -32002
	}
	oe, ok := protocol.AsError(err)
	if !ok {
		oe = &protocol.Error{Kind: protocol.KindHost, Message: err.Error()}
	}
	out := &jsonrpc2.Error{Code: int64(oe.Kind.Info().RPCCode), Message: protocol.BoundMessage(oe.Error())}
	data := oe.Data
	data.Kind = string(oe.Kind)
	out.SetError(data)
	return out
}

// boundedObject is e with its message at most protocol.MaxMessageBytes: the
// one place every error answer's message passes, so that a message that
// repeats a value no check cut stays bounded all the same.
func boundedObject(e *jsonrpc2.Error) *jsonrpc2.Error {
	if len(e.Message) <= protocol.MaxMessageBytes {
		return e
	}
	c := *e
	c.Message = protocol.BoundMessage(e.Message)
	return &c
}

// busyError is the response to a request that found the queue full, by
// entries or by bytes.
// size is the refused message's size when the bytes were the limit, or 0.
func busyError(queued, maxQueue int, queuedBytes, maxQueueBytes, size int64) *jsonrpc2.Error {
	e := protocolError(CodeBusy, "busy: %d runs are queued (the maximum is %d)", queued, maxQueue)
	if size > 0 {
		e = protocolError(CodeBusy, "busy: the queued requests hold %d bytes, and this message of %d bytes would pass the maximum of %d (--max-queue-bytes)", queuedBytes, size, maxQueueBytes)
	}
	e.SetError(struct {
		Queued        int   `json:"queued"`
		MaxQueue      int   `json:"maxQueue"`
		QueuedBytes   int64 `json:"queuedBytes"`
		MaxQueueBytes int64 `json:"maxQueueBytes"`
	}{queued, maxQueue, queuedBytes, maxQueueBytes})
	return e
}
