package sandbox

// What a WASI guest may open: directories and regular files, nothing that
// can block. wasmtime's path_open opens without O_NONBLOCK (it sets it
// after), so opening a FIFO nobody has open at the other end blocked the
// guest's thread inside wasmtime, out of reach of the epoch: the run and
// its cancel went unanswered, later runs starved, the sidecar did not
// exit at the end of its input. So path_open is ours in front of
// wasmtime's:
//
//   - before: what the path names is looked up (wasmtime's own
//     path_filestat_get, so it resolves exactly as the open will); a
//     device, FIFO or socket is refused with EACCES, not opened;
//   - after: the descriptor opened is looked at (fd_fdstat_get); anything
//     but a directory or a regular file is closed again and refused, in
//     case the path was swapped between the look and the open;
//   - during: a swap in that window could still block the open itself, so
//     while it runs a watchdog waits for the run's deadline and
//     cancellation, and when either comes it interrupts every thread asleep
//     in an open (releaseBlockedOpens: wasmtime opens on a thread of its
//     blocking pool). The guest then gets an error and meets its fence at
//     the next epoch check.

import (
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// preview1 values of path_open's checks.
const (
	errnoAcces          = 2
	lookupSymlinkFollow = 1
	filetypeSymlink     = 7
	filestatSize        = 64
	filestatFiletype    = 16 // offset of filetype in a filestat
	fdstatSize          = 24
)

// pathOpen is path_open: a descriptor is reserved (wasi_fds.go), what the
// path names is checked, wasmtime opens it under the watchdog, and what it
// opened is checked again.
func (s *store) pathOpen(i int, c *wasmtime.Caller, a []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	// The look before the open is a second forwarded call resolving the
	// path, and the check after a cheap one: paid as the open is (pathFuel).
	if !consumeFuel(c, u32(a, 3)*pathFuelPerByte+forwardFuel+cheapCallFuel) {
		return nil, fuelTrap()
	}
	fds := &s.wasi.fds
	if e := fds.reserve(); e != errnoSuccess {
		return errno(e)
	}
	// A look that fails (no such file, a dirfd that is not a directory,
	// arguments the guest got wrong) says nothing: wasmtime's open answers
	// as it would have (and names itself, not the look, in its error).
	kind, e, trap := s.pathKind(c, a)
	if trap == nil && e == errnoSuccess && !openable(kind, u32(a, 1)) {
		fds.unreserve()
		return errno(errnoAcces)
	}
	stop := s.watchOpen()
	res, trap := s.forward(c, i, a)
	stop()
	if trap != nil || res[0].I32() != errnoSuccess {
		fds.unreserve()
		return res, trap
	}
	fd := binary.LittleEndian.Uint32(s.wasi.memory(c)[u32(a, 8):])
	fds.host[fd] = true
	if kind, trap := s.fdKind(c, fd); trap != nil {
		return nil, trap
	} else if kind != filetypeDir && kind != filetypeRegular {
		if _, trap := s.forward(c, shadowIndex["fd_close"], []wasmtime.Val{wasmtime.ValI32(int32(fd))}); trap != nil {
			return nil, trap
		}
		fds.closed(fd)
		return errno(errnoAcces)
	}
	return res, nil
}

// openable says whether a path whose filestat says kind may be opened: a
// directory or a regular file, or a symlink not followed (the open then
// fails without opening anything).
func openable(kind uint8, lookupFlags uint64) bool {
	return kind == filetypeDir || kind == filetypeRegular ||
		(kind == filetypeSymlink && lookupFlags&lookupSymlinkFollow == 0)
}

// pathKind looks up what path_open's path names, with wasmtime's
// path_filestat_get (same directory, lookup flags and path), through 64
// bytes of the guest's memory borrowed and put back (the guest's thread
// is here).
func (s *store) pathKind(c *wasmtime.Caller, a []wasmtime.Val) (uint8, int32, *wasmtime.Trap) {
	var kind uint8
	e, trap := s.borrowScratch(c, filestatSize, func(scratch uint64) (int32, *wasmtime.Trap) {
		res, trap := s.forward(c, shadowIndex["path_filestat_get"], []wasmtime.Val{a[0], a[1], a[2], a[3], wasmtime.ValI32(int32(uint32(scratch)))})
		if trap != nil || res[0].I32() != errnoSuccess {
			return res0(res), trap
		}
		kind = s.wasi.memory(c)[scratch+filestatFiletype]
		return errnoSuccess, nil
	})
	return kind, e, trap
}

// fdKind is the filetype of the guest's descriptor fd (fd_fdstat_get).
func (s *store) fdKind(c *wasmtime.Caller, fd uint32) (uint8, *wasmtime.Trap) {
	var kind uint8
	_, trap := s.borrowScratch(c, fdstatSize, func(scratch uint64) (int32, *wasmtime.Trap) {
		res, trap := s.forward(c, shadowIndex["fd_fdstat_get"], []wasmtime.Val{wasmtime.ValI32(int32(fd)), wasmtime.ValI32(int32(uint32(scratch)))})
		if trap == nil && res[0].I32() == errnoSuccess {
			kind = s.wasi.memory(c)[scratch]
		}
		return res0(res), trap
	})
	return kind, trap
}

func res0(res []wasmtime.Val) int32 {
	if len(res) == 0 {
		return 0
	}
	return res[0].I32()
}

// borrowScratch lends f n bytes at the start of the guest's memory (8-
// aligned) and puts back what was there. A memory too small for them
// lends nothing: f is not called and the answer is EFAULT.
func (s *store) borrowScratch(c *wasmtime.Caller, n uint64, f func(scratch uint64) (int32, *wasmtime.Trap)) (int32, *wasmtime.Trap) {
	mem := s.wasi.memory(c)
	if uint64(len(mem)) < n {
		return errnoFault, nil
	}
	saved := make([]byte, n)
	copy(saved, mem)
	e, trap := f(0)
	copy(s.wasi.memory(c), saved)
	return e, trap
}

// watchOpen arms the watchdog of an open: when the run's deadline passes
// or it is cancelled before the open returns, every thread of the process
// blocked opening a FIFO is released (releaseBlockedOpens), until it
// returns. (wasmtime opens on a thread of its blocking pool, not the
// guest's, hence every thread: only a guest ever blocks opening a FIFO
// here, and each such open is refused after.) The returned func disarms
// it and waits for it.
func (s *store) watchOpen() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTimer(max(s.fence.remaining(), 0))
		defer t.Stop()
		select {
		case <-done:
			return
		case <-t.C:
		case <-s.wasi.ctx.Done():
		}
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			releaseBlockedOpens()
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// releaseBlockedOpens releases every thread of the process asleep in an
// open (/proc/self/task/*/syscall says which system call a thread is in;
// stat, whether it sleeps): it is sent interruptSignal, whose handler
// lacks SA_RESTART, so the open returns EINTR. The sleep can only be a
// FIFO or a device waiting for the other side, and the thread one of
// wasmtime's (nothing else of the sidecar opens anything that can sleep
// so: module files are opened O_NONBLOCK, and Go retries an open that
// returns EINTR). The FIFO is never opened from our side: the path the
// thread opens is relative to a directory of wasmtime's, and whatever
// resolved it now might not be what the guest may reach.
func releaseBlockedOpens() {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil || interruptSignal() == 0 {
		return
	}
	for _, task := range tasks {
		if !inOpen(task.Name()) || !sleeping(task.Name()) {
			continue
		}
		if tid, err := strconv.Atoi(task.Name()); err == nil {
			syscall.Tgkill(os.Getpid(), tid, interruptSignal())
		}
	}
}

// sleeping says whether thread tid is in an interruptible sleep.
func sleeping(tid string) bool {
	b, err := os.ReadFile("/proc/self/task/" + tid + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and
	// may itself hold any byte.
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'S'
}

// inOpen says whether thread tid is in open, openat or openat2.
func inOpen(tid string) bool {
	b, err := os.ReadFile("/proc/self/task/" + tid + "/syscall")
	if err != nil {
		return false
	}
	nr, err := strconv.ParseInt(string(b[:max(0, strings.IndexByte(string(b), ' '))]), 10, 64)
	return err == nil && (nr == syscall.SYS_OPENAT || nr == sysOpenat2 || nr == syscall.SYS_OPEN)
}

// sysOpenat2 is openat2(2)'s number (the same on every Linux
// architecture).
const sysOpenat2 = 437
