// The C functions capi.go calls (declared in capi.h). Plain C where Go would
// cost a cgo call per tick or a dozen per call: see capi.go for why each
// exists.

#define _GNU_SOURCE // SIGRTMIN, sigaction
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capi.h"

// ---- the fence ----

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

sbx_fence *sbx_fence_new(int64_t timeout_ns) {
	sbx_fence *f = calloc(1, sizeof(sbx_fence));
	if (f) f->deadline_ns = sbx_now_ns() + timeout_ns;
	return f;
}

void sbx_fence_install(wasmtime_store_t *store, sbx_fence *f) {
	wasmtime_store_epoch_deadline_callback(store, sbx_on_epoch, f, NULL);
}

void sbx_fence_cancel(sbx_fence *f) {
	__atomic_store_n(&f->stop, SBX_CANCELLED, __ATOMIC_RELEASE);
}

// sbx_fence_rearm starts a new call on a long-lived store: no stop
// requested, no reason recorded, a fresh deadline. Only between calls (the
// store's thread is not in the guest).
void sbx_fence_rearm(sbx_fence *f, int64_t timeout_ns) {
	__atomic_store_n(&f->stop, SBX_RUNNING, __ATOMIC_RELEASE);
	f->reason = SBX_RUNNING;
	f->deadline_ns = sbx_now_ns() + timeout_ns;
}

int64_t sbx_fence_remaining_ns(sbx_fence *f) {
	return f->deadline_ns - sbx_now_ns();
}

// ---- fuel charged by host functions ----

