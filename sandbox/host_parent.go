package sandbox

// Host functions the caller serves (protocol.HostFunction): the sidecar's
// parent, through the protocol's host/call request, or any Go caller of
// the engine. A guest's call of one is a host function of ours that asks
// the caller (the call's HostCaller) and waits for the answer, within the
// call's fences: the wait meets the deadline and a cancellation at once
// (its context is done then), and the guest pays fuel for the round trip
// and for every byte that crosses it. A bytes value is an Extism memory
// handle: an argument is the live kernel block it names, copied out; a
// result becomes a new block the guest owns.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/protocol"
)

// The shapes of a host call (protocol/host.go).
type (
	HostValue     = protocol.HostValue
	HostCall      = protocol.HostCall
	HostCaller    = protocol.HostCaller
	HostCallError = protocol.HostCallError
)

// TypeBytes is the type of an Extism memory handle in a declaration.
const TypeBytes = protocol.TypeBytes

const (
	// hostCallFuel is what each host call costs besides its bytes: about
	// what a round trip to the parent costs the host, so a guest calling
	// in a tight loop pays for the work it makes (30 per KiB of bytes
	// either way, as every host copy).
	hostCallFuel = 10_000
	// MaxHostCallArgBytes bounds the bytes one call's arguments carry.
	MaxHostCallArgBytes = 64 << 20
	// maxHostMessageBytes bounds the parent's message a host_function_error
	// repeats (cut on a rune boundary).
	maxHostMessageBytes = 16 << 10
)

// parentFunction is the host function that serves import f.
func (s *store) parentFunction(f HostFunction) wasmFunc {
	return func(c *wasmtime.Caller, args []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
		return s.callParent(c, f, args)
	}
}

// callParent asks the caller to run f with args and gives the guest its
// answer.
func (s *store) callParent(c *wasmtime.Caller, f HostFunction, args []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	name := f.String()
	if s.cur.host == nil {
		return nil, s.hostFunctionError(f, "no one serves it for this call", "")
	}
	vals := make([]HostValue, len(args))
	var moved uint64
	for i, t := range f.Params {
		if protocol.ValType(t) != TypeBytes {
			vals[i] = HostValue{Value: Value{Type: protocol.ValType(t), Bits: valBits(args[i])}}
			continue
		}
		b, trap := s.plugin.block(c, name, fmt.Sprintf("argument %d's handle", i), uint64(args[i].I64()))
		if trap != nil {
			return nil, trap
		}
		if moved += uint64(len(b)); moved > MaxHostCallArgBytes {
			return nil, s.plugin.stop(&Error{Kind: KindTrap, TrapCode: TrapCodeHost,
				Message: fmt.Sprintf("%s: its arguments carry more than %d bytes", name, MaxHostCallArgBytes)})
		}
		vals[i] = HostValue{Value: Value{Type: TypeBytes}, Bytes: append([]byte(nil), b...)}
	}
	if !consumeFuel(c, hostCallFuel+copyFuel(moved)) {
		return nil, fuelTrap()
	}
	// The wait meets the fences: the call's context is done at a cancel
	// (or a Release), and the deadline is the fence's.
	ctx, cancel := context.WithTimeout(s.cur.ctx, max(s.fence.remaining(), 0))
	defer cancel()
	results, err := s.cur.host(ctx, HostCall{Module: f.Module, Name: f.Name, Args: vals})
	if ctx.Err() != nil {
		if s.cur.ctx.Err() != nil {
			return nil, s.stopGuest(stopCancelled)
		}
		return nil, s.stopGuest(stopTimedOut)
	}
	var hce *HostCallError
	switch {
	case errors.As(err, &hce):
		return nil, s.hostFunctionError(f, "the parent answered with an error", hce.Message)
	case err != nil:
		return nil, s.hostFunctionError(f, engineMessage(err.Error()), "")
	}
	if problem := answerProblem(f, results); problem != "" {
		return nil, s.hostFunctionError(f, problem, "")
	}
	out := make([]wasmtime.Val, len(results))
	for i, r := range results {
		if r.Type != TypeBytes {
			out[i] = toWasmtime(r.Value)
			continue
		}
		h, trap := s.plugin.give(c, r.Bytes) // charged, within the memory cap
		if trap != nil {
			return nil, trap
		}
		out[i] = wasmtime.ValI64(h)
	}
	return out, nil
}

// answerProblem says what is wrong with results as the answer of f, or "".
func answerProblem(f HostFunction, results []HostValue) string {
	want := f.Signature()
	if len(results) != len(f.Results) {
		return fmt.Sprintf("the parent answered with %d values; it returns %s", len(results), want[strings.Index(want, "-> ")+3:])
	}
	for i, r := range results {
		if string(r.Type) != f.Results[i] {
			return fmt.Sprintf("the parent's value %d is %s; it returns %s there", i, protocol.Quote(string(r.Type)), f.Results[i])
		}
	}
	return ""
}

// hostFunctionError stops the guest: f failed with problem, and the
// parent's own message, if it gave one (cut and escaped).
func (s *store) hostFunctionError(f HostFunction, problem, parent string) *wasmtime.Trap {
	msg := fmt.Sprintf("host function %s: %s", protocol.Quote(f.String()), problem)
	e := &Error{Kind: KindHostFunctionError, Function: f.String(), Message: msg}
	if parent != "" {
		e.HostMessage = protocol.CutUTF8(parent, maxHostMessageBytes)
		e.Message += ": " + protocol.Quote(e.HostMessage)
	}
	s.cur.fault = e
	return wasmtime.NewTrap("sandboxd: " + msg)
}

// valBits is the raw bits of a wasm value, as Value keeps them.
func valBits(v wasmtime.Val) uint64 {
	switch v.Kind() {
	case wasmtime.KindI32:
		return uint64(uint32(v.I32()))
	case wasmtime.KindI64:
		return uint64(v.I64())
	case wasmtime.KindF32:
		return uint64(math.Float32bits(v.F32()))
	default:
		return math.Float64bits(v.F64())
	}
}

// declaredTypes are the engine's function types of declarations, by
// signature: shared among runs (sharedFuncType), made once each. The
// parent chooses the signatures, so the cache is bounded: past
// maxDeclaredTypes a type is made for its run alone.
type declaredTypes struct {
	m sync.Map
	n atomic.Int64
}

const maxDeclaredTypes = 4096

func (t *declaredTypes) of(f HostFunction) *wasmtime.FuncType {
	sig := f.Signature()
	if ty, ok := t.m.Load(sig); ok {
		return ty.(*wasmtime.FuncType)
	}
	ty := sharedFuncType(valTypes(valKinds(f.Params)), valTypes(valKinds(f.Results)))
	if t.n.Add(1) > maxDeclaredTypes {
		return ty
	}
	cached, _ := t.m.LoadOrStore(sig, ty)
	return cached.(*wasmtime.FuncType)
}
