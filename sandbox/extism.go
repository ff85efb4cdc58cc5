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

// kernelModule compiles the kernel once per engine and makes it ready to
// instantiate with the engine's host linker (extism_link.go), which it
// builds first, on its own: a store that imports host functions needs the
// linker, only a plugin's the kernel.
type kernelModule struct {
	once sync.Once
	mod  *wasmtime.Module
	pre  *instancePre // mod, its import (sandboxd::grow) resolved by the host linker
	err  error

	hostOnce sync.Once
	host     *wasmtime.Linker
	hostErr  error
}

// kernel is the engine's kernel, ready to instantiate.
func (e *Engine) kernel() (*instancePre, error) {
	k := &e.kernelMod
	k.once.Do(func() {
		host, err := e.hostLinker()
		if err != nil {
			k.err = err
			return
		}
		wasm, err := wasmtime.Wat2Wasm(kernelWAT)
		if err != nil {
			k.err = fmt.Errorf("plugin kernel: %s", cleanMessage(err.Error()))
			return
		}
		if k.mod, err = wasmtime.NewModule(e.wt, wasm); err != nil {
			k.err = fmt.Errorf("plugin kernel: %s", cleanMessage(err.Error()))
			return
		}
		if k.pre, err = newInstancePre(host, k.mod); err != nil {
			k.err = fmt.Errorf("plugin kernel: %s", cleanMessage(err.Error()))
		}
	})
	return k.pre, k.err
}

// hostLinker is the engine's linker of host functions (newHostLinker).
func (e *Engine) hostLinker() (*wasmtime.Linker, error) {
	k := &e.kernelMod
	k.hostOnce.Do(func() {
		if k.host, k.hostErr = e.newHostLinker(); k.hostErr != nil {
			k.hostErr = fmt.Errorf("host functions: %s", cleanMessage(k.hostErr.Error()))
		}
	})
	return k.host, k.hostErr
}

// pluginConfig is what a plugin store is opened with.
type pluginConfig struct {
	config     map[string]string // what config_get reads
	varBytes   uint64            // the vars' budget
	logGranted bool              // the log capability: without it, log lines are dropped and counted
}

// pluginState is the Extism side of one plugin's store.
type pluginState struct {
	st       *store
	config   map[string]string
	vars     map[string][]byte
	varBytes uint64 // the budget
	varUsed  uint64 // sum of len(key)+len(value)

	logGranted bool

	kernel      *wasmtime.Instance
	mem         *wasmtime.Memory
	kernelBytes uint64 // the kernel memory's size

	// per call
	log    func(level LogLevel, line string)
	denied uint64 // a kernel growth to this many bytes (all memories) was refused
	trap   *Error // why a host function stopped the guest
}

func newPluginState(st *store, c pluginConfig) *pluginState {
	if c.config == nil {
		c.config = map[string]string{}
	}
	return &pluginState{st: st, config: c.config, vars: map[string][]byte{}, varBytes: c.varBytes, logGranted: c.logGranted}
}

func (p *pluginState) beginCall(log func(LogLevel, string)) {
	p.log, p.denied, p.trap = log, 0, nil
}

// grow is the kernel's only way to grow its memory: delta pages, if the
// kernel and the plugin together stay within the cap. It returns the old
// size in pages, or -1.
func (p *pluginState) grow(c *wasmtime.Caller, args []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	delta := uint64(uint32(args[0].I32()))
	guest := p.st.guestBytes(c)
	want := p.kernelBytes + delta*65536
	capBytes := p.st.limits.MemoryBytes
	if guest+want > capBytes {
		p.denied = max(p.denied, guest+want)
		return []wasmtime.Val{wasmtime.ValI32(-1)}, nil
	}
	old, err := p.mem.Grow(c, delta)
	if err != nil {
		return []wasmtime.Val{wasmtime.ValI32(-1)}, nil
	}
	p.kernelBytes = uint64(p.mem.DataSize(c))
	info := p.st.module.info
	if info.GrowsMemory || info.GrowsTable {
		if g := exportedGlobal(c, p.st.instance, wasmbin.ExportMemCapBytes); g != nil {
			g.Set(c, wasmtime.ValI64(int64(capBytes-p.kernelBytes)))
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
				return &Error{Kind: KindMemoryLimitExceeded, Resource: ResourceMemory, Limit: p.st.limits.MemoryBytes, Requested: p.denied,
					Message: fmt.Sprintf("the input of %d bytes does not fit in the plugin's memory cap of %d bytes", len(input), p.st.limits.MemoryBytes)}
			}
			return newError(KindHost, "the plugin kernel could not hold an input of %d bytes", len(input))
		}
		copy(p.mem.UnsafeData(store)[h:], input)
	}
	_, err := kernel("input_set", 0, ValueI64(h), ValueI64(int64(len(input))))
	return err
}

// pluginCall is one call of a plugin function: Extism's rules around the
// call of the export.
type pluginCall struct {
	p           *pluginState
	function    string
	input       []byte
	outputBytes uint64

	output    []byte     // what the function set, at most outputBytes
	truncated bool       // the function set more than outputBytes
	exit      *guestExit // the function ended in proc_exit
}

// run is the call's body (store.call): the input in, the function called,
// then its return code read: the i32 result, 0 for a function without
// one (Extism's rule), or the status of a proc_exit, which Extism's SDKs
// read as the return code (0: success, with the output set so far). A
// non-zero code or an error set is a plugin_error; a failing exit after a
// denied growth is the denial's.
func (pc *pluginCall) run() ([]Value, error) {
	s := pc.p.st
	if err := pc.p.setInput(s.wt, pc.input); err != nil {
		return nil, err
	}
	exp, _ := s.module.Export(pc.function)
	values, err := callFunction(s.wt, s.instance, pc.function, nil, exp.Results)
	var rc int32
	if err != nil {
		code, exited := wasiExitStatus(err)
		if !exited {
			return nil, err
		}
		pc.exit = &guestExit{code: code}
		if s.exitAfterDenial(code) {
			return nil, pc.exit
		}
		rc = int32(code)
	} else if len(values) == 1 {
		rc = values[0].I32()
	}
	output, perr := pc.p.result(s.wt, pc.function, rc, pc.exit != nil, pc.outputBytes)
	if perr != nil {
		return values, perr
	}
	if uint64(len(output)) > pc.outputBytes {
		output, pc.truncated = output[:pc.outputBytes], true
	}
	pc.output = output
	if pc.exit != nil {
		return values, pc.exit
	}
	return values, nil
}

// result reads what a plugin function left in the kernel: its output (at
// most limit+1 bytes copied, so the caller can tell it was cut), or the
// plugin_error it reported (an error message set, or a non-zero return
// code rc, which exited says was a proc_exit status).
func (p *pluginState) result(store wasmtime.Storelike, fn string, rc int32, exited bool, limit uint64) ([]byte, *Error) {
	data := p.mem.UnsafeData(store)
	if h := binary.LittleEndian.Uint64(data[kernelError:]); h != 0 || rc != 0 {
		msg := ""
		if b, ok := kernelBlock(data, h); ok {
			msg = validUTF8(b[:min(len(b), MaxPluginErrorBytes)])
			if len(msg) > MaxPluginErrorBytes {
				msg = protocol.CutUTF8(msg, MaxPluginErrorBytes)
			}
		}
		if msg == "" && exited {
			msg = fmt.Sprintf("plugin function %s exited with status %d", protocol.Quote(fn), rc)
		} else if msg == "" {
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
