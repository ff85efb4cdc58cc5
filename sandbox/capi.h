// The C side of capi.go: wasmtime's C API as far as sandboxd reaches past
// wasmtime-go, and the small C functions capi.c defines on it.
//
// The wasmtime symbols are declared here rather than included because
// wasmtime-go's headers live in its module directory; libwasmtime.a is
// linked by wasmtime-go's own cgo flags. capi_test.go, capi_call_test.go
// and capi_pool_test.go compile these declarations against the pinned
// headers and fail loudly when they disagree.

#ifndef SANDBOXD_CAPI_H
#define SANDBOXD_CAPI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// ---- the fence: deadline and cancel on every epoch tick (store.h, error.h) ----

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

sbx_fence *sbx_fence_new(int64_t timeout_ns);
void sbx_fence_install(wasmtime_store_t *store, sbx_fence *f);
void sbx_fence_cancel(sbx_fence *f);
void sbx_fence_rearm(sbx_fence *f, int64_t timeout_ns);
int64_t sbx_fence_remaining_ns(sbx_fence *f);

// ---- fuel charged by host functions (store.h, error.h) ----

extern wasmtime_error_t *wasmtime_context_get_fuel(const wasmtime_context_t *context, uint64_t *fuel);
extern wasmtime_error_t *wasmtime_context_set_fuel(wasmtime_context_t *store, uint64_t fuel);
extern void wasmtime_error_delete(wasmtime_error_t *error);

int sbx_consume_fuel(wasmtime_context_t *ctx, uint64_t n);

// ---- calling an export in one cgo call (instance.h, func.h, val.h, extern.h) ----
//
// The three types are declared as in the pinned headers (capi_call_test.go
// compiles the headers and compares the layouts); wasmtime_extern_t's
// union is given room to spare, since only its kind and func member are
// read.

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

typedef struct wasmtime_memory {
	struct {
		uint64_t store_id;
		uint32_t __private1;
	};
	uint32_t __private2;
} wasmtime_memory_t;

// wasmtime_extern_t is the headers' size exactly (the union's largest
// member is 24 bytes): sbx_instantiate passes an array of them.
typedef struct wasmtime_extern {
	uint8_t kind;
	union {
		wasmtime_func_t func;
		wasmtime_memory_t memory;
		uint8_t any[24];
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

int sbx_call_in(wasmtime_context_t *ctx, const wasmtime_instance_t *inst, const char *name, size_t name_len,
                sbx_vals *v, size_t nargs, size_t nres, wasmtime_error_t **err, wasm_trap_t **trap);
int sbx_export_func(wasmtime_context_t *ctx, const wasmtime_instance_t *inst, const char *name, size_t name_len,
                    wasmtime_func_t *out);

// ---- a host function's out-of-fuel trap (trap.h) ----

typedef uint8_t wasmtime_trap_code_t;

extern wasm_trap_t *wasmtime_trap_new_code(wasmtime_trap_code_t code);

// ---- WASI (wasi.h, wasm.h) ----

typedef struct wasi_config_t wasi_config_t;
typedef struct wasm_byte_vec_t {
	size_t size;
	char *data;
} wasm_byte_vec_t;

extern void wasm_byte_vec_new(wasm_byte_vec_t *out, size_t, const char[]);
extern void wasi_config_set_stdin_bytes(wasi_config_t *config, wasm_byte_vec_t *binary);
int sbx_wasi_forward(wasmtime_context_t *ctx, const wasmtime_instance_t *inst, const char *name, size_t name_len,
                     const uint8_t *is64, const int64_t *args, size_t n, int32_t *result,
                     wasmtime_error_t **err, wasm_trap_t **trap);
void sbx_wasi_stdin(wasi_config_t *c, const char *p, size_t n);

// ---- interrupting a blocked open (wasi_open.go) ----

int sbx_interrupt_signal(void);

// ---- instantiating in one call (extism_link.go) ----
//
// A store's module is instantiated with every import resolved in C: the
// engine's linkers (host functions defined once per engine, WASI), the
// plugin kernel's exports (the kernel instantiated first, from an
// InstancePre made once per engine), and functions Go made for the store.

typedef struct wasmtime_linker wasmtime_linker_t;
typedef struct wasmtime_module wasmtime_module_t;
typedef struct wasmtime_instance_pre wasmtime_instance_pre_t;

extern bool wasmtime_linker_get(const wasmtime_linker_t *linker, wasmtime_context_t *store, const char *module, size_t module_len, const char *name, size_t name_len, wasmtime_extern_t *item);
extern wasmtime_error_t *wasmtime_linker_instantiate_pre(const wasmtime_linker_t *linker, const wasmtime_module_t *module, wasmtime_instance_pre_t **instance_pre);
extern void wasmtime_instance_pre_delete(wasmtime_instance_pre_t *instance_pre);
extern wasmtime_error_t *wasmtime_instance_pre_instantiate(const wasmtime_instance_pre_t *instance_pre, wasmtime_context_t *store, wasmtime_instance_t *instance, wasm_trap_t **trap_ptr);
extern wasmtime_error_t *wasmtime_instance_new(wasmtime_context_t *store, const wasmtime_module_t *module, const wasmtime_extern_t *imports, size_t nimports, wasmtime_instance_t *instance, wasm_trap_t **trap);

// Where an import comes from.
enum { SBX_EXTERN_GLOBAL = 1, SBX_EXTERN_TABLE = 2, SBX_EXTERN_MEMORY = 3 };

enum { SBX_FROM_GIVEN = 0, SBX_FROM_KERNEL = 1, SBX_FROM_HOST = 2, SBX_FROM_WASI = 3 };

// sbx_link is what sbx_instantiate made, or why it failed: missing is the
// import no definition was found for (-1: none), err and trap a failed
// instantiation's.
typedef struct {
	wasmtime_instance_t kernel;
	wasmtime_memory_t kernel_memory;
	wasmtime_instance_t instance;
	int32_t missing;
	wasmtime_error_t *err;
	wasm_trap_t *trap;
} sbx_link;

int sbx_instantiate(wasmtime_context_t *ctx, const wasmtime_instance_pre_t *kernel, const wasmtime_linker_t *host,
                    const wasmtime_linker_t *wasi, const wasmtime_module_t *module, size_t n, const uint8_t *from,
                    const char *names, const uint32_t *ends, const wasmtime_func_t *given, sbx_link *out);
typedef struct wasmtime_caller wasmtime_caller_t;

extern bool wasmtime_caller_export_get(wasmtime_caller_t *caller, const char *name, size_t name_len, wasmtime_extern_t *item);

int sbx_caller_memory(wasmtime_caller_t *caller, const char *name, size_t name_len, wasmtime_memory_t *out);
int sbx_export_of(wasmtime_context_t *ctx, const wasmtime_instance_t *inst, const char *name, size_t name_len,
                  uint8_t kind, wasmtime_extern_t *out);

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

int sbx_pool_set(wasm_config_t *c, const sbx_pool *p);

#endif
