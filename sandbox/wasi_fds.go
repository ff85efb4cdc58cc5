package sandbox

// Host descriptors held by WASI guests. Every directory or file a guest
// opens (path_open) is a host descriptor that wasmtime keeps until the
// guest closes it or the store ends; unbounded, one guest looping over
// path_open held ~18,000 within a 1 s deadline, and every other run that
// needed a descriptor (a compile child's pipe, a files tree) then failed.
// So descriptors are counted, per store against Config.MaxOpenFiles (the
// guest sees EMFILE past it) and for the whole engine against what the
// process may open less a reserve kept for the sidecar's own work (the
// guest sees ENFILE past it).
//
// The count is of what wasmtime really holds: preopens, every successful
// path_open, less every successful fd_close of one of those. fd_renumber
// onto an open descriptor drops wasmtime's entry for it without closing
// the host descriptor (it stays held until the store ends), so it is not
// taken off the count.

import (
	"sync/atomic"
	"syscall"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// DefaultMaxOpenFiles is the default of Config.MaxOpenFiles: what a
// process gets by default on Linux (ulimit -n), preopens included.
const DefaultMaxOpenFiles = 1024

// preview1 errnos of the descriptor bounds.
const (
	errnoMfile = 33 // this store's bound
	errnoNfile = 41 // the engine's bound
)

// fdReserve is what the engine keeps of the process's descriptor limit for
// its own work (compile children's pipes, module files, files trees, the
// protocol): a quarter of it, at least 256.
func fdReserve(limit int64) int64 { return max(256, limit/4) }

// guestFDLimit is how many descriptors all guests together may hold: the
// process's soft RLIMIT_NOFILE (which Go raises to the hard limit at
// start) less the reserve.
func guestFDLimit() int64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return 0
	}
	limit := int64(min(rl.Cur, 1<<40))
	return max(0, limit-fdReserve(limit))
}

// fdBudget is the engine's count of descriptors held by guests.
type fdBudget struct {
	limit int64
	held  atomic.Int64
}

func (b *fdBudget) take(n int64) bool {
	if b.held.Add(n) > b.limit {
		b.held.Add(-n)
		return false
	}
	return true
}

func (b *fdBudget) give(n int64) { b.held.Add(-n) }

// GuestDescriptors is how many host descriptors the engine's WASI guests
// hold now.
func (e *Engine) GuestDescriptors() int64 { return e.fds.held.Load() }

// descriptors is one store's count: the host descriptors its guest's
// numbers refer to, and how many wasmtime holds (leaked ones included).
type descriptors struct {
	budget *fdBudget
	max    int64
	host   map[uint32]bool // guest fd numbers that are host descriptors
	held   int64
}

// preopened counts the preopens, fds 3 and up in order (wasmtime numbers
// them as they were configured). It fails when the engine has no room.
func (d *descriptors) preopened(n int) bool {
	if !d.budget.take(int64(n)) {
		return false
	}
	d.held += int64(n)
	d.host = make(map[uint32]bool, n)
	for i := range n {
		d.host[uint32(3+i)] = true
	}
	return true
}

// reserve claims one descriptor for a path_open, or says which bound
// refuses it.
func (d *descriptors) reserve() int32 {
	if d.held >= d.max {
		return errnoMfile
	}
	if !d.budget.take(1) {
		return errnoNfile
	}
	d.held++
	return errnoSuccess
}

func (d *descriptors) unreserve() {
	d.held--
	d.budget.give(1)
}

// closed takes fd off the count if it was a host descriptor.
func (d *descriptors) closed(fd uint32) {
	if d.host[fd] {
		delete(d.host, fd)
		d.unreserve()
	}
}

// renumbered records fd_renumber(from, to): to now refers to from's
// descriptor; to's own, if it had one, is still held.
func (d *descriptors) renumbered(from, to uint32) {
	if from == to {
		return
	}
	fromHost := d.host[from]
	delete(d.host, from)
	if fromHost {
		d.host[to] = true
	} else {
		delete(d.host, to)
	}
}

// release gives everything back (the store has ended).
func (d *descriptors) release() {
	if d.budget != nil {
		d.budget.give(d.held)
		d.held, d.budget = 0, nil
	}
}

// fdSync is fd_sync and fd_datasync: an fsync can take seconds no fence
// reaches (the kernel writes back all the file has dirty: 1.5 GiB took
// 1.4 s past a 20 ms deadline and a cancel), so guests get no
// durability: once the descriptor is known to be one, the call succeeds,
// and the data reaches the disk when the kernel writes it back.
func (s *store) fdSync(_ int, c *wasmtime.Caller, a []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	e, trap := s.borrowScratch(c, fdstatSize, func(scratch uint64) (int32, *wasmtime.Trap) {
		res, trap := s.forward(c, shadowIndex["fd_fdstat_get"], []wasmtime.Val{a[0], wasmtime.ValI32(int32(uint32(scratch)))})
		return res0(res), trap
	})
	if trap != nil {
		return nil, trap
	}
	return errno(e)
}

// fdClose is fd_close, counted.
func (s *store) fdClose(i int, c *wasmtime.Caller, a []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	res, trap := s.forward(c, i, a)
	if trap == nil && res[0].I32() == errnoSuccess {
		fd := uint32(u32(a, 0))
		s.wasi.fds.closed(fd)
		s.wasi.stdio.closed(fd)
	}
	return res, trap
}

// fdRenumber is fd_renumber, counted.
func (s *store) fdRenumber(i int, c *wasmtime.Caller, a []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	res, trap := s.forward(c, i, a)
	if trap == nil && res[0].I32() == errnoSuccess {
		from, to := uint32(u32(a, 0)), uint32(u32(a, 1))
		s.wasi.fds.renumbered(from, to)
		s.wasi.stdio.renumbered(from, to)
	}
	return res, trap
}
