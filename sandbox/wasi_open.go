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
//     cancellation, and when either comes it releases every thread asleep
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
	// The look before the open resolves the path a second time: it pays
	// for that as the open did (pathFuel).
	if !consumeFuel(c, u32(a, 3)*pathFuelPerByte) {
		return nil, fuelTrap()
	}
	fds := &s.wasi.fds
	if e := fds.reserve(); e != errnoSuccess {
		return errno(e)
	}
	// A look that fails (no such file, a dirfd that is not a directory)
	// says nothing: wasmtime's open answers as it would have.
	kind, e, trap := s.pathKind(c, a)
	if trap != nil {
		fds.unreserve()
		return nil, trap
	}
	if e == errnoSuccess && !openable(kind, u32(a, 1)) {
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
// open (/proc/self/task/*/syscall says which system call a thread is in,
// with its arguments; stat, whether it sleeps). The sleep can only be a
// FIFO or a device waiting for the other side: a FIFO still reachable by
// the path is opened from the other side without blocking, which lets the
// open return; and the thread is sent interruptSignal, whose handler
// lacks SA_RESTART, so the open returns EINTR (a FIFO renamed away while
// a thread waits on it can be reached no other way). Nothing else of
// the sidecar opens anything that can sleep so (module files are opened
// O_NONBLOCK), and Go retries an open that returns EINTR.
func releaseBlockedOpens() {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return
	}
	for _, task := range tasks {
		dirfd, path, ok := blockedOpen(task.Name())
		if !ok || !sleeping(task.Name()) {
			continue
		}
		releaseFIFO(dirfd, path)
		if tid, err := strconv.Atoi(task.Name()); err == nil && interruptSignal() != 0 {
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

func releaseFIFO(dirfd int, path string) {
	pfd, err := syscall.Openat(dirfd, path, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer syscall.Close(pfd)
	var st syscall.Stat_t
	if syscall.Fstat(pfd, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return
	}
	proc := "/proc/self/fd/" + strconv.Itoa(pfd)
	for _, mode := range []int{syscall.O_RDONLY, syscall.O_WRONLY} {
		if fd, err := syscall.Open(proc, mode|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0); err == nil {
			syscall.Close(fd)
		}
	}
}

// blockedOpen reads /proc/self/task/TID/syscall: when the thread is in
// open, openat or openat2, the directory descriptor and the path it
// opens.
func blockedOpen(tid string) (dirfd int, path string, ok bool) {
	b, err := os.ReadFile("/proc/self/task/" + tid + "/syscall")
	if err != nil {
		return 0, "", false
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0, "", false
	}
	nr, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, "", false
	}
	arg := func(i int) uint64 {
		v, _ := strconv.ParseUint(strings.TrimPrefix(f[1+i], "0x"), 16, 64)
		return v
	}
	var at uint64
	switch nr {
	case syscall.SYS_OPENAT, sysOpenat2:
		dirfd, at = int(int32(arg(0))), arg(1)
	case syscall.SYS_OPEN:
		dirfd, at = atFDCWD, arg(0)
	default:
		return 0, "", false
	}
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		return 0, "", false
	}
	defer mem.Close()
	buf := make([]byte, 4096)
	n, _ := mem.ReadAt(buf, int64(at))
	end := strings.IndexByte(string(buf[:n]), 0)
	if end <= 0 {
		return 0, "", false
	}
	return dirfd, string(buf[:end]), true
}

const atFDCWD = -100

// sysOpenat2 is openat2(2)'s number (the same on every Linux
// architecture).
const sysOpenat2 = 437

// oPath is Linux's O_PATH (the syscall package does not name it): a
// descriptor that pins what a path names without opening it.
const oPath = 0x200000
