//go:build wasip1

package plugin

import "unsafe"

// The Go runtime writes its own crash report — "fatal error: out of
// memory" and a trace of every goroutine, with module paths, versions
// and addresses, kilobytes of it — to fd 2, which is also the snippet's
// stderr: the user would read the guest's internals in the snippet's
// output. A fence is what ends such a guest (the memory cap refusing the
// heap's growth), and the host names it, so the runtime's own report
// carries nothing the caller needs. debug.SetTraceback("none") does not
// silence it: a throw of the runtime's own always prints its traces
// (runtime.gotraceback), and SetTraceback cannot go below the
// environment's level anyway. runtime.overrideWrite is the hook the
// runtime keeps for redirecting its writes (go.dev/issue/67401): it takes
// every write of the runtime's own, and nothing the program writes
// through os (the snippet's output goes through package os, on the
// syscall path).
//
//go:linkname overrideWrite runtime.overrideWrite
var overrideWrite func(fd uintptr, p unsafe.Pointer, n int32) int32

func init() { overrideWrite = discardWrite }

// discardWrite claims the write done. It may run with no stack to grow
// (a throw on the system stack).
//
//go:nosplit
func discardWrite(_ uintptr, _ unsafe.Pointer, n int32) int32 { return n }
