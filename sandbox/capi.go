package sandbox

// This file, with its C side in capi.h and capi.c, is the only one that
// reaches past wasmtime-go into wasmtime's C API.
//
// Why: wasmtime-go v39 exposes Store.SetEpochDeadline but not the store's
// epoch-deadline callback, and without that callback a store can only trap
// when its deadline epoch arrives; another goroutine cannot stop it early
// (a Store is not safe to touch from two threads). With the callback, every
// tick of the one global epoch ticker calls a small C function on the
// guest's own thread; it reads a per-run fence (an atomic stop flag and a
// monotonic deadline) and either stops the guest or extends the deadline by
// one tick. Cancellation and timeouts are then both exact and per run.
//
// The callback is plain C (capi.c, declared with the wasmtime symbols it
// uses in capi.h) so a tick costs a clock read, not a cgo call back into
// Go. capi_test.go fails loudly if the pinned wasmtime-go or its Store
// layout changes, or if capi.h disagrees with the pinned headers.
//
// The WASI block (of capi.h and capi.c) exists for the same reason: wasmtime-go's
// WasiConfig offers stdin only as a host file or inheritance, while the C API
// can take it as bytes (stdout and stderr are answered in Go, wasi_stdio.go).
// fuelTrap makes wasmtime's out-of-fuel trap for
// host functions whose work the guest cannot pay for (wasi_fuel.go).

