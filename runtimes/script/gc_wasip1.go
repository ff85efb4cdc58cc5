//go:build wasip1

package script

import (
	"runtime/debug"
	"unsafe"
)

// heapBase is where the Go heap begins in linear memory, rounded down to
// its 4 MiB arenas: below it lie the module's data and the runtime's
// static structures, which the cap counts and the memory limit does not.
var heapBase = func() uintptr {
	p := new([64]byte)
	heapProbe = p
	const arena = 4 << 20
	return uintptr(unsafe.Pointer(p)) &^ (arena - 1)
}()

var heapProbe *[64]byte // keeps the probe on the heap

func fitCollector(capBytes uint64) {
	below := uint64(heapBase) + collectorSlack
	if capBytes <= below+16<<20 {
		// Too little room for a larger heap goal to pay: keep Go's
		// default collector.
		return
	}
	debug.SetMemoryLimit(int64(capBytes - below))
	debug.SetGCPercent(gcPercent)
}
