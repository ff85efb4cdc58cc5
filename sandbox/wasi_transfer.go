package sandbox

// Transfers of guest-sized data in bounded slices. fd_read, fd_write,
// fd_pread and fd_pwrite are priced for their whole buffer (wasi_fuel.go),
// but wasmtime does each as one host call: an fd_write of 320 MiB ignored
// a 100 ms deadline for seconds (a cancel waited as long) and went through
// a host buffer as large as the transfer, outside the memory cap. So a
// transfer larger than a slice is forwarded a slice at a time, and the
// run's deadline and cancellation are checked between slices: every host
// call returns within a slice's work of the fence. Short reads and writes
// are what WASI allows (and what every libc and runtime loops over); a
// transfer is only cut short when the guest is stopped, so a guest that
// ignores nwritten loses nothing in a run that completes. random_get,
// ours entirely, fills its buffer a slice at a time in the same way.

import (
	"encoding/binary"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// transferSlice bounds the bytes one forwarded call moves, and so the
// host buffer wasmtime sizes for it and the work between two checks of
// the fence.
const transferSlice = 64 << 10

// transferArgs are the positions of a transfer's arguments: the iovec
// array and its length are always 1 and 2; pread and pwrite take an offset
// (an i64) before the result pointer.
type transferArgs struct{ offset, result int }

var transfers = map[string]transferArgs{
	"fd_read":   {offset: -1, result: 3},
	"fd_write":  {offset: -1, result: 3},
	"fd_pread":  {offset: 3, result: 4},
	"fd_pwrite": {offset: 3, result: 4},
}

// transfer forwards shadow i (one of transfers), already priced, in
// slices. wasmtime moves only the first non-empty buffer of an iovec
// list, so that is the one sliced: each slice is forwarded as a list of
// one iovec, with a count for wasmtime to write, both in 12 bytes of the
// guest's memory outside the slice (scratchIovec), saved before and put
// back after. The guest's thread is inside this call, so nothing of the
// guest sees it, and neither the guest's own list nor its count is
// touched before the end (either may lie inside the buffer: a count
// written there after one slice would be sent as data by the next).
func (s *store) transfer(i int, c *wasmtime.Caller, a []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	at := transfers[wasiShadows[i].name]
	mem := s.wasi.memory(c)
	iovs, n := u32(a, 1), u32(a, 2)
	if iovs%4 != 0 || !inBounds(mem, iovs, n*8) {
		return s.forward(c, i, a) // wasmtime traps on the list, moving nothing
	}
	var buf, size uint64
	for k := uint64(0); k < n && size == 0; k++ {
		e := mem[iovs+k*8:]
		buf, size = uint64(binary.LittleEndian.Uint32(e)), uint64(binary.LittleEndian.Uint32(e[4:]))
	}
	if wasiShadows[i].name == "fd_write" {
		if stream := s.wasi.stdio.stream(uint32(u32(a, 0))); stream != 0 {
			return s.writeStdio(c, stream, a)
		}
	}
	if size <= transferSlice {
		return s.forward(c, i, a)
	}
	args := append([]wasmtime.Val(nil), a...)
	args[2] = wasmtime.ValI32(1)
	result := u32(a, at.result)
	var done uint64
	for done < size {
		lo, piece := buf+done, min(size-done, transferSlice)
		mem = s.wasi.memory(c)
		iov := scratchIovec(uint64(len(mem)), lo, lo+piece)
		var saved [scratchBytes]byte
		copy(saved[:], mem[iov:iov+scratchBytes])
		binary.LittleEndian.PutUint32(mem[iov:], uint32(lo))
		binary.LittleEndian.PutUint32(mem[iov+4:], uint32(piece))
		args[1] = wasmtime.ValI32(int32(uint32(iov)))
		args[at.result] = wasmtime.ValI32(int32(uint32(iov + 8)))
		if at.offset >= 0 {
			args[at.offset] = wasmtime.ValI64(a[at.offset].I64() + int64(done))
		}
		res, trap := s.forward(c, i, args)
		if trap != nil {
			return nil, trap
		}
		mem = s.wasi.memory(c)
		e := res[0].I32()
		moved := uint64(binary.LittleEndian.Uint32(mem[iov+8:]))
		copy(mem[iov:iov+scratchBytes], saved[:])
		if e != errnoSuccess {
			if done == 0 {
				return errno(e)
			}
			break // what moved is the result; the error, if it persists, is the next call's
		}
		done += moved
		if moved < piece {
			break
		}
		if stop := s.fenceStop(); stop != stopNone && done < size {
			return nil, s.stopGuest(stop)
		}
	}
	binary.LittleEndian.PutUint32(s.wasi.memory(c)[result:], uint32(done))
	return errno(errnoSuccess)
}

// scratchBytes is the scratch a slice is forwarded with: an iovec (8
// bytes) and the count wasmtime writes (4).
const scratchBytes = 12

// scratchIovec is a 4-aligned address of scratchBytes in a memory of
// memLen bytes outside [lo, hi), a slice of at most transferSlice bytes
// of a buffer longer than that: there is always room on one side
// (memories are whole 64 KiB pages).
func scratchIovec(memLen, lo, hi uint64) uint64 {
	if after := (hi + 3) &^ 3; after+scratchBytes <= memLen {
		return after
	}
	return (lo - scratchBytes) &^ 3
}

// fenceStop says whether the run's deadline has passed or it was
// cancelled, for host work that checks between slices (the epoch callback
// cannot run while the guest's thread is in a host call).
func (s *store) fenceStop() stopReason {
	if s.wasi != nil && s.wasi.ctx.Err() != nil {
		return stopCancelled
	}
	if s.fence.remaining() <= 0 {
		return stopTimedOut
	}
	return stopNone
}

// stopGuest stops the guest from inside a host function for stop, and
// records it so the run is classified as if the epoch callback had.
func (s *store) stopGuest(stop stopReason) *wasmtime.Trap {
	s.fence.stopBy(stop)
	if stop == stopCancelled {
		return wasmtime.NewTrap("sandboxd: run cancelled")
	}
	return wasmtime.NewTrap("sandboxd: deadline exceeded")
}

// fillSliced fills dst a slice at a time with fill, asking stopped
// between slices; it returns why it stopped early, or stopNone once dst
// is full.
func fillSliced(dst []byte, fill func([]byte) error, stopped func() stopReason) (stopReason, error) {
	for len(dst) > 0 {
		n := min(len(dst), transferSlice)
		if err := fill(dst[:n]); err != nil {
			return stopNone, err
		}
		dst = dst[n:]
		if len(dst) > 0 {
			if stop := stopped(); stop != stopNone {
				return stop, nil
			}
		}
	}
	return stopNone, nil
}
