package sandbox

import (
	"encoding/binary"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// The guest's stdout and stderr are ours: every fd_write to the
// descriptor that holds one (fd 1 and 2 as the guest starts, wherever
// fd_renumber moves them) goes to the store's output sink (writeStdio).
// wasmtime's stdout and stderr are its default sinks and never see a byte
// (sbx_wasi_stdin in capi.c says why); its descriptor table still answers
// every other call on those descriptors (fd_fdstat_get, fd_close, ...).

// stdioFds are the descriptors holding the guest's stdout (0) and stderr
// (1), each noStdio once closed or renumbered over.
type stdioFds struct {
	fd     [2]uint32
	placed bool // fd set: the zero value means fd 1 and 2
}

const noStdio = ^uint32(0)

func (f *stdioFds) place() {
	if !f.placed {
		f.fd, f.placed = [2]uint32{1, 2}, true
	}
}

// stream is the stream (1 stdout, 2 stderr) descriptor fd holds, or 0.
func (f *stdioFds) stream(fd uint32) int {
	f.place()
	for k, d := range f.fd {
		if d == fd && d != noStdio {
			return k + 1
		}
	}
	return 0
}

// closed records that fd was closed.
func (f *stdioFds) closed(fd uint32) {
	f.place()
	for k := range f.fd {
		if f.fd[k] == fd {
			f.fd[k] = noStdio
		}
	}
}

// renumbered records a successful fd_renumber(from, to): to's stream, if
// any, is closed, and from's now lives at to.
func (f *stdioFds) renumbered(from, to uint32) {
	if from == to {
		return
	}
	f.closed(to)
	for k := range f.fd {
		if f.fd[k] == from {
			f.fd[k] = to
		}
	}
}

// writeStdio is fd_write to the guest's stdout or stderr (stream), already
// priced (iovFuel checked every buffer is in memory): every buffer goes to
// the output sink, a slice at a time, the fence checked between slices,
// and the count to the guest. A result pointer wasmtime would refuse is
// left to wasmtime, for its own trap, once the bytes are in the sink (as
// wasmtime writes them before it stores the count).
func (s *store) writeStdio(c *wasmtime.Caller, stream int, a []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	mem := s.wasi.memory(c)
	iovs, n, result := u32(a, 1), u32(a, 2), u32(a, 3)
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
	if result%4 != 0 || !inBounds(mem, result, 4) {
		return s.forward(c, shadowIndex["fd_write"], a)
	}
	binary.LittleEndian.PutUint32(mem[result:], uint32(total))
	return errno(errnoSuccess)
}