/*
#include <stdlib.h>

#include "capi.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// stopReason says why the fence stopped a guest, if it did.
type stopReason int32

const (
	stopNone      stopReason = C.SBX_RUNNING
	stopCancelled stopReason = C.SBX_CANCELLED
	stopTimedOut  stopReason = C.SBX_TIMED_OUT
)

// fence is the per-run C state read by the epoch callback. It must outlive
// the store it is installed in: free it only after the store is closed.
type fence struct{ c *C.sbx_fence }

// installFence arms a deadline timeout from now and installs the epoch
// callback on store. The store must have a deadline of one tick
// (SetEpochDeadline(1)) so the callback runs on every tick.
func installFence(store *wasmtime.Store, timeout time.Duration) (*fence, error) {
	c := C.sbx_fence_new(C.int64_t(timeout.Nanoseconds()))
	if c == nil {
		return nil, errors.New("out of memory allocating the run fence")
	}
	C.sbx_fence_install(storePtr(store), c)
	return &fence{c}, nil
}

// cancel asks the guest to stop at its next epoch check. Safe from any
// goroutine, any number of times.
func (f *fence) cancel() { C.sbx_fence_cancel(f.c) }

// rearm readies the fence of a long-lived instance for its next call: the
// deadline is timeout from now and any earlier stop is forgotten. Only
// between calls, from the goroutine that owns the store.
func (f *fence) rearm(timeout time.Duration) {
	C.sbx_fence_rearm(f.c, C.int64_t(timeout.Nanoseconds()))
}

// reason reports why the callback stopped the guest. Only meaningful after
// the guest returned control to the host (the store's thread wrote it).
func (f *fence) reason() stopReason { return stopReason(f.c.reason) }

// remaining is the time left until the fence's deadline (negative once it
// has passed), on the clock the epoch callback reads.
func (f *fence) remaining() time.Duration {
	return time.Duration(C.sbx_fence_remaining_ns(f.c))
}

// stopBy records that a host function stopped the guest for r, so that the
// run is classified as if the epoch callback had stopped it. Only from the
// store's own thread (a host function of the run).
func (f *fence) stopBy(r stopReason) { f.c.reason = C.int32_t(r) }

// free releases the fence. Call after the store has been closed.
func (f *fence) free() {
	if f.c != nil {
		C.free(unsafe.Pointer(f.c))
		f.c = nil
	}
}

// storePtr reads the *wasmtime_store_t that wasmtime-go keeps unexported as
// the first field of Store. capi_test.go checks that layout by reflection.
func storePtr(store *wasmtime.Store) *C.wasmtime_store_t {
	return *(**C.wasmtime_store_t)(unsafe.Pointer(store))
}

// consumeFuel charges n units of the guest's fuel for work a host function
// does on its behalf, through the caller's context (wasmtime saves the
// guest's fuel counter to the store before any host call and reloads it
// after, so the charge is what the guest sees next). It reports whether
// there was enough; if not, none is left. One cgo call. A store without
// fuel (never one of ours) has nothing to charge.
func consumeFuel(c *wasmtime.Caller, n uint64) bool {
	return C.sbx_consume_fuel((*C.wasmtime_context_t)(unsafe.Pointer(c.Context())), C.uint64_t(n)) != 0
}

// ---- calling an export ----

// maxFastVals is the most arguments, and the most results, callExport
// passes; a function with more takes wasmtime-go's path.
const maxFastVals = C.SBX_MAX_VALS

// callExport calls the function export name of inst in store with args
// and returns nres results: one cgo call, where wasmtime-go's GetFunc and
// Call make about a dozen. The argument types need not be checked here:
// wasmtime checks them against the function's type. ok is false, and
// nothing was called, when the export is not a function or there are too
// many values; the caller takes wasmtime-go's path then. A failed call
// returns a *wasmtime.Trap or *wasmtime.Error, as Func.Call would.
func callExport(store *wasmtime.Store, inst *wasmtime.Instance, name string, args []Value, nres int) (values []Value, err error, ok bool) {
	values, err, ok = callIn(store, (*C.wasmtime_context_t)(unsafe.Pointer(C.wasmtime_store_context(storePtr(store)))), inst, name, args, nres)
	runtime.KeepAlive(store)
	return values, err, ok
}

// callNested is callExport from inside a host function, in its caller's
// context: a plugin's host functions call the kernel this way. wasmtime-go's
// Func.Call fetches the function's type on every call, and those types
// kept native memory that no store's end returned (8 M nested calls of
// one-shot plugin runs took the sidecar from 40 to 247 MiB).
func callNested(c *wasmtime.Caller, inst *wasmtime.Instance, name string, args []Value, nres int) (values []Value, err error, ok bool) {
	values, err, ok = callIn(c, (*C.wasmtime_context_t)(unsafe.Pointer(c.Context())), inst, name, args, nres)
	runtime.KeepAlive(c)
	return values, err, ok
}

func callIn(store wasmtime.Storelike, ctx *C.wasmtime_context_t, inst *wasmtime.Instance, name string, args []Value, nres int) (values []Value, err error, ok bool) {
	if len(args) > maxFastVals || nres > maxFastVals || name == "" {
		return nil, nil, false
	}
	var v C.sbx_vals
	for i, a := range args {
		v.kind[i] = C.uint8_t(wasmKind(a.Type))
		v.bits[i] = C.uint64_t(a.Bits)
	}
	called := C.sbx_call_in(ctx, instancePtr(inst), (*C.char)(unsafe.Pointer(unsafe.StringData(name))), C.size_t(len(name)),
		&v, C.size_t(len(args)), C.size_t(nres), &v.err, &v.trap)
	runtime.KeepAlive(inst)
	runtime.KeepAlive(name)
	if called == 0 {
		return nil, nil, false
	}
	cerr, trap := v.err, v.trap
	if trap != nil {
		if cerr != nil {
			C.wasmtime_error_delete(cerr)
		}
		t := wrapTrap(trap)
		if isHostPanic(t.Message()) {
			repanic(store)
		}
		return nil, t, true
	}
	if cerr != nil {
		e := wrapError(cerr)
		if isHostPanic(e.Error()) {
			repanic(store)
		}
		return nil, e, true
	}
	values = make([]Value, nres)
	for i := range values {
		values[i] = Value{Type: valTypeOfKind(uint8(v.kind[i])), Bits: uint64(v.bits[i])}
	}
	return values, nil, true
}

// repanic raises again the panic of a host function that wasmtime-go
// caught during callExport, with its value, as wasmtime-go's own Call
// would have. wasmtime-go keeps that value in the store's data and raises
// it (forgetting it) after any call it makes itself, so it makes one: of
// a host function that does nothing. Without this the value would stay
// behind and surface at the store's next wasmtime-go call. It returns if
// wasmtime-go holds no value (the words came from elsewhere).
func repanic(store wasmtime.Storelike) {
	noop := wasmtime.NewFunc(store, wasmtime.NewFuncType(nil, nil),
		func(*wasmtime.Caller, []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) { return nil, nil })
	_, _ = noop.Call(store)
}

// isHostPanic recognises the failure wasmtime-go's host-function
// trampoline reports when the Go function panicked: "go panicked", as
// the cause of a call's error.
func isHostPanic(msg string) bool {
	const goPanicked = "go panicked"
	m := cleanMessage(msg)
	return m == goPanicked || strings.HasSuffix(m, ": "+goPanicked)
}

// wasmKind is the wasmtime_valkind_t of t (val.h: WASMTIME_I32 = 0 …
// WASMTIME_F64 = 3).
func wasmKind(t ValType) uint8 {
	switch t {
	case I32:
		return 0
	case I64:
		return 1
	case F32:
		return 2
	}
	return 3
}

func valTypeOfKind(k uint8) ValType {
	switch k {
	case 0:
		return I32
	case 1:
		return I64
	case 2:
		return F32
	}
	return F64
}

// instancePtr is the wasmtime_instance_t that wasmtime-go keeps unexported
// as the only field of Instance. capi_test.go checks that layout.
func instancePtr(inst *wasmtime.Instance) *C.wasmtime_instance_t {
	return (*C.wasmtime_instance_t)(unsafe.Pointer(inst))
}

// wrapTrap and wrapError give a trap or error the C API returned the
// wasmtime-go type every caller expects (classify reads a *wasmtime.Trap,
// wasiExitStatus a *wasmtime.Error), owning it as wasmtime-go's own
// would: freed by Close or, failing that, the garbage collector. Both
// types' only field is the C pointer (capi_test.go checks).
func wrapTrap(p *C.wasm_trap_t) *wasmtime.Trap {
	t := new(wasmtime.Trap)
	*(**C.wasm_trap_t)(unsafe.Pointer(t)) = p
	runtime.SetFinalizer(t, (*wasmtime.Trap).Close)
	return t
}

func wrapError(p *C.wasmtime_error_t) *wasmtime.Error {
	e := new(wasmtime.Error)
	*(**C.wasmtime_error_t)(unsafe.Pointer(e)) = p
	runtime.SetFinalizer(e, (*wasmtime.Error).Close)
	return e
}

// fuelTrap is the trap a host function returns when the guest cannot pay
// for its work: wasmtime's own out-of-fuel trap (trap code
// rawTrapOutOfFuel), so the run is classified exactly as if the guest's
// instructions had used the fuel up.
func fuelTrap() *wasmtime.Trap {
	return wrapTrap(C.wasmtime_trap_new_code(C.wasmtime_trap_code_t(rawTrapOutOfFuel)))
}

// ---- WASI ----

// setWasiStdin gives cfg stdin (copied). stdout and stderr are left to
// wasi_stdio.go (sbx_wasi_stdin says why).
func setWasiStdin(cfg *wasmtime.WasiConfig, stdin []byte) {
	var p *C.char
	if len(stdin) > 0 {
		p = (*C.char)(unsafe.Pointer(&stdin[0]))
	}
	C.sbx_wasi_stdin(wasiConfigPtr(cfg), p, C.size_t(len(stdin)))
	runtime.KeepAlive(stdin)
}

// forwardWASI calls the shim's function name from inside a host function
// (c is its caller) with the host function's own arguments, and returns
// the errno it returned, or the trap it stopped with.
func forwardWASI(c *wasmtime.Caller, shim *wasmtime.Instance, name string, a []wasmtime.Val) (int32, *wasmtime.Trap) {
	var is64 [C.SBX_MAX_VALS]C.uint8_t
	var args [C.SBX_MAX_VALS]C.int64_t
	if len(a) > len(args) {
		return 0, wasmtime.NewTrap("sandboxd: " + name + ": too many arguments")
	}
	for i, v := range a {
		if v.Kind() == wasmtime.KindI64 {
			is64[i], args[i] = 1, C.int64_t(v.I64())
		} else {
			args[i] = C.int64_t(v.I32())
		}
	}
	var result C.int32_t
	var cerr *C.wasmtime_error_t
	var trap *C.wasm_trap_t
	called := C.sbx_wasi_forward((*C.wasmtime_context_t)(unsafe.Pointer(c.Context())), instancePtr(shim),
		(*C.char)(unsafe.Pointer(unsafe.StringData(name))), C.size_t(len(name)),
		&is64[0], &args[0], C.size_t(len(a)), &result, &cerr, &trap)
	runtime.KeepAlive(shim)
	runtime.KeepAlive(name)
	switch {
	case called == 0:
		return 0, wasmtime.NewTrap("sandboxd: the WASI shim has no " + name)
	case trap != nil:
		if cerr != nil {
			C.wasmtime_error_delete(cerr)
		}
		return 0, wrapTrap(trap)
	case cerr != nil:
		// Not a trap (a bad pointer, say: proc_exit, whose error is an
		// exit, is not forwarded): its message as a trap.
		e := wrapError(cerr)
		defer e.Close()
		return 0, wasmtime.NewTrap(wasiErrorMessage(name, e.Error()))
	}
	return int32(result), nil
}

// wasiConfigPtr reads the *wasi_config_t that wasmtime-go keeps unexported
// as the first field of WasiConfig. capi_test.go checks that layout.
func wasiConfigPtr(cfg *wasmtime.WasiConfig) *C.wasi_config_t {
	return *(**C.wasi_config_t)(unsafe.Pointer(cfg))
}

// The layouts of the declarations sbx_call relies on, for capi_test.go to
// compare with the pinned headers.
const (
	sizeofWasmtimeFunc     = C.sizeof_wasmtime_func_t
	sizeofWasmtimeInstance = C.sizeof_wasmtime_instance_t
	sizeofWasmtimeVal      = C.sizeof_wasmtime_val_t
	sizeofWasmtimeExtern   = C.sizeof_wasmtime_extern_t
)

var (
	offsetofValOf    = unsafe.Offsetof(C.wasmtime_val_t{}.of)
	offsetofExternOf = unsafe.Offsetof(C.wasmtime_extern_t{}.of)
)

// interruptSignal is the signal that makes a thread blocked in an
// interruptible system call return EINTR (sbx_interrupt_signal), installed
// on first use; 0 if it could not be.
var interruptSignal = sync.OnceValue(func() syscall.Signal {
	if sig := C.sbx_interrupt_signal(); sig > 0 {
		return syscall.Signal(sig)
	}
	return 0
})

// ---- the pooling instance allocator ----

// setPooling makes cfg allocate from a pool of p's size (pool.go).
func setPooling(cfg *wasmtime.Config, p poolSettings) error {
	c := C.sbx_pool{
		total_core_instances:        C.uint32_t(p.instances),
		total_memories:              C.uint32_t(p.memories),
		total_tables:                C.uint32_t(p.tables),
		total_gc_heaps:              C.uint32_t(p.gcHeaps),
		max_memories_per_module:     C.uint32_t(p.memoriesPerModule),
		max_tables_per_module:       C.uint32_t(p.tablesPerModule),
		max_unused_warm_slots:       C.uint32_t(p.warmSlots),
		table_elements:              C.uint64_t(p.tableElements),
		max_memory_size:             C.uint64_t(p.memoryBytes),
		max_core_instance_size:      C.uint64_t(p.instanceBytes),
		linear_memory_keep_resident: C.uint64_t(p.memoryKeepResident),
		table_keep_resident:         C.uint64_t(p.tableKeepResident),
	}
	ok := C.sbx_pool_set(configPtr(cfg), &c)
	runtime.KeepAlive(cfg)
	if ok == 0 {
		return errors.New("out of memory configuring the pooling allocator")
	}
	return nil
}

// setMemoryLayout sets the address space reserved for each linear memory
// and the guard after it: settings that shape the compiled code.
func setMemoryLayout(cfg *wasmtime.Config, reservation, guard uint64) {
	C.wasmtime_config_memory_reservation_set(configPtr(cfg), C.uint64_t(reservation))
	C.wasmtime_config_memory_guard_size_set(configPtr(cfg), C.uint64_t(guard))
	runtime.KeepAlive(cfg)
}

// configPtr reads the *wasm_config_t that wasmtime-go keeps unexported as
// the first field of Config. capi_test.go checks that layout.
func configPtr(cfg *wasmtime.Config) *C.wasm_config_t {
	return *(**C.wasm_config_t)(unsafe.Pointer(cfg))
}

// exportedFunc is the function export name of inst, in one cgo call and
// without the finalized Extern wasmtime-go's GetExport makes (a plugin's
// instantiation looks up every kernel function it imports); nil if inst
// exports no function of that name. wasmtime-go's Func is the
// wasmtime_func_t alone (capi_call_test.go checks).
func exportedFunc(store *wasmtime.Store, inst *wasmtime.Instance, name string) *wasmtime.Func {
	f := new(wasmtime.Func)
	ok := C.sbx_export_func(C.wasmtime_store_context(storePtr(store)), instancePtr(inst),
		(*C.char)(unsafe.Pointer(unsafe.StringData(name))), C.size_t(len(name)), (*C.wasmtime_func_t)(unsafe.Pointer(f)))
	runtime.KeepAlive(store)
	runtime.KeepAlive(inst)
	runtime.KeepAlive(name)
	if ok == 0 {
		return nil
	}
	return f
}

// ---- instantiating in one call (extism_link.go) ----
//
// wasmtime-go instantiates a module from a list of externs it converts
// one by one, and a plugin's were made one by one too (a NewFunc per host
// import, with its type's results fetched and finalized each time; an
// export lookup per kernel import): about 60 µs of CPU of every one-shot
// plugin run. sbx_instantiate resolves every import in C, from the
// engine's linkers (host functions defined once per engine: they find
// their store through the caller), the kernel's exports and the few
// functions a store still makes itself, and instantiates the kernel (from
// an InstancePre made once per engine) and the module in one cgo call.

// importFrom says where sbx_instantiate takes an import from.
type importFrom uint8

const (
	fromGiven  importFrom = C.SBX_FROM_GIVEN  // a function the store made (linkSpec.given)
	fromKernel importFrom = C.SBX_FROM_KERNEL // the plugin kernel's export of the import's name
	fromHost   importFrom = C.SBX_FROM_HOST   // the engine's host linker
	fromWASI   importFrom = C.SBX_FROM_WASI   // the engine's WASI linker for the run
)

// instancePre is a module whose imports a linker has resolved once, ready
// to be instantiated in any store of the engine without resolving them
// again. Freed by the garbage collector, as wasmtime-go's own objects are.
type instancePre struct{ c *C.wasmtime_instance_pre_t }

func newInstancePre(l *wasmtime.Linker, m *wasmtime.Module) (*instancePre, error) {
	var c *C.wasmtime_instance_pre_t
	cerr := C.wasmtime_linker_instantiate_pre(linkerPtr(l), modulePtr(m), &c)
	runtime.KeepAlive(l)
	runtime.KeepAlive(m)
	if cerr != nil {
		return nil, wrapError(cerr)
	}
	p := &instancePre{c}
	runtime.SetFinalizer(p, func(p *instancePre) { C.wasmtime_instance_pre_delete(p.c) })
	return p, nil
}

// linkSpec is how instantiateLinked resolves a module's imports.
type linkSpec struct {
	kernel *instancePre     // instantiated first, if set: fromKernel imports are its exports
	host   *wasmtime.Linker // fromHost imports' definitions
	wasi   *wasmtime.Linker // fromWASI imports' definitions
	from   []importFrom     // each import's source, in the module's order
	given  []*wasmtime.Func // the fromGiven imports' functions, at their index
}

// linked is what instantiateLinked made: the module's instance and, with
// a kernel, the kernel's instance and memory.
type linked struct {
	instance  *wasmtime.Instance
	kernel    *wasmtime.Instance
	kernelMem *wasmtime.Memory
}

// instantiateLinked instantiates m in store with its imports (m's, in
// order) resolved as spec says, in one cgo call. An import with no
// definition is an error naming it; a failed instantiation returns the
// *wasmtime.Trap or *wasmtime.Error wasmtime-go's NewInstance would.
func instantiateLinked(store *wasmtime.Store, m *wasmtime.Module, imports []Import, spec linkSpec) (linked, error) {
	n := len(imports)
	size := 0
	for _, imp := range imports {
		size += len(imp.Module) + len(imp.Name)
	}
	names := make([]byte, 0, size+1)
	ends := make([]uint32, 0, 2*n+1)
	from := make([]uint8, n+1)
	given := make([]C.wasmtime_func_t, n+1)
	for i, imp := range imports {
		names = append(names, imp.Module...)
		ends = append(ends, uint32(len(names)))
		names = append(names, imp.Name...)
		ends = append(ends, uint32(len(names)))
		from[i] = uint8(spec.from[i])
		if spec.from[i] == fromGiven {
			given[i] = *(*C.wasmtime_func_t)(unsafe.Pointer(spec.given[i]))
		}
	}
	names = append(names, 0) // never empty: &names[0] below
	ends = append(ends, 0)
	var kernel *C.wasmtime_instance_pre_t
	if spec.kernel != nil {
		kernel = spec.kernel.c
	}
	var host, wasi *C.wasmtime_linker_t
	if spec.host != nil {
		host = linkerPtr(spec.host)
	}
	if spec.wasi != nil {
		wasi = linkerPtr(spec.wasi)
	}
	var out C.sbx_link
	ok := C.sbx_instantiate(C.wasmtime_store_context(storePtr(store)), kernel, host, wasi, modulePtr(m), C.size_t(n),
		(*C.uint8_t)(unsafe.Pointer(&from[0])), (*C.char)(unsafe.Pointer(&names[0])), (*C.uint32_t)(unsafe.Pointer(&ends[0])),
		&given[0], &out)
	runtime.KeepAlive(store)
	runtime.KeepAlive(m)
	runtime.KeepAlive(spec)
	if ok != 0 {
		l := linked{instance: wrapInstance(out.instance)}
		if spec.kernel != nil {
			l.kernel = wrapInstance(out.kernel)
			l.kernelMem = new(wasmtime.Memory)
			*(*C.wasmtime_memory_t)(unsafe.Pointer(l.kernelMem)) = out.kernel_memory
		}
		return l, nil
	}
	switch {
	case out.trap != nil:
		if out.err != nil {
			C.wasmtime_error_delete(out.err)
		}
		t := wrapTrap(out.trap)
		if isHostPanic(t.Message()) {
			repanic(store)
		}
		return linked{}, t
	case out.err != nil:
		e := wrapError(out.err)
		if isHostPanic(e.Error()) {
			repanic(store)
		}
		return linked{}, e
	}
	imp := imports[out.missing]
	return linked{}, fmt.Errorf("%s::%s is not defined", imp.Module, imp.Name)
}

// exportedMemory, exportedGlobal and exportedTable are the export name of
// inst if it is a memory, global or table, in one cgo call and without the
// finalized Extern of wasmtime-go's GetExport (store.bind looks up every
// memory and table of a module at its instantiation); nil otherwise.
// wasmtime-go's Memory, Global and Table are their C struct alone
// (capi_link_test.go checks).
func exportedMemory(store wasmtime.Storelike, inst *wasmtime.Instance, name string) *wasmtime.Memory {
	m := new(wasmtime.Memory)
	if !exportOf(store, inst, name, C.SBX_EXTERN_MEMORY, unsafe.Pointer(m), unsafe.Sizeof(*m)) {
		return nil
	}
	return m
}

func exportedGlobal(store wasmtime.Storelike, inst *wasmtime.Instance, name string) *wasmtime.Global {
	g := new(wasmtime.Global)
	if !exportOf(store, inst, name, C.SBX_EXTERN_GLOBAL, unsafe.Pointer(g), unsafe.Sizeof(*g)) {
		return nil
	}
	return g
}

func exportedTable(store wasmtime.Storelike, inst *wasmtime.Instance, name string) *wasmtime.Table {
	t := new(wasmtime.Table)
	if !exportOf(store, inst, name, C.SBX_EXTERN_TABLE, unsafe.Pointer(t), unsafe.Sizeof(*t)) {
		return nil
	}
	return t
}

// callerMemory is the memory export name of the instance calling a host
// function (c), as Caller.GetExport finds it but in one cgo call and
// without a finalized Extern per lookup (host::log looks up its memory
// for every line); nil if it has none. wasmtime-go's Caller is the
// wasmtime_caller_t pointer alone (capi_link_test.go checks).
func callerMemory(c *wasmtime.Caller, name string) *wasmtime.Memory {
	m := new(wasmtime.Memory)
	ok := C.sbx_caller_memory(*(**C.wasmtime_caller_t)(unsafe.Pointer(c)),
		(*C.char)(unsafe.Pointer(unsafe.StringData(name))), C.size_t(len(name)), (*C.wasmtime_memory_t)(unsafe.Pointer(m)))
	runtime.KeepAlive(c)
	runtime.KeepAlive(name)
	if ok == 0 {
		return nil
	}
	return m
}

// exportOf copies the first size bytes of the export name of inst, if it
// is of kind, to dst.
func exportOf(store wasmtime.Storelike, inst *wasmtime.Instance, name string, kind C.uint8_t, dst unsafe.Pointer, size uintptr) bool {
	var item C.wasmtime_extern_t
	ok := C.sbx_export_of((*C.wasmtime_context_t)(unsafe.Pointer(store.Context())), instancePtr(inst),
		(*C.char)(unsafe.Pointer(unsafe.StringData(name))), C.size_t(len(name)), kind, &item)
	runtime.KeepAlive(store)
	runtime.KeepAlive(inst)
	runtime.KeepAlive(name)
	if ok == 0 {
		return false
	}
	copy(unsafe.Slice((*byte)(dst), size), unsafe.Slice((*byte)(unsafe.Pointer(&item.of)), size))
	return true
}

// wrapInstance is the wasmtime-go Instance of c (its only field,
// capi_call_test.go checks).
func wrapInstance(c C.wasmtime_instance_t) *wasmtime.Instance {
	inst := new(wasmtime.Instance)
	*(*C.wasmtime_instance_t)(unsafe.Pointer(inst)) = c
	return inst
}

// linkerPtr and modulePtr read the C pointer wasmtime-go keeps unexported
// as the first field of Linker and Module (capi_link_test.go checks).
func linkerPtr(l *wasmtime.Linker) *C.wasmtime_linker_t {
	return *(**C.wasmtime_linker_t)(unsafe.Pointer(l))
}

func modulePtr(m *wasmtime.Module) *C.wasmtime_module_t {
	return *(**C.wasmtime_module_t)(unsafe.Pointer(m))
}

// The layouts instantiateLinked and exportOf rely on, for
// capi_link_test.go.
const sizeofWasmtimeMemory = C.sizeof_wasmtime_memory_t
