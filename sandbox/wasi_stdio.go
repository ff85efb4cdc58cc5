package sandbox

import (
	"encoding/binary"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// stdioWrite says whether an fd_write to fd is a write to the guest's
// stdout or stderr, which is ours (writeStdio): those streams end in the
// store's output sink anyway, and wasmtime's way there costs each write
// a round trip through its async runtime (tens of µs). It is not once the
// guest closed fd 1 or 2 or renumbered onto or from it.
func (w *wasiRun) stdioWrite(fd uint32) bool {
	return (fd == 1 || fd == 2) && !w.stdioMoved[fd]
}

// writeStdio is fd_write to stdout or stderr, already priced (iovFuel
// checked every buffer is in memory): every buffer goes to the output
// sink, a slice at a time, the fence checked between slices, and the
// count to the guest. A result pointer wasmtime would refuse is left to
// wasmtime, for its own trap.
func (s *store) writeStdio(c *wasmtime.Caller, a []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	mem := s.wasi.memory(c)
	iovs, n, result := u32(a, 1), u32(a, 2), u32(a, 3)
	if result%4 != 0 || !inBounds(mem, result, 4) {
		return s.forward(c, shadowIndex["fd_write"], a)
	}
	stream := int(u32(a, 0))
	var total uint64
	for k := uint64(0); k < n; k++ {
		e := mem[iovs+k*8:]
		buf, size := uint64(binary.LittleEndian.Uint32(e)), uint64(binary.LittleEndian.Uint32(e[4:]))
		for done := uint64(0); done < size; {
			piece := min(size-done, transferSlice)
			s.wasi.out.write(stream, mem[buf+done:buf+done+piece])
			done += piece
			total += piece
			if stop := s.fenceStop(); stop != stopNone && (done < size || k+1 < n) {
				return nil, s.stopGuest(stop)
			}
		}
	}
	binary.LittleEndian.PutUint32(mem[result:], uint32(total))
	return errno(errnoSuccess)
}

// movedStdio records that fd, if it is 1 or 2, is no longer the guest's
// stdout or stderr as it started (closed, or renumbered onto or from).
func (w *wasiRun) movedStdio(fd uint32) {
	if fd == 1 || fd == 2 {
		w.stdioMoved[fd] = true
	}
}
