package sandbox

// The Extism plugin ABI, host side. A module that imports from
// extism:host/env is a plugin: it reads its input, sets its output and
// reports errors through a kernel (extism_kernel.wat, ours) that owns a
// memory of its own, and calls the host for config, vars and logging.
//
// The kernel is a wasm module instantiated in the plugin's store, so every
// kernel instruction is fenced like the plugin's own (fuel, deadline,
// cancellation), and its memory grows only through the host's grow
// function, which counts the kernel's bytes and the plugin's memories and
// tables together against the instance's memory cap. The plugin's own
// memory.grow helper (wasmbin) is given the cap less the kernel's bytes, so
// the sum holds from either side.

import (
	_ "embed"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox/internal/wasmbin"
)

// The import modules of the Extism ABI.
const (
	ExtismEnvModule  = "extism:host/env"
	ExtismUserModule = "extism:host/user"
)

//go:embed extism_kernel.wat
var kernelWAT string

// kernelInitialBytes is the kernel's memory before any call: one page.
const kernelInitialBytes = 64 << 10

// Kernel layout (see extism_kernel.wat).
const (
	kernelInputOffset  = 16
	kernelOutputOffset = 32
	kernelOutputLength = 40
	kernelError        = 48
	kernelFirstBlock   = 64
	kernelBlockHeader  = 16
	kernelBlockActive  = 1
)

// MaxPluginErrorBytes caps the message of a plugin_error; longer messages
// are cut on a UTF-8 boundary.
const MaxPluginErrorBytes = 16 << 10

// extismFunc is one function of extism:host/env.
type extismFunc struct {
	signature string
	kernel    bool   // provided by the kernel module, not by Go
	need      string // the capability it needs ("" for none)
	refused   string // why it is never granted ("" if it can be)
}

var extismABI = map[string]extismFunc{
	// kernel
	"alloc":          {"(i64) -> (i64)", true, "", ""},
	"free":           {"(i64) -> ()", true, "", ""},
	"length":         {"(i64) -> (i64)", true, "", ""},
	"length_unsafe":  {"(i64) -> (i64)", true, "", ""},
	"load_u8":        {"(i64) -> (i32)", true, "", ""},
	"load_u64":       {"(i64) -> (i64)", true, "", ""},
	"store_u8":       {"(i64, i32) -> ()", true, "", ""},
	"store_u64":      {"(i64, i64) -> ()", true, "", ""},
	"input_set":      {"(i64, i64) -> ()", true, "", ""},
	"input_length":   {"() -> (i64)", true, "", ""},
	"input_offset":   {"() -> (i64)", true, "", ""},
	"input_load_u8":  {"(i64) -> (i32)", true, "", ""},
	"input_load_u64": {"(i64) -> (i64)", true, "", ""},
	"output_set":     {"(i64, i64) -> ()", true, "", ""},
	"output_length":  {"() -> (i64)", true, "", ""},
	"output_offset":  {"() -> (i64)", true, "", ""},
	"error_set":      {"(i64) -> ()", true, "", ""},
	"error_get":      {"() -> (i64)", true, "", ""},
	"reset":          {"() -> ()", true, "", ""},
	"memory_bytes":   {"() -> (i64)", true, "", ""},
	// host
	"config_get":       {"(i64) -> (i64)", false, "", ""},
	"var_get":          {"(i64) -> (i64)", false, "", ""},
	"var_set":          {"(i64, i64) -> ()", false, "", ""},
	"log_trace":        {"(i64) -> ()", false, "log", ""},
	"log_debug":        {"(i64) -> ()", false, "log", ""},
	"log_info":         {"(i64) -> ()", false, "log", ""},
	"log_warn":         {"(i64) -> ()", false, "log", ""},
	"log_error":        {"(i64) -> ()", false, "log", ""},
	"get_log_level":    {"() -> (i32)", false, "log", ""},
	"http_request":     {"(i64, i64) -> (i64)", false, "", "sandboxd gives plugins no network"},
	"http_status_code": {"() -> (i32)", false, "", "sandboxd gives plugins no network"},
	"http_headers":     {"() -> (i64)", false, "", "sandboxd gives plugins no network"},
}

