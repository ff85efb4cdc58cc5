//go:build wasip1

package script

import (
	"runtime/debug"
	"unsafe"
)

// gcPercent is the guests' GOGC once they know their cap: the heap may
// grow to five times what the last collection kept before the next one
// (at least 16 MB), within the memory limit.
const gcPercent = 400

// heapArenaBytes is the Go runtime's heap arena on wasm: the heap is made
// of arenas of 512 KiB, each aligned to its size.
const heapArenaBytes = 512 << 10

// heapBase is where the Go heap begins in linear memory, rounded down to
// its arena: below it lie the module's data and the runtime's static
// structures, which the cap counts and the memory limit does not.
var heapBase = func() uintptr {
	p := new([64]byte)
	heapProbe = p
	return uintptr(unsafe.Pointer(p)) &^ (heapArenaBytes - 1)
}()

var heapProbe *[64]byte // keeps the probe on the heap

func fitCollector(capBytes uint64) {
	limit, raise := CollectorLimit(capBytes, uint64(heapBase))
	if limit == 0 {
		return
	}
	debug.SetMemoryLimit(int64(limit))
	if raise {
		debug.SetGCPercent(gcPercent)
	}
}
