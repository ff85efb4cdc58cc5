package sandbox

// Classification: turning what wasmtime and the fences report about a
// failed run into one typed *Error, and a trap's frames into the caller's
// terms.

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox/internal/wasmbin"
)

// classify turns the error of a failed run into an *Error. The order is the
// point: a cancellation is what the caller asked for; a denied growth
// explains whatever the guest did next (unreachable, an out-of-bounds store,
// spinning until fuel or time ran out); only then come the fences' own
// verdicts and the trap codes. A trap with no denial recorded is reported
// as the trap it is, even right at the cap.
func (s *store) classify(err error) *Error {
	if s.fence.reason() == stopCancelled {
		return cancelledError()
	}
	if s.cur.fault != nil {
		return s.cur.fault
	}
	if p := s.plugin; p != nil {
		// What only a plugin's host functions know: the kernel's growth
		// refused, or a host function's own refusal.
		if p.denied > 0 {
			l := s.limits
			return &Error{Kind: KindMemoryLimitExceeded, Resource: ResourceMemory, Limit: l.MemoryBytes, Requested: p.denied,
				Message: fmt.Sprintf("memory growth to %d bytes denied: the cap is %d bytes (the plugin's memories, tables and kernel memory together)", p.denied, l.MemoryBytes)}
		}
		if p.trap != nil {
			return p.trap
		}
	}
	var se *Error
	if errors.As(err, &se) {
		return se
	}
	l := s.cur.limits
	info := s.module.info
	if bytes := s.getGlobalIf(info.GrowsMemory || info.GrowsTable, wasmbin.ExportMemDeniedBytes); bytes > 0 {
		return &Error{Kind: KindMemoryLimitExceeded, Resource: ResourceMemory, Limit: l.MemoryBytes,
			Requested: bytes,
			Message:   fmt.Sprintf("memory growth to %d bytes denied: the cap is %d bytes (linear memory and tables together)", bytes, l.MemoryBytes)}
	}
	if elems := s.getGlobalIf(info.GrowsTable, wasmbin.ExportTableDenied); elems > 0 {
		return &Error{Kind: KindMemoryLimitExceeded, Resource: ResourceTable, Limit: l.TableElements,
			Requested: elems,
			Message:   fmt.Sprintf("table growth to %d elements denied: the cap is %d elements", elems, l.TableElements)}
	}
	if s.fence.reason() == stopTimedOut {
		return timeoutError(l)
	}
	if s.cur.hostTrap != "" {
		return &Error{Kind: KindTrap, TrapCode: "memory_out_of_bounds", Message: s.cur.hostTrap}
	}
	var trap *wasmtime.Trap
	if errors.As(err, &trap) {
		code := trap.Code()
		if code == nil {
			return &Error{Kind: KindTrap, TrapCode: TrapCodeHost, Frames: frames(trap, s.module.info),
				Message: "guest trapped: " + firstLine(trap.Message())}
		}
		switch raw := int(*code); {
		case raw == rawTrapOutOfFuel:
			return fuelError(l)
		case raw == rawTrapInterrupt:
			return timeoutError(l)
		case raw < len(trapCodes):
			fr := frames(trap, s.module.info)
			return &Error{Kind: KindTrap, TrapCode: trapCodes[raw], Frames: fr,
				Message: "guest trapped: " + strings.ReplaceAll(trapCodes[raw], "_", " ") + where(fr)}
		}
	}
	msg := cleanMessage(err.Error())
	if se := wasiFault(msg); se != nil { // wasi_errors.go
		return se
	}
	if strings.HasSuffix(msg, invalidExitStatus) {
		// proc_exit with a status WASI does not allow (126 and up, or
		// negative): the guest's fault, reported like any other trap.
		return &Error{Kind: KindTrap, TrapCode: TrapCodeHost,
			Message: "guest trapped: proc_exit with a status outside 0..125"}
	}
	return &Error{Kind: KindHost, Message: clipQuoted(msg)}
}

// invalidExitStatus ends wasmtime's error for a proc_exit status outside
// what WASI allows.
const invalidExitStatus = "exit with invalid exit status outside of [0..126)"

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
// original, trapping instruction) and of modules sandboxd instantiates
// beside the guest (a plugin's kernel: its function indices and offsets
// are not the guest's) are left out, so the innermost frame is
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
		if f.FuncIndex() >= info.FirstInjectedFunc || !guestFrame(f) {
			continue
		}
		fr := Frame{FuncIndex: f.FuncIndex()}
		if off := f.ModuleOffset(); off != ^uint(0) { // wasmtime's "unknown"
			if orig, ok := info.Offsets.Original(int(off)); ok {
				fr.ModuleOffs = uint(orig)
			}
		}
		if n := f.FuncName(); n != nil {
			fr.Func = boundedName(*n) // the name section's, of any length
		}
		out = append(out, fr)
	}
	return out
}

// guestFrame says whether f is a frame of the caller's module: every
// rewritten module is named wasmbin.GuestModuleName, and nothing else is.
func guestFrame(f *wasmtime.Frame) bool {
	name := f.ModuleName()
	return name != nil && *name == wasmbin.GuestModuleName
}
