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

/*
#include <stdint.h>
#include <stdlib.h>
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
*/
import "C"

import (
	"errors"
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

// reason reports why the callback stopped the guest. Only meaningful after
// the guest returned control to the host (the store's thread wrote it).
func (f *fence) reason() stopReason { return stopReason(f.c.reason) }

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
