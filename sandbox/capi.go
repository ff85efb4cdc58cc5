package sandbox

// This is the only file that reaches past wasmtime-go into wasmtime's C API.
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
// The callback is plain C so a tick costs a clock read, not a cgo call back
// into Go. The wasmtime symbols are declared here rather than included
// because wasmtime-go's headers live in its module directory; libwasmtime.a
// is linked by wasmtime-go's own cgo flags. capi_test.go fails loudly if the
// pinned wasmtime-go or its Store layout changes.
//
// The WASI block (marked below) exists for the same reason: wasmtime-go's
// WasiConfig offers stdio only as host files or inheritance, while the C API
// can take stdin as bytes and call a function for every write to stdout and
// stderr, synchronously on the guest's thread, which is what streaming and
// the output budget need. fuelTrap makes wasmtime's out-of-fuel trap for
// host functions whose work the guest cannot pay for (wasi_fuel.go).

/*
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct wasmtime_store wasmtime_store_t;
typedef struct wasmtime_context wasmtime_context_t;
typedef struct wasmtime_error wasmtime_error_t;

extern wasmtime_error_t *wasmtime_error_new(const char *);
extern void wasmtime_store_epoch_deadline_callback(
    wasmtime_store_t *store,
    wasmtime_error_t *(*func)(wasmtime_context_t *, void *, uint64_t *, uint8_t *),
    void *data, void (*finalizer)(void *));

enum { SBX_RUNNING = 0, SBX_CANCELLED = 1, SBX_TIMED_OUT = 2 };

typedef struct {
	int32_t stop;         // set to SBX_CANCELLED from any thread
	int32_t reason;       // why the callback stopped the guest
	int64_t deadline_ns;  // CLOCK_MONOTONIC deadline
} sbx_fence;

static int64_t sbx_now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static wasmtime_error_t *sbx_on_epoch(wasmtime_context_t *ctx, void *data,
                                      uint64_t *delta, uint8_t *kind) {
	sbx_fence *f = (sbx_fence *)data;
	if (__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE) == SBX_CANCELLED) {
		f->reason = SBX_CANCELLED;
		return wasmtime_error_new("sandboxd: run cancelled");
	}
	if (sbx_now_ns() >= f->deadline_ns) {
		f->reason = SBX_TIMED_OUT;
		return wasmtime_error_new("sandboxd: deadline exceeded");
	}
	*delta = 1;
	*kind = 0; // WASMTIME_UPDATE_DEADLINE_CONTINUE
	return NULL;
}

static sbx_fence *sbx_fence_new(int64_t timeout_ns) {
	sbx_fence *f = calloc(1, sizeof(sbx_fence));
	if (f) f->deadline_ns = sbx_now_ns() + timeout_ns;
	return f;
}

static void sbx_fence_install(wasmtime_store_t *store, sbx_fence *f) {
	wasmtime_store_epoch_deadline_callback(store, sbx_on_epoch, f, NULL);
}

static void sbx_fence_cancel(sbx_fence *f) {
	__atomic_store_n(&f->stop, SBX_CANCELLED, __ATOMIC_RELEASE);
}

// sbx_fence_rearm starts a new call on a long-lived store: no stop
// requested, no reason recorded, a fresh deadline. Only between calls (the
// store's thread is not in the guest).
static void sbx_fence_rearm(sbx_fence *f, int64_t timeout_ns) {
	__atomic_store_n(&f->stop, SBX_RUNNING, __ATOMIC_RELEASE);
	f->reason = SBX_RUNNING;
	f->deadline_ns = sbx_now_ns() + timeout_ns;
}

static int64_t sbx_fence_remaining_ns(sbx_fence *f) {
	return f->deadline_ns - sbx_now_ns();
}

// ---- fuel charged by host functions (store.h, error.h) ----

extern wasmtime_error_t *wasmtime_context_get_fuel(const wasmtime_context_t *context, uint64_t *fuel);
extern wasmtime_error_t *wasmtime_context_set_fuel(wasmtime_context_t *store, uint64_t fuel);
extern void wasmtime_error_delete(wasmtime_error_t *error);

// sbx_consume_fuel takes n units from the fuel left in ctx (the caller's
// context, inside a host function): 1 if there were enough; 0 if not, and
// then none is left; -1 if fuel is not enabled.
static int sbx_consume_fuel(wasmtime_context_t *ctx, uint64_t n) {
	uint64_t left = 0;
	wasmtime_error_t *err = wasmtime_context_get_fuel(ctx, &left);
	if (err) {
		wasmtime_error_delete(err);
		return -1;
	}
	int enough = left >= n;
	err = wasmtime_context_set_fuel(ctx, enough ? left - n : 0);
	if (err) {
		wasmtime_error_delete(err);
		return -1;
	}
	return enough;
}

// ---- calling an export in one cgo call (instance.h, func.h, val.h, extern.h) ----
//
// wasmtime-go's Instance.GetFunc and Func.Call cost about a dozen cgo calls
// and as many allocations with finalizers per call (the function's type is
// fetched and freed every time). sbx_call does the lookup, the call and
// the conversions in one. The three types are declared as in the pinned
// headers (capi_test.go compiles the headers and compares the layouts);
// wasmtime_extern_t's union is given room to spare, since only its kind
// and func member are read.

typedef struct wasmtime_func {
	uint64_t store_id;
	void *__private;
} wasmtime_func_t;

typedef struct wasmtime_instance {
	uint64_t store_id;
	size_t __private;
} wasmtime_instance_t;

typedef struct wasmtime_val {
	uint8_t kind;
	union {
		int32_t i32;
		int64_t i64;
		float f32;
		double f64;
		uint8_t any[24];
	} of;
} wasmtime_val_t;

typedef struct wasmtime_extern {
	uint8_t kind;
	union {
		wasmtime_func_t func;
		uint8_t any[56];
	} of;
} wasmtime_extern_t;

typedef struct wasm_trap_t wasm_trap_t;

extern wasmtime_context_t *wasmtime_store_context(wasmtime_store_t *store);
extern bool wasmtime_instance_export_get(wasmtime_context_t *store, const wasmtime_instance_t *instance, const char *name, size_t name_len, wasmtime_extern_t *item);
extern void wasmtime_extern_delete(wasmtime_extern_t *val);
extern wasmtime_error_t *wasmtime_func_call(wasmtime_context_t *store, const wasmtime_func_t *func, const wasmtime_val_t *args, size_t nargs, wasmtime_val_t *results, size_t nresults, wasm_trap_t **trap);

enum { SBX_MAX_VALS = 16, SBX_EXTERN_FUNC = 0 };

// sbx_vals carries a call's values: kinds (WASMTIME_I32 … WASMTIME_F64,
// the same numbers as the wasm value types) and bits (i32 and f32 in the
// low 32 bits); the results replace the arguments. err and trap receive a
// failed call's error or trap: in the same struct, a call's out-parameters
// are one allocation on the Go side, not three.
typedef struct {
	uint8_t kind[SBX_MAX_VALS];
	uint64_t bits[SBX_MAX_VALS];
	wasmtime_error_t *err;
	wasm_trap_t *trap;
} sbx_vals;

// sbx_call calls the function export name of inst with nargs values of v
// and writes nres results back into v. It returns 0 when there is no such
// function, 1 when the call was made (*err or *trap set if it failed).
static int sbx_call_in(wasmtime_context_t *ctx, const wasmtime_instance_t *inst, const char *name, size_t name_len,
                       sbx_vals *v, size_t nargs, size_t nres, wasmtime_error_t **err, wasm_trap_t **trap);

static int sbx_call(wasmtime_store_t *store, const wasmtime_instance_t *inst, const char *name, size_t name_len,
                    sbx_vals *v, size_t nargs, size_t nres, wasmtime_error_t **err, wasm_trap_t **trap) {
	return sbx_call_in(wasmtime_store_context(store), inst, name, name_len, v, nargs, nres, err, trap);
}

// sbx_call_in is sbx_call in a context: a store's, or a host function's
// caller's (a nested call).
static int sbx_call_in(wasmtime_context_t *ctx, const wasmtime_instance_t *inst, const char *name, size_t name_len,
                       sbx_vals *v, size_t nargs, size_t nres, wasmtime_error_t **err, wasm_trap_t **trap) {
	wasmtime_extern_t item;
	if (!wasmtime_instance_export_get(ctx, inst, name, name_len, &item))
		return 0;
	if (item.kind != SBX_EXTERN_FUNC) {
		wasmtime_extern_delete(&item);
		return 0;
	}
	wasmtime_val_t args[SBX_MAX_VALS], results[SBX_MAX_VALS];
	for (size_t i = 0; i < nargs; i++) {
		args[i].kind = v->kind[i];
		if (v->kind[i] == 0 || v->kind[i] == 2) { // i32, f32: 4 bytes of bits
			uint32_t b = (uint32_t)v->bits[i];
			memcpy(&args[i].of, &b, 4);
		} else {
			memcpy(&args[i].of, &v->bits[i], 8);
		}
	}
	*trap = NULL;
	*err = wasmtime_func_call(ctx, &item.of.func, args, nargs, results, nres, trap);
	if (!*err && !*trap) {
		for (size_t i = 0; i < nres; i++) {
			v->kind[i] = results[i].kind;
			if (results[i].kind == 0 || results[i].kind == 2) {
				uint32_t b;
				memcpy(&b, &results[i].of, 4);
				v->bits[i] = b;
			} else {
				memcpy(&v->bits[i], &results[i].of, 8);
			}
		}
	}
	wasmtime_extern_delete(&item);
	return 1;
}
// sbx_export_func writes the function export name of inst to *out: 1 if
// there is one, 0 if not (a function is its store's: there is nothing to
// free).
static int sbx_export_func(wasmtime_context_t *ctx, const wasmtime_instance_t *inst, const char *name, size_t name_len,
                           wasmtime_func_t *out) {
	wasmtime_extern_t item;
	if (!wasmtime_instance_export_get(ctx, inst, name, name_len, &item))
		return 0;
	int ok = item.kind == SBX_EXTERN_FUNC;
	if (ok)
		*out = item.of.func;
	wasmtime_extern_delete(&item);
	return ok;
}

// ---- a host function's out-of-fuel trap (trap.h) ----

typedef uint8_t wasmtime_trap_code_t;

extern wasm_trap_t *wasmtime_trap_new_code(wasmtime_trap_code_t code);

// ---- WASI (wasi.h, wasm.h) ----

// sbx_wasi_forward calls the function export name of inst (the WASI shim)
// from inside a host function, in the caller's context ctx, with n i32 or
// i64 arguments (is64[i] says which) and one i32 result. It returns 0 when
// there is no such function, 1 when the call was made (*err or *trap set
// if it failed). One cgo call, where wasmtime-go's Func.Call fetches and
// frees the function's type and converts every value on its own.
static int sbx_wasi_forward(wasmtime_context_t *ctx, const wasmtime_instance_t *inst, const char *name, size_t name_len,
                            const uint8_t *is64, const int64_t *args, size_t n, int32_t *result,
                            wasmtime_error_t **err, wasm_trap_t **trap) {
	wasmtime_extern_t item;
	if (n > SBX_MAX_VALS || !wasmtime_instance_export_get(ctx, inst, name, name_len, &item))
		return 0;
	if (item.kind != SBX_EXTERN_FUNC) {
		wasmtime_extern_delete(&item);
		return 0;
	}
	wasmtime_val_t vals[SBX_MAX_VALS], res;
	for (size_t i = 0; i < n; i++) {
		vals[i].kind = is64[i] ? 1 : 0; // WASMTIME_I64 : WASMTIME_I32
		if (is64[i])
			vals[i].of.i64 = args[i];
		else
			vals[i].of.i32 = (int32_t)args[i];
	}
	*trap = NULL;
	*err = wasmtime_func_call(ctx, &item.of.func, vals, n, &res, 1, trap);
	if (!*err && !*trap)
		*result = res.of.i32;
	wasmtime_extern_delete(&item);
	return 1;
}

typedef struct wasi_config_t wasi_config_t;
typedef struct wasm_byte_vec_t {
	size_t size;
	char *data;
} wasm_byte_vec_t;

extern void wasm_byte_vec_new(wasm_byte_vec_t *out, size_t, const char[]);
extern void wasi_config_set_stdin_bytes(wasi_config_t *config, wasm_byte_vec_t *binary);
extern void wasi_config_set_stdout_custom(
    wasi_config_t *config,
    ptrdiff_t (*callback)(void *, const unsigned char *, size_t), void *data,
    void (*finalizer)(void *));
extern void wasi_config_set_stderr_custom(
    wasi_config_t *config,
    ptrdiff_t (*callback)(void *, const unsigned char *, size_t), void *data,
    void (*finalizer)(void *));

// Implemented in Go (sbxWasiWrite below).
extern ptrdiff_t sbxWasiWrite(uintptr_t sink, int stream, unsigned char *buf, size_t len);

static ptrdiff_t sbx_stdout(void *sink, const unsigned char *buf, size_t len) {
	return sbxWasiWrite((uintptr_t)sink, 1, (unsigned char *)buf, len);
}

static ptrdiff_t sbx_stderr(void *sink, const unsigned char *buf, size_t len) {
	return sbxWasiWrite((uintptr_t)sink, 2, (unsigned char *)buf, len);
}

// sbx_wasi_stdio makes stdin the n bytes at p (copied) and sends every write
// to stdout and stderr to the Go sink behind the handle.
static void sbx_wasi_stdio(wasi_config_t *c, const char *p, size_t n, uintptr_t sink) {
	static const char none = 0;
	wasm_byte_vec_t in;
	wasm_byte_vec_new(&in, n, n ? p : &none);
	wasi_config_set_stdin_bytes(c, &in); // takes ownership of in's bytes
	wasi_config_set_stdout_custom(c, sbx_stdout, (void *)sink, NULL);
	wasi_config_set_stderr_custom(c, sbx_stderr, (void *)sink, NULL);
}

// ---- interrupting a blocked open (wasi_open.go) ----

static void sbx_interrupt_handler(int sig) { (void)sig; }

// sbx_interrupt_signal installs, once, a handler that does nothing for a
// real-time signal no one else uses, without SA_RESTART: a thread that
// gets it while blocked in an interruptible system call (opening a FIFO)
// returns from it with EINTR. Returns the signal, or -1.
static int sbx_interrupt_signal(void) {
	int sig = SIGRTMIN + 6;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = sbx_interrupt_handler;
	sa.sa_flags = SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	return sigaction(sig, &sa, NULL) == 0 ? sig : -1;
}

// ---- the pooling instance allocator (config.h) ----

typedef struct wasm_config_t wasm_config_t;
typedef struct wasmtime_pooling_allocation_config_t wasmtime_pooling_allocation_config_t;

extern void wasmtime_config_memory_reservation_set(wasm_config_t *, uint64_t);
extern void wasmtime_config_memory_guard_size_set(wasm_config_t *, uint64_t);
extern wasmtime_pooling_allocation_config_t *wasmtime_pooling_allocation_config_new(void);
extern void wasmtime_pooling_allocation_config_delete(wasmtime_pooling_allocation_config_t *);
extern void wasmtime_pooling_allocation_config_max_unused_warm_slots_set(wasmtime_pooling_allocation_config_t *, uint32_t);
extern void wasmtime_pooling_allocation_config_decommit_batch_size_set(wasmtime_pooling_allocation_config_t *, size_t);
extern void wasmtime_pooling_allocation_config_linear_memory_keep_resident_set(wasmtime_pooling_allocation_config_t *, size_t);
extern void wasmtime_pooling_allocation_config_table_keep_resident_set(wasmtime_pooling_allocation_config_t *, size_t);
extern void wasmtime_pooling_allocation_config_total_memories_set(wasmtime_pooling_allocation_config_t *, uint32_t);
extern void wasmtime_pooling_allocation_config_total_tables_set(wasmtime_pooling_allocation_config_t *, uint32_t);
extern void wasmtime_pooling_allocation_config_total_stacks_set(wasmtime_pooling_allocation_config_t *, uint32_t);
extern void wasmtime_pooling_allocation_config_total_core_instances_set(wasmtime_pooling_allocation_config_t *, uint32_t);
extern void wasmtime_pooling_allocation_config_total_gc_heaps_set(wasmtime_pooling_allocation_config_t *, uint32_t);
extern void wasmtime_pooling_allocation_config_total_component_instances_set(wasmtime_pooling_allocation_config_t *, uint32_t);
extern void wasmtime_pooling_allocation_config_max_core_instance_size_set(wasmtime_pooling_allocation_config_t *, size_t);
extern void wasmtime_pooling_allocation_config_max_tables_per_module_set(wasmtime_pooling_allocation_config_t *, uint32_t);
extern void wasmtime_pooling_allocation_config_table_elements_set(wasmtime_pooling_allocation_config_t *, size_t);
extern void wasmtime_pooling_allocation_config_max_memories_per_module_set(wasmtime_pooling_allocation_config_t *, uint32_t);
extern void wasmtime_pooling_allocation_config_max_memory_size_set(wasmtime_pooling_allocation_config_t *, size_t);
extern void wasmtime_pooling_allocation_strategy_set(wasm_config_t *, const wasmtime_pooling_allocation_config_t *);

// sbx_pool is the pooling allocator's settings, as poolSettings (pool.go)
// chose them.
typedef struct {
	uint32_t total_core_instances, total_memories, total_tables, total_gc_heaps;
	uint32_t max_memories_per_module, max_tables_per_module, max_unused_warm_slots;
	uint64_t table_elements, max_memory_size, max_core_instance_size;
	uint64_t linear_memory_keep_resident, table_keep_resident;
} sbx_pool;

// sbx_pool_set makes c allocate instances, memories and tables from a
// pool of p's size.
static int sbx_pool_set(wasm_config_t *c, const sbx_pool *p) {
	wasmtime_pooling_allocation_config_t *pc = wasmtime_pooling_allocation_config_new();
	if (!pc)
		return 0;
	wasmtime_pooling_allocation_config_total_core_instances_set(pc, p->total_core_instances);
	wasmtime_pooling_allocation_config_total_memories_set(pc, p->total_memories);
	wasmtime_pooling_allocation_config_total_tables_set(pc, p->total_tables);
	wasmtime_pooling_allocation_config_total_gc_heaps_set(pc, p->total_gc_heaps);
	wasmtime_pooling_allocation_config_total_stacks_set(pc, 0);              // no async: no fiber stacks
	wasmtime_pooling_allocation_config_total_component_instances_set(pc, 0); // no components
	wasmtime_pooling_allocation_config_max_memories_per_module_set(pc, p->max_memories_per_module);
	wasmtime_pooling_allocation_config_max_tables_per_module_set(pc, p->max_tables_per_module);
	wasmtime_pooling_allocation_config_table_elements_set(pc, (size_t)p->table_elements);
	wasmtime_pooling_allocation_config_max_memory_size_set(pc, (size_t)p->max_memory_size);
	wasmtime_pooling_allocation_config_max_core_instance_size_set(pc, (size_t)p->max_core_instance_size);
	wasmtime_pooling_allocation_config_linear_memory_keep_resident_set(pc, (size_t)p->linear_memory_keep_resident);
	wasmtime_pooling_allocation_config_table_keep_resident_set(pc, (size_t)p->table_keep_resident);
	wasmtime_pooling_allocation_config_max_unused_warm_slots_set(pc, p->max_unused_warm_slots);
	wasmtime_pooling_allocation_config_decommit_batch_size_set(pc, 1);
	wasmtime_pooling_allocation_strategy_set(c, pc); // copies pc
	wasmtime_pooling_allocation_config_delete(pc);
	return 1;
}
*/
import "C"

import (
	"errors"
	"runtime"
	"runtime/cgo"
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

// wasiSink receives a guest's writes to stdout (stream 1) and stderr
// (stream 2). write runs on the guest's thread, inside the guest's fd_write;
// p is only valid during the call.
type wasiSink interface {
	write(stream int, p []byte)
}

// setWasiStdio gives cfg stdin (copied) and routes stdout and stderr to the
// sink behind h, a cgo.Handle of a wasiSink that must stay valid until the
// store the config is attached to has been closed.
func setWasiStdio(cfg *wasmtime.WasiConfig, stdin []byte, h cgo.Handle) {
	var p *C.char
	if len(stdin) > 0 {
		p = (*C.char)(unsafe.Pointer(&stdin[0]))
	}
	C.sbx_wasi_stdio(wasiConfigPtr(cfg), p, C.size_t(len(stdin)), C.uintptr_t(h))
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

//export sbxWasiWrite
func sbxWasiWrite(sink C.uintptr_t, stream C.int, buf *C.uchar, n C.size_t) C.ptrdiff_t {
	s := cgo.Handle(sink).Value().(wasiSink)
	s.write(int(stream), unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n)))
	return C.ptrdiff_t(n) // bytes past the output budget are dropped, not refused
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
