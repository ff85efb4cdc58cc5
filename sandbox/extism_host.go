package sandbox

// The host side of a plugin's imports of extism:host/env: the Go
// functions (config_get, var_get, var_set, log_*), defined once per engine
// (extism_link.go) and each finding its plugin through the store that
// calls it; the rest are the kernel's exports. Each copies
// at most what the guest pays for, checks every handle against the
// kernel's live blocks, and stops the guest through stop, which
// classification reads (store.classify).

import (
	"fmt"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/protocol"
)

// stop records why a host function stopped the guest and returns the trap.
func (p *pluginState) stop(e *Error) *wasmtime.Trap {
	p.trap = e
	return wasmtime.NewTrap("sandboxd: " + e.Message)
}

// envFunction is the full name of the kernel's host function name, as
// badHandle's messages name the function.
func envFunction(name string) string { return ExtismEnvModule + "::" + name }

// badHandle stops the guest: handle h, given to fn as what, is no live
// block.
func (p *pluginState) badHandle(fn, what string, h uint64) *wasmtime.Trap {
	return p.stop(&Error{Kind: KindTrap, TrapCode: TrapCodeHost,
		Message: fmt.Sprintf("%s: %s %d is not a live kernel block", fn, what, h)})
}

// kernelCall calls a kernel function from inside a host function. Its
// instructions run under the call's fences, so the nested call can be where
// fuel, the deadline or a cancellation stops the guest: that trap is
// returned as it is (asTrap) and must be the host function's own, or the
// run is classified by whatever the host function says next (a bad handle)
// instead of by the fence. Every nested kernel call goes through here.
//
// The call goes through callNested (one cgo call in the caller's context),
// not wasmtime-go's Func.Call, which fetches the function's type every
// time: those types left native memory behind that no store's end gave
// back (30 one-shot runs of a var_get loop: 20 → 247 MiB).
func (p *pluginState) kernelCall(c *wasmtime.Caller, name string, arg int64, nres int) (int64, *wasmtime.Trap) {
	out, err, ok := callNested(c, p.kernel, name, []Value{ValueI64(arg)}, nres)
	if !ok {
		return 0, wasmtime.NewTrap("sandboxd: the plugin kernel has no function " + name)
	}
	if err != nil {
		return 0, asTrap(err)
	}
	if nres == 0 {
		return 0, nil
	}
	return out[0].I64(), nil
}

// block returns the live block h where it lies in the kernel's memory
// (valid until the next kernel call), or a bad-handle trap naming fn and
// what the handle is.
func (p *pluginState) block(c *wasmtime.Caller, fn, what string, h uint64) ([]byte, *wasmtime.Trap) {
	b, ok := kernelBlock(p.mem.UnsafeData(c), h)
	if !ok {
		return nil, p.badHandle(fn, what, h)
	}
	return b, nil
}

// charge takes the fuel for copying n bytes for the guest, before the copy:
// a plugin without the fuel stops with fuel_exhausted and nothing copied.
func (p *pluginState) charge(c *wasmtime.Caller, n int) *wasmtime.Trap {
	fuel := copyFuel(uint64(n))
	if fuel == 0 || consumeFuel(c, fuel) {
		return nil
	}
	return p.stop(fuelError(p.st.cur.limits))
}

// copyOut charges for b and returns a copy of it.
func (p *pluginState) copyOut(c *wasmtime.Caller, b []byte) ([]byte, *wasmtime.Trap) {
	if trap := p.charge(c, len(b)); trap != nil {
		return nil, trap
	}
	return append([]byte(nil), b...), nil
}

// release frees block h (the ABI gives the host ownership of the handles
// passed to it).
func (p *pluginState) release(c *wasmtime.Caller, h uint64) *wasmtime.Trap {
	_, trap := p.kernelCall(c, "free", int64(h), 0)
	return trap
}

// take copies block h out of the kernel, paying for the copy, and frees it.
func (p *pluginState) take(c *wasmtime.Caller, fn, what string, h uint64) ([]byte, *wasmtime.Trap) {
	b, trap := p.block(c, fn, what, h)
	if trap != nil {
		return nil, trap
	}
	if b, trap = p.copyOut(c, b); trap != nil {
		return nil, trap
	}
	if trap := p.release(c, h); trap != nil {
		return nil, trap
	}
	return b, nil
}

// give allocates a kernel block holding b, paying for the copy, and returns
// its handle. If the kernel cannot hold b within the memory cap the guest
// stops with memory_limit_exceeded: the handle 0 would tell it that the
// var or config key is absent, and a plugin would go on with wrong state
// (a counter restarting from zero).
func (p *pluginState) give(c *wasmtime.Caller, b []byte) (int64, *wasmtime.Trap) {
	if len(b) == 0 {
		return 0, nil
	}
	if trap := p.charge(c, len(b)); trap != nil {
		return 0, trap
	}
	h, trap := p.kernelCall(c, "alloc", int64(len(b)), 1)
	if trap != nil {
		return 0, trap
	}
	if h == 0 {
		l := p.st.limits.MemoryBytes
		return 0, p.stop(&Error{Kind: KindMemoryLimitExceeded, Resource: ResourceMemory, Limit: l, Requested: max(p.denied, p.kernelBytes+uint64(len(b))),
			Message: fmt.Sprintf("the plugin kernel cannot hold a value of %d bytes within the memory cap of %d bytes", len(b), l)})
	}
	copy(p.mem.UnsafeData(c)[h:], b)
	return h, nil
}

