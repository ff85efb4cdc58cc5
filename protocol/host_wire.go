package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sourcegraph/jsonrpc2"
)

// Host calls on the wire (docs/protocol.md, "Host functions served by the
// parent"): the host/call request the sidecar sends the parent, the
// parent's answer, the values of both, and the refusal of a call that
// would wait for itself.

// CodeHostCallCycle is the answer to a `call` sent from a host call's
// handler to an instance that waits, through the chain of host calls, for
// that very handler: the call would wait for itself.
const CodeHostCallCycle = -32003

// HostCallIDPrefix starts the id of every request the sidecar sends.
const HostCallIDPrefix = "sbx-"

// MaxHostCallIDBytes is the length of the longest id the sidecar sends:
// the prefix and a counter of at most 20 digits. A longer hostCall cannot
// name one.
const MaxHostCallIDBytes = len(HostCallIDPrefix) + 20

// MaxHostCallerIDBytes bounds the id (as JSON) of a request whose run can
// call the parent: a run or instantiate that declares hostFunctions, a
// call on an instance that did. Every host/call request repeats that id
// (HostCallParams.ID), so a longer id would let a guest calling in a loop
// multiply it on the wire; such a request is refused -32602 naming id.
const MaxHostCallerIDBytes = 128

// HostCallField is the member of run, instantiate and call that names the
// host call whose handler sent the request.
const HostCallField = "hostCall"

// HostCallParams are the params of the host/call request.
type HostCallParams struct {
	// ID is the id of the parent's run, instantiate or call whose guest
	// made the call, by value as the parent sent it.
	ID jsonrpc2.ID `json:"id"`
	// Instance is set when an instance's call made it.
	Instance string      `json:"instance,omitempty"`
	Module   string      `json:"module"`
	Name     string      `json:"name"`
	Args     []WireValue `json:"args"`
}

// HostCallResult is the parent's answer to host/call.
type HostCallResult struct {
	Values []WireValue `json:"values"`
}

// HostCancelParams are the params of the $/cancelRequest the sidecar
// sends for a host call it no longer waits for.
type HostCancelParams struct {
	ID string `json:"id"`
}

// HostCallStats are stats' hostCalls: the host calls sent since the
// sidecar started, by how each ended (Sent = Answered + Failed +
// Cancelled + Waiting), and the answers dropped.
type HostCallStats struct {
	Sent uint64 `json:"sent"`
	// Answered: the parent's result was taken.
	Answered uint64 `json:"answered"`
	// Failed: the parent answered an error, or an answer that did not fit
	// (values of the wrong count or types, too large).
	Failed uint64 `json:"failed"`
	// Cancelled: the run stopped waiting first (its deadline, a
	// $/cancelRequest, the parent's input ending).
	Cancelled uint64 `json:"cancelled"`
	// Waiting: sent, not ended yet.
	Waiting uint64 `json:"waiting"`
	// Unexpected: answers to no host call in flight (an id never sent, a
	// second answer, one after the run gave up), dropped.
	Unexpected uint64 `json:"unexpected"`
}

// EncodeHostValue is the wire form of a host call's value: a wasm value
// as EncodeValue writes it, bytes as {"type": "bytes", "value": Bytes}.
func EncodeHostValue(v HostValue) WireValue {
	if v.Type != TypeBytes {
		return EncodeValue(v.Value)
	}
	raw, _ := Bytes(v.Bytes).MarshalJSON() // never fails
	return WireValue{Type: string(TypeBytes), Value: raw}
}

// EncodeHostValues encodes a list of values; never nil, so JSON shows [].
func EncodeHostValues(vs []HostValue) []WireValue {
	out := make([]WireValue, len(vs))
	for i, v := range vs {
		out[i] = EncodeHostValue(v)
	}
	return out
}

// HostValue reads the value as its own type says (a host call's argument,
// as a client reads it): bytes from a string, {"text"} or {"base64"}; a
// wasm value from its bits when it has them, else from its value.
func (w WireValue) HostValue() (HostValue, error) {
	ty := ValType(w.Type)
	switch ty {
	case TypeBytes:
		b, problem := DecodeBytes(w.Value)
		if problem != "" {
			return HostValue{}, errors.New(problem)
		}
		return HostValue{Value: Value{Type: TypeBytes}, Bytes: b}, nil
	case I32, I64, F32, F64:
	default:
		return HostValue{}, fmt.Errorf("unknown type %s", Quote(w.Type))
	}
	if w.Bits != "" {
		v, err := decodeBits(json.RawMessage(strconv.Quote(w.Bits)), ty)
		return HostValue{Value: v}, err
	}
	v, err := DecodeArg(w.Value, ty)
	return HostValue{Value: v}, err
}

// DecodeHostValue reads one value of a host call's answer for a result of
// type ty, as run's args are read (a number, a decimal string,
// {"type", "value"} or {"type", "bits"}); a bytes result as
// {"type": "bytes", "value": bytes} or the bytes alone (a string,
// {"text"} or {"base64"}). A typed value of another type is a
// *HostTypeError.
func DecodeHostValue(raw json.RawMessage, ty ValType) (HostValue, error) {
	raw = bytes.TrimSpace(raw)
	typed, hasType, err := typedHostValue(raw)
	if err != nil {
		return HostValue{}, err
	}
	if hasType && typed.Type != string(ty) {
		return HostValue{}, &HostTypeError{Got: typed.Type}
	}
	if ty != TypeBytes {
		v, err := DecodeArg(raw, ty)
		return HostValue{Value: v}, err
	}
	if hasType {
		for k := range typed.members {
			if k != "type" && k != "value" {
				return HostValue{}, fmt.Errorf("unknown field %s in a typed value", Quote(k))
			}
		}
		v, ok := typed.members["value"]
		if !ok {
			return HostValue{}, errors.New(`a typed bytes value needs "value"`)
		}
		raw = v
	}
	b, problem := DecodeBytes(raw)
	if problem != "" {
		return HostValue{}, errors.New(problem)
	}
	return HostValue{Value: Value{Type: TypeBytes}, Bytes: b}, nil
}

// HostTypeError is a typed value whose type is not the one expected.
type HostTypeError struct{ Got string }

func (e *HostTypeError) Error() string { return "the value is " + DescribeType(e.Got) }

// DescribeType names a value's type as "value 0 is …" does: "an i64",
// "bytes", `of type "u8"`.
func DescribeType(t string) string {
	switch ValType(t) {
	case I32, I64:
		return "an " + t
	case F32, F64:
		return "a " + t
	case TypeBytes:
		return "bytes"
	}
	return "of type " + Quote(t)
}

type typedValue struct {
	Type    string
	members map[string]json.RawMessage
}

// typedHostValue reads the "type" of a JSON object that has one (a typed
// value); hasType is false for anything else ({"text"} and {"base64"}
// are bytes, not typed values).
func typedHostValue(raw json.RawMessage) (typedValue, bool, error) {
	if len(raw) == 0 || raw[0] != '{' {
		return typedValue{}, false, nil
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		return typedValue{}, false, err
	}
	t, ok := members["type"]
	if !ok {
		return typedValue{}, false, nil
	}
	var s string
	if json.Unmarshal(t, &s) != nil || s == "" {
		return typedValue{}, false, errors.New(`"type" must be one of i32, i64, f32, f64, bytes`)
	}
	return typedValue{Type: s, members: members}, true, nil
}

// ResultTypes writes a declaration's result types as messages show them:
// "(i32, bytes)".
func (f HostFunction) ResultTypes() string { return "(" + strings.Join(f.Results, ", ") + ")" }