// sbx_consume_fuel takes n units from the fuel left in ctx (the caller's
// context, inside a host function): 1 if there were enough; 0 if not, and
// then none is left; -1 if fuel is not enabled.
int sbx_consume_fuel(wasmtime_context_t *ctx, uint64_t n) {
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

// ---- calling an export in one cgo call ----
//
// wasmtime-go's Instance.GetFunc and Func.Call cost about a dozen cgo calls
// and as many allocations with finalizers per call (the function's type is
// fetched and freed every time). sbx_call_in does the lookup, the call and
// the conversions in one.

// sbx_call_in calls the function export name of inst in ctx (a store's, or
// a host function's caller's: a nested call) with nargs values of v and
// writes nres results back into v. It returns 0 when there is no such
// function, 1 when the call was made (*err or *trap set if it failed).
int sbx_call_in(wasmtime_context_t *ctx, const wasmtime_instance_t *inst, const char *name, size_t name_len,
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
int sbx_export_func(wasmtime_context_t *ctx, const wasmtime_instance_t *inst, const char *name, size_t name_len,
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


// ---- WASI ----

// sbx_wasi_forward calls the function export name of inst (the WASI shim)
// from inside a host function, in the caller's context ctx, with n i32 or
// i64 arguments (is64[i] says which) and one i32 result. It returns 0 when
// there is no such function, 1 when the call was made (*err or *trap set
// if it failed). One cgo call, where wasmtime-go's Func.Call fetches and
// frees the function's type and converts every value on its own.
int sbx_wasi_forward(wasmtime_context_t *ctx, const wasmtime_instance_t *inst, const char *name, size_t name_len,
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

// sbx_wasi_stdin makes stdin the n bytes at p (copied). stdout and stderr
// stay wasmtime's default sinks: the guest's writes to them are answered
// in Go (wasi_stdio.go) and never reach wasmtime. A custom stream there
// cost every WASI store two tasks spawned on wasmtime's Tokio runtime (and
// the wake-ups of its worker threads) at its creation and two at its end:
// 15-20 µs of a C guest's one-shot run.
void sbx_wasi_stdin(wasi_config_t *c, const char *p, size_t n) {
	static const char none = 0;
	wasm_byte_vec_t in;
	wasm_byte_vec_new(&in, n, n ? p : &none);
	wasi_config_set_stdin_bytes(c, &in); // takes ownership of in's bytes
}

// ---- interrupting a blocked open (wasi_open.go) ----

static void sbx_interrupt_handler(int sig) { (void)sig; }

// sbx_interrupt_signal installs, once, a handler that does nothing for a
// real-time signal no one else uses, without SA_RESTART: a thread that
// gets it while blocked in an interruptible system call (opening a FIFO)
// returns from it with EINTR. Returns the signal, or -1.
int sbx_interrupt_signal(void) {
	int sig = SIGRTMIN + 6;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = sbx_interrupt_handler;
	sa.sa_flags = SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	return sigaction(sig, &sa, NULL) == 0 ? sig : -1;
}

// ---- instantiating in one call (extism_link.go) ----

// sbx_string is string k of a list laid out as names, each ending at
// ends[k].
static void sbx_string(const char *names, const uint32_t *ends, size_t k, const char **s, size_t *len) {
	uint32_t begin = k ? ends[k - 1] : 0;
	*s = names + begin;
	*len = ends[k] - begin;
}

// sbx_instantiate instantiates module in ctx with its n imports resolved
// here: import i (whose module and name are strings 2i and 2i+1 of names)
// is given[i] (SBX_FROM_GIVEN), the kernel's export of its name
// (SBX_FROM_KERNEL), or the host or WASI linker's definition. With kernel
// set, the kernel is instantiated first, and out receives it and its
// memory. It returns 1 on success; 0 with out->missing, out->err or
// out->trap set otherwise. wasmtime type-checks every import.
int sbx_instantiate(wasmtime_context_t *ctx, const wasmtime_instance_pre_t *kernel, const wasmtime_linker_t *host,
                    const wasmtime_linker_t *wasi, const wasmtime_module_t *module, size_t n, const uint8_t *from,
                    const char *names, const uint32_t *ends, const wasmtime_func_t *given, sbx_link *out) {
	out->missing = -1;
	out->err = NULL;
	out->trap = NULL;
	if (kernel) {
		out->err = wasmtime_instance_pre_instantiate(kernel, ctx, &out->kernel, &out->trap);
		if (out->err || out->trap)
			return 0;
		wasmtime_extern_t mem;
		if (sbx_export_of(ctx, &out->kernel, "memory", 6, SBX_EXTERN_MEMORY, &mem) == 0) {
			out->err = wasmtime_error_new("sandboxd: the plugin kernel exports no memory");
			return 0;
		}
		out->kernel_memory = mem.of.memory;
	}
	wasmtime_extern_t local[32];
	wasmtime_extern_t *ext = local;
	if (n > sizeof local / sizeof local[0]) {
		ext = calloc(n, sizeof *ext);
		if (!ext) {
			out->err = wasmtime_error_new("sandboxd: out of memory linking the module");
			return 0;
		}
	}
	size_t got = 0;
	for (; got < n; got++) {
		const char *mod, *name;
		size_t mod_len, name_len;
		sbx_string(names, ends, 2 * got, &mod, &mod_len);
		sbx_string(names, ends, 2 * got + 1, &name, &name_len);
		bool found = false;
		switch (from[got]) {
		case SBX_FROM_GIVEN:
			ext[got].kind = SBX_EXTERN_FUNC;
			ext[got].of.func = given[got];
			found = true;
			break;
		case SBX_FROM_KERNEL:
			found = kernel && wasmtime_instance_export_get(ctx, &out->kernel, name, name_len, &ext[got]);
			break;
		case SBX_FROM_HOST:
			found = host && wasmtime_linker_get(host, ctx, mod, mod_len, name, name_len, &ext[got]);
			break;
		case SBX_FROM_WASI:
			found = wasi && wasmtime_linker_get(wasi, ctx, mod, mod_len, name, name_len, &ext[got]);
			break;
		}
		if (!found) {
			out->missing = (int32_t)got;
			break;
		}
	}
	if (out->missing < 0)
		out->err = wasmtime_instance_new(ctx, module, ext, n, &out->instance, &out->trap);
	for (size_t i = 0; i < got; i++)
		if (from[i] != SBX_FROM_GIVEN)
			wasmtime_extern_delete(&ext[i]);
	if (ext != local)
		free(ext);
	return out->missing < 0 && !out->err && !out->trap;
}

// sbx_export_of writes the export name of inst to *out if it is of kind
// (a function, global, table or memory: nothing to free) and returns 1;
// 0 if inst has no such export.
int sbx_export_of(wasmtime_context_t *ctx, const wasmtime_instance_t *inst, const char *name, size_t name_len,
                  uint8_t kind, wasmtime_extern_t *out) {
	if (!wasmtime_instance_export_get(ctx, inst, name, name_len, out))
		return 0;
	if (out->kind == kind && kind <= SBX_EXTERN_MEMORY)
		return 1;
	wasmtime_extern_delete(out);
	return 0;
}

// sbx_caller_memory writes the memory export name of a host function's
// caller to *out: 1 if it has one, 0 if not.
int sbx_caller_memory(wasmtime_caller_t *caller, const char *name, size_t name_len, wasmtime_memory_t *out) {
	wasmtime_extern_t item;
	if (!wasmtime_caller_export_get(caller, name, name_len, &item))
		return 0;
	int ok = item.kind == SBX_EXTERN_MEMORY;
	if (ok)
		*out = item.of.memory;
	wasmtime_extern_delete(&item);
	return ok;
}

// ---- the pooling instance allocator (config.h) ----

// sbx_pool_set makes c allocate instances, memories and tables from a
// pool of p's size.
int sbx_pool_set(wasm_config_t *c, const sbx_pool *p) {
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