// asTrap passes on the trap of a nested call (fuel or the deadline ran out
// inside the kernel).
func asTrap(err error) *wasmtime.Trap {
	if t, ok := err.(*wasmtime.Trap); ok {
		return t
	}
	return wasmtime.NewTrap(cleanMessage(err.Error()))
}

func (p *pluginState) configGet(c *wasmtime.Caller, args []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	h := uint64(args[0].I64())
	key, trap := p.take(c, envFunction("config_get"), "key", h)
	if trap != nil {
		return nil, trap
	}
	v, found := p.config[string(key)]
	if !found {
		return []wasmtime.Val{wasmtime.ValI64(0)}, nil
	}
	out, trap := p.give(c, []byte(v))
	return []wasmtime.Val{wasmtime.ValI64(out)}, trap
}

func (p *pluginState) varGet(c *wasmtime.Caller, args []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	h := uint64(args[0].I64())
	key, trap := p.take(c, envFunction("var_get"), "key", h)
	if trap != nil {
		return nil, trap
	}
	v, found := p.vars[string(key)]
	if !found {
		return []wasmtime.Val{wasmtime.ValI64(0)}, nil
	}
	out, trap := p.give(c, v)
	return []wasmtime.Val{wasmtime.ValI64(out)}, trap
}

// varEntryBytes is what each var costs against VarBytes besides its key
// and value: what the host's map spends on an entry (its slot, the key's
// and value's allocations; measured at about 90 bytes). Without it 1 MiB
// of 9-byte vars held 100 MiB of the sidecar's heap.
const varEntryBytes = 128

// varCost is what a var of key k and value v counts against VarBytes.
func varCost(k, v int) uint64 { return uint64(k) + uint64(v) + varEntryBytes }

// varSet sets (or, for a value handle of 0, removes) a var. The vars of
// an instance are bounded by VarBytes, keys and values together plus
// varEntryBytes each; a set past it stops the call with
// memory_limit_exceeded (resource vars).
func (p *pluginState) varSet(c *wasmtime.Caller, args []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	kh, vh := uint64(args[0].I64()), uint64(args[1].I64())
	key, trap := p.take(c, envFunction("var_set"), "key", kh)
	if trap != nil {
		return nil, trap
	}
	k := string(key)
	old, had := p.vars[k]
	if vh == 0 {
		if had {
			p.varUsed -= varCost(len(k), len(old))
			delete(p.vars, k)
		}
		return nil, nil
	}
	vb, trap := p.block(c, envFunction("var_set"), "value", vh)
	if trap != nil {
		return nil, trap
	}
	used := p.varUsed + varCost(len(k), len(vb))
	if had {
		used -= varCost(len(k), len(old))
	}
	if used > p.varBytes { // refused before copying the value
		return nil, p.stop(&Error{Kind: KindMemoryLimitExceeded, Resource: ResourceVars, Limit: p.varBytes, Requested: used,
			Message: fmt.Sprintf("var_set of %s would hold %d bytes of vars; the limit is %d (limits.varBytes)", protocol.Quote(string(key)), used, p.varBytes)})
	}
	val, trap := p.copyOut(c, vb)
	if trap != nil {
		return nil, trap
	}
	if trap := p.release(c, vh); trap != nil {
		return nil, trap
	}
	p.vars[k] = val
	p.varUsed = used
	return nil, nil
}

// logLevelOverhead is what a level costs on the wire: `,"level":""` and
// the level's name, on top of LogLineCost.
const logLevelOverhead = len(`,"level":""`)

// logLine forwards a plugin's log line with its level, against the same
// logBytes budget as host::log and at its wire cost.
func (p *pluginState) logLine(c *wasmtime.Caller, level LogLevel, args []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	h := uint64(args[0].I64())
	s := &p.st.cur.log
	if !p.logGranted { // Extism links the log functions for every plugin; without a logger, lines go nowhere
		s.dropped++
		if _, ok := kernelBlock(p.mem.UnsafeData(c), h); ok {
			return nil, p.release(c, h)
		}
		return nil, nil
	}
	if s.full { // dropped without copying, as host::log does
		if _, ok := kernelBlock(p.mem.UnsafeData(c), h); ok {
			return nil, p.release(c, h)
		}
		return nil, nil
	}
	whole, trap := p.block(c, envFunction("log_"+string(level)), "message", h)
	if trap != nil {
		return nil, trap
	}
	// Only what can be forwarded is copied: at most MaxLogLineBytes, and
	// nothing if even those bytes exceed what is left of the budget (a
	// line costs at least its length).
	n := min(len(whole), MaxLogLineBytes)
	if uint64(n) > s.budget-s.used {
		s.truncated, s.full = true, true
		return nil, p.release(c, h)
	}
	if trap := p.charge(c, n); trap != nil {
		return nil, trap
	}
	line := validUTF8(whole[:n]) // a copy, made before the block is freed
	if n < len(whole) {
		s.truncated = true
	}
	if trap := p.release(c, h); trap != nil {
		return nil, trap
	}
	if len(line) > MaxLogLineBytes {
		line = protocol.CutUTF8(line, MaxLogLineBytes)
	}
	cost := LogLineCost(line) + uint64(logLevelOverhead+len(level))
	if cost > s.budget-s.used {
		s.truncated, s.full = true, true
		return nil, nil
	}
	s.used += cost
	s.lines++
	if p.log != nil {
		p.log(level, line)
	}
	return nil, nil
}
