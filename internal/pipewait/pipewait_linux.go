package pipewait

import (
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

type impl struct {
	f        *os.File // owns the descriptor; closed by Close when closeFile
	fd       int
	wake     [2]int // a pipe: Close and SetReadDeadline write to wake[1]
	closeFD  bool
	mu       sync.Mutex
	deadline time.Time
	closed   bool
	reading  bool // a Read is between its checks and its system calls
	freed    bool // the descriptors are closed (or handed back)
}

// New returns a Reader of f, which must be a pipe or a socket. With
// closeFile, Close also closes f (once no Read uses its descriptor);
// otherwise f stays open and Restore puts it back in blocking mode.
func New(f *os.File, closeFile bool) (*Reader, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
		return nil, errors.New("pipewait: not a pipe or socket")
	}
	fd := int(f.Fd()) // puts f in blocking mode; non-blocking again below
	r := &Reader{impl{f: f, fd: fd, closeFD: closeFile}}
	if err := syscall.Pipe2(r.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return nil, err
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(r.wake[0])
		syscall.Close(r.wake[1])
		return nil, err
	}
	return r, nil
}

// pollFd is struct pollfd.
type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

const pollIn = 0x1 // POLLIN

// Read reads what has arrived, or waits for it.
func (r *impl) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	for {
		r.mu.Lock()
		closed, deadline := r.closed, r.deadline
		if !closed {
			r.reading = true
		}
		r.mu.Unlock()
		if closed {
			return 0, os.ErrClosed
		}
		var wait *syscall.Timespec
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				r.doneReading()
				return 0, os.ErrDeadlineExceeded
			}
			ts := syscall.NsecToTimespec(left.Nanoseconds())
			wait = &ts
		}
		n, err := syscall.Read(r.fd, b)
		switch {
		case err == nil && n > 0:
			r.doneReading()
			return n, nil
		case err == nil:
			r.doneReading()
			return 0, io.EOF
		case errors.Is(err, syscall.EINTR):
			r.doneReading()
			continue
		case !errors.Is(err, syscall.EAGAIN):
			r.doneReading()
			return 0, &os.PathError{Op: "read", Path: r.f.Name(), Err: err}
		}
		// Nothing yet: sleep until there is, the wake pipe is written or
		// the deadline passes. POLLHUP and POLLERR come back whatever is
		// asked; the next read reports them (EOF or the error).
		fds := [2]pollFd{{fd: int32(r.fd), events: pollIn}, {fd: int32(r.wake[0]), events: pollIn}}
		_, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)),
			uintptr(unsafe.Pointer(wait)), 0, 0, 0)
		if fds[1].revents != 0 {
			var drain [64]byte
			for {
				if n, _ := syscall.Read(r.wake[0], drain[:]); n <= 0 {
					break
				}
			}
		}
		r.doneReading()
		if errno != 0 && errno != syscall.EINTR {
			return 0, &os.PathError{Op: "ppoll", Path: r.f.Name(), Err: errno}
		}
	}
}

// doneReading ends a Read's use of the descriptors, closing them if Close
// came meanwhile.
func (r *impl) doneReading() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reading = false
	if r.closed {
		r.freeLocked()
	}
}

// SetReadDeadline ends a Read waiting at t (at once if t has passed), as
// os.File's does: Read returns os.ErrDeadlineExceeded, and so does every
// later Read until the deadline is moved. The zero time means none.
func (r *impl) SetReadDeadline(t time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return os.ErrClosed
	}
	r.deadline = t
	r.wakeLocked()
	return nil
}

// Close ends a waiting Read and every later one (os.ErrClosed); with
// closeFile, the file is closed once no Read uses it.
func (r *impl) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	r.wakeLocked()
	if !r.reading {
		r.freeLocked()
	}
	return nil
}

func (r *impl) wakeLocked() {
	if !r.freed {
		syscall.Write(r.wake[1], []byte{0}) // a full pipe is awake already
	}
}

// freeLocked closes the wake pipe, and the file with closeFile.
func (r *impl) freeLocked() {
	if r.freed {
		return
	}
	r.freed = true
	syscall.Close(r.wake[0])
	syscall.Close(r.wake[1])
	if r.closeFD {
		r.f.Close()
	}
}

// Restore puts the descriptor back in blocking mode and ends the Reader
// (Close). Call it once nothing reads any more.
func (r *impl) Restore() {
	_ = syscall.SetNonblock(r.fd, false)
	r.Close()
}