// ExtismFunctions lists the extism:host/env functions a plugin may import
// (those sandboxd refuses are not listed).
func ExtismFunctions() []string {
	var names []string
	for n, f := range extismABI {
		if f.refused == "" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// isPlugin says whether m imports the Extism ABI.
func isPlugin(m *Module) bool {
	for _, imp := range m.Imports {
		if imp.Module == ExtismEnvModule || imp.Module == ExtismUserModule {
			return true
		}
	}
	return false
}

// isPluginFunction says whether the export name of a plugin is a plugin
// function: no parameters, one i32 result (the return code) or none
// (protocol.Export.PluginFunction).
func isPluginFunction(m *Module, name string) bool {
	exp, ok := m.Export(name)
	return ok && exp.PluginFunction()
}

// checkPluginImports checks the Extism imports of m against caps, before
// any store exists: known functions with their exact signatures, the log
// functions only with the log capability, never the network or user
// host functions.
func checkPluginImports(m *Module, caps Capabilities) *Error {
	for _, imp := range m.Imports {
		if imp.Module != ExtismEnvModule && imp.Module != ExtismUserModule {
			continue
		}
		deny := func(why string) *Error {
			return &Error{Kind: KindDisallowedImport, Module: imp.Module, Name: imp.Name,
				Message: fmt.Sprintf("import %s::%s is not allowed: %s", imp.Module, imp.Name, why)}
		}
		if imp.Module == ExtismUserModule {
			return deny("sandboxd provides no user host functions (extism:host/user)")
		}
		f, known := extismABI[imp.Name]
		switch {
		case imp.Kind != "func":
			return deny("it is a " + imp.Kind + "; the Extism ABI has only functions")
		case !known:
			return deny("the Extism ABI as sandboxd implements it has no such function (see docs/protocol.md)")
		case f.refused != "":
			return deny(f.refused)
		case imp.Type != f.signature:
			return deny(fmt.Sprintf("wrong signature %s, expected %s", imp.Type, f.signature))
		case f.need == "log" && !caps.Log:
			return deny("the log capability was not granted for this instance")
		}
	}
	return nil
}

// withoutPluginImports is a view of m without its Extism imports, for the
// checks of the other imports.
func withoutPluginImports(m *Module) *Module {
	view := *m
	view.Imports = nil
	for _, imp := range m.Imports {
		if imp.Module != ExtismEnvModule && imp.Module != ExtismUserModule {
			view.Imports = append(view.Imports, imp)
		}
	}
	return &view
}

// kernelModule compiles the kernel once per engine, and builds the types
// of the Extism host functions by signature, shared by every plugin (see
// hostFuncTypes).
type kernelModule struct {
	once  sync.Once
	mod   *wasmtime.Module
	err   error
	types map[string]*wasmtime.FuncType
}

func (e *Engine) kernel() (*wasmtime.Module, error) {
	k := &e.kernelMod
	k.once.Do(func() {
		k.types = map[string]*wasmtime.FuncType{}
		for _, f := range extismABI {
			if !f.kernel && k.types[f.signature] == nil {
				k.types[f.signature] = signatureType(f.signature)
			}
		}
		wasm, err := wasmtime.Wat2Wasm(kernelWAT)
		if err != nil {
			k.err = fmt.Errorf("plugin kernel: %s", cleanMessage(err.Error()))
			return
		}
		k.mod, err = wasmtime.NewModule(e.wt, wasm)
		if err != nil {
			k.err = fmt.Errorf("plugin kernel: %s", cleanMessage(err.Error()))
		}
	})
	return k.mod, k.err
}

// pluginState is the Extism side of one plugin instance.
type pluginState struct {
	in       *Instance
	config   map[string]string
	vars     map[string][]byte
	varBytes uint64 // the budget
	varUsed  uint64 // sum of len(key)+len(value)

	kernel      *wasmtime.Instance
	mem         *wasmtime.Memory
	kernelBytes uint64 // the kernel memory's size

	// per call
	log    func(level LogLevel, line string)
	denied uint64 // a kernel growth to this many bytes (all memories) was refused
	trap   *Error // why a host function stopped the guest
}

func newPluginState(in *Instance, config map[string]string, varBytes uint64) *pluginState {
	if config == nil {
		config = map[string]string{}
	}
	return &pluginState{in: in, config: config, vars: map[string][]byte{}, varBytes: varBytes}
}

func (p *pluginState) beginCall(log func(LogLevel, string)) {
	p.log, p.denied, p.trap = log, 0, nil
}

// instantiateKernel instantiates the kernel in store.
func (p *pluginState) instantiateKernel(store *wasmtime.Store) error {
	mod, err := p.in.e.kernel()
	if err != nil {
		return &Error{Kind: KindHost, Message: err.Error(), err: err}
	}
	i32 := wasmtime.NewValType(wasmtime.KindI32)
	grow := wasmtime.NewFunc(store, wasmtime.NewFuncType([]*wasmtime.ValType{i32}, []*wasmtime.ValType{i32}), p.grow)
	k, err := wasmtime.NewInstance(store, mod, []wasmtime.AsExtern{grow})
	if err != nil {
		return err
	}
	p.kernel = k
	p.mem = k.GetExport(store, "memory").Memory()
	p.kernelBytes = uint64(p.mem.DataSize(store))
	return nil
}

// grow is the kernel's only way to grow its memory: delta pages, if the
// kernel and the plugin together stay within the cap. It returns the old
// size in pages, or -1.
func (p *pluginState) grow(c *wasmtime.Caller, args []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	delta := uint64(uint32(args[0].I32()))
	guest := p.in.guestBytes(c)
	want := p.kernelBytes + delta*65536
	capBytes := p.in.limits.MemoryBytes
	if guest+want > capBytes {
		p.denied = max(p.denied, guest+want)
		return []wasmtime.Val{wasmtime.ValI32(-1)}, nil
	}
	old, err := p.mem.Grow(c, delta)
	if err != nil {
		return []wasmtime.Val{wasmtime.ValI32(-1)}, nil
	}
	p.kernelBytes = uint64(p.mem.DataSize(c))
	info := p.in.module.info
	if info.GrowsMemory || info.GrowsTable {
		if ext := p.in.r.instance.GetExport(c, wasmbin.ExportMemCapBytes); ext != nil && ext.Global() != nil {
			ext.Global().Set(c, wasmtime.ValI64(int64(capBytes-p.kernelBytes)))
		}
	}
	return []wasmtime.Val{wasmtime.ValI32(int32(old))}, nil
}

// setInput empties the kernel and puts input in it, before a plugin call.
// The kernel is called through callExport (one cgo call each), not
// wasmtime-go's Func.Call, whose per-call type fetch left native memory
// behind with every call of a long-lived instance.
func (p *pluginState) setInput(store *wasmtime.Store, input []byte) error {
	kernel := func(name string, nres int, args ...Value) (int64, error) {
		out, err, ok := callExport(store, p.kernel, name, args, nres)
		if !ok {
			return 0, newError(KindHost, "the plugin kernel has no function %s", name)
		}
		if err != nil || len(out) == 0 {
			return 0, err
		}
		return out[0].I64(), nil
	}
	if _, err := kernel("reset", 0); err != nil {
		return err
	}
	var h int64
	if len(input) > 0 {
		var err error
		if h, err = kernel("alloc", 1, ValueI64(int64(len(input)))); err != nil {
			return err
		}
		if h == 0 {
			if p.denied > 0 {
				return &Error{Kind: KindMemoryLimitExceeded, Resource: ResourceMemory, Limit: p.in.limits.MemoryBytes, Requested: p.denied,
					Message: fmt.Sprintf("the input of %d bytes does not fit in the plugin's memory cap of %d bytes", len(input), p.in.limits.MemoryBytes)}
			}
			return newError(KindHost, "the plugin kernel could not hold an input of %d bytes", len(input))
		}
		copy(p.mem.UnsafeData(store)[h:], input)
	}
	_, err := kernel("input_set", 0, ValueI64(h), ValueI64(int64(len(input))))
	return err
}

// result reads what a plugin function left in the kernel: its output (at
// most limit+1 bytes copied, so the caller can tell it was cut), or the
// plugin_error it reported (an error message set, or a non-zero return
// code).
func (p *pluginState) result(store wasmtime.Storelike, fn string, rc int32, limit uint64) ([]byte, *Error) {
	data := p.mem.UnsafeData(store)
	if h := binary.LittleEndian.Uint64(data[kernelError:]); h != 0 || rc != 0 {
		msg := ""
		if b, ok := kernelBlock(data, h); ok {
			msg = validUTF8(b[:min(len(b), MaxPluginErrorBytes)])
			if len(msg) > MaxPluginErrorBytes {
				msg = protocol.CutUTF8(msg, MaxPluginErrorBytes)
			}
		}
		if msg == "" {
			msg = fmt.Sprintf("plugin function %s returned %d", protocol.Quote(fn), rc)
		}
		return nil, &Error{Kind: KindPluginError, Message: msg, Function: fn, ReturnCode: rc}
	}
	off := binary.LittleEndian.Uint64(data[kernelOutputOffset:])
	n := binary.LittleEndian.Uint64(data[kernelOutputLength:])
	if n == 0 {
		return []byte{}, nil
	}
	// The output must be (a prefix of) a live block, as PDKs set it: a
	// range anywhere else is the plugin's bad handle, a trap naming the
	// function as a host function's refusal is (it read zeros, or the
	// kernel's bookkeeping, or was dropped, before).
	b, ok := kernelBlock(data, off)
	if !ok {
		return nil, p.refuse(&Error{Kind: KindTrap, TrapCode: TrapCodeHost,
			Message: fmt.Sprintf("%s::output_set: offset %d is not a live kernel block", ExtismEnvModule, off)})
	}
	if n > uint64(len(b)) {
		return nil, p.refuse(&Error{Kind: KindTrap, TrapCode: TrapCodeHost,
			Message: fmt.Sprintf("%s::output_set: length %d is past the end of the block at %d (%d bytes)", ExtismEnvModule, n, off, len(b))})
	}
	return append([]byte(nil), b[:min(n, limit+1)]...), nil // one byte past the limit marks truncation
}

// refuse records e as why the call stopped, as stop does for a host
// function, where there is no trap to return (the function has returned).
func (p *pluginState) refuse(e *Error) *Error {
	p.trap = e
	return e
}

// kernelBlock returns the bytes of the live block h, checked against the
// memory's bounds (the plugin can write block headers, so nothing in them
// is trusted).
func kernelBlock(data []byte, h uint64) ([]byte, bool) {
	size := uint64(len(data))
	if h < kernelFirstBlock+kernelBlockHeader || h > size || h%8 != 0 {
		return nil, false
	}
	hdr := data[h-kernelBlockHeader : h]
	used := uint64(binary.LittleEndian.Uint32(hdr[8:]))
	if binary.LittleEndian.Uint32(hdr[12:]) != kernelBlockActive || used > size-h {
		return nil, false
	}
	return data[h : h+used], true
}

// extern returns what the plugin's import extism:host/env::name links to:
// a kernel export or one of the host functions below, of the engine's
// shared type for its signature.
func (p *pluginState) extern(r *run, name string) wasmtime.AsExtern {
	f := extismABI[name]
	if f.kernel {
		return exportedFunc(r.store, p.kernel, name)
	}
	var fn func(*wasmtime.Caller, []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap)
	switch name {
	case "config_get":
		fn = p.configGet
	case "var_get":
		fn = p.varGet
	case "var_set":
		fn = p.varSet
	case "get_log_level":
		fn = func(*wasmtime.Caller, []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
			return []wasmtime.Val{wasmtime.ValI32(0)}, nil // trace: every line is forwarded
		}
	default: // log_<level>
		level := LogLevel(strings.TrimPrefix(name, "log_"))
		fn = func(c *wasmtime.Caller, args []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
			return p.logLine(r, c, level, args)
		}
	}
	return wasmtime.NewFunc(r.store, p.in.e.kernelMod.types[f.signature], fn)
}

// stop records why a host function stopped the guest and returns the trap.
func (p *pluginState) stop(e *Error) *wasmtime.Trap {
	p.trap = e
	return wasmtime.NewTrap("sandboxd: " + e.Message)
}

func (p *pluginState) badHandle(fn, what string, h uint64) *wasmtime.Trap {
	return p.stop(&Error{Kind: KindTrap, TrapCode: TrapCodeHost,
		Message: fmt.Sprintf("%s::%s: %s %d is not a live kernel block", ExtismEnvModule, fn, what, h)})
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
	return p.stop(fuelError(p.in.r.req.Limits))
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
		l := p.in.limits.MemoryBytes
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
	key, trap := p.take(c, "config_get", "key", h)
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
	key, trap := p.take(c, "var_get", "key", h)
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
	key, trap := p.take(c, "var_set", "key", kh)
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
	vb, trap := p.block(c, "var_set", "value", vh)
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
func (p *pluginState) logLine(r *run, c *wasmtime.Caller, level LogLevel, args []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	h := uint64(args[0].I64())
	s := &r.log
	if s.full { // dropped without copying, as host::log does
		if _, ok := kernelBlock(p.mem.UnsafeData(c), h); ok {
			return nil, p.release(c, h)
		}
		return nil, nil
	}
	whole, trap := p.block(c, "log_"+string(level), "message", h)
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
