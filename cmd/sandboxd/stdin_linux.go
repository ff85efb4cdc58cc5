package main

import (
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// parentInput returns what the server reads the parent's requests from.
// A pipe or a socket is read by a waitingPipe; anything else (a terminal,
// a file) as it is.
func parentInput(f *os.File) (io.Reader, func()) {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
		return f, func() {}
	}
	p, err := newWaitingPipe(f)
	if err != nil {
		return pollable(f)
	}
	return p, p.restore
}

// waitingPipe reads a pipe or socket whose reader waits for input asleep
// in ppoll(2), as a plain blocking read(2) would, instead of parking its
// goroutine in Go's network poller. Between a parent's requests the
// sidecar has nothing to do: with the poller, the thread that parks the
// reading goroutine looks for other work first (a "spinning" thread,
// and another one woken to spin when it finds the request), which on two
// cores cost as much CPU as the request itself and competed with the
// parent; asleep in ppoll the thread costs nothing until the request
// comes and then runs it at once. Unlike a blocking read, the wait can be
// ended: Close wakes it (ppoll also watches a pipe of our own), which the
// server needs to stop reading at exit or on a signal while the parent
// keeps its end open. The descriptor is put in non-blocking mode (a read
// returns at once), and back in blocking mode by restore.
type waitingPipe struct {
	fd   int
	wake [2]int // wake[1] is written once by Close; ppoll watches wake[0]

	closeOnce sync.Once
	closed    chan struct{}
}

func newWaitingPipe(f *os.File) (*waitingPipe, error) {
	fd := int(f.Fd()) // puts f in blocking mode; set non-blocking below
	p := &waitingPipe{fd: fd, closed: make(chan struct{})}
	if err := syscall.Pipe2(p.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return nil, err
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(p.wake[0])
		syscall.Close(p.wake[1])
		return nil, err
	}
	return p, nil
}

// pollFd is struct pollfd.
type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

const pollIn = 0x1 // POLLIN

func (p *waitingPipe) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	for {
		select {
		case <-p.closed:
			return 0, os.ErrClosed
		default:
		}
		n, err := syscall.Read(p.fd, b)
		switch {
		case err == nil && n > 0:
			return n, nil
		case err == nil:
			return 0, io.EOF
		case errors.Is(err, syscall.EINTR):
			continue
		case !errors.Is(err, syscall.EAGAIN):
			return 0, &os.PathError{Op: "read", Path: "stdin", Err: err}
		}
		// Nothing to read yet: sleep until there is, or until Close.
		// POLLHUP and POLLERR come back in revents whatever is asked, and
		// the next read reports them (EOF or the error).
		fds := [2]pollFd{{fd: int32(p.fd), events: pollIn}, {fd: int32(p.wake[0]), events: pollIn}}
		_, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)), 0, 0, 0, 0)
		if errno != 0 && errno != syscall.EINTR {
			return 0, &os.PathError{Op: "ppoll", Path: "stdin", Err: errno}
		}
	}
}

// Close ends a Read waiting for input (it returns os.ErrClosed), and every
// later one. The descriptor itself stays open until restore.
func (p *waitingPipe) Close() error {
	p.closeOnce.Do(func() {
		close(p.closed)
		syscall.Write(p.wake[1], []byte{0})
	})
	return nil
}

// restore puts the descriptor back in blocking mode (O_NONBLOCK belongs
// to the file description, which another process may share) and frees
// the wake-up pipe. Call once nothing reads any more.
func (p *waitingPipe) restore() {
	_ = syscall.SetNonblock(p.fd, false)
	syscall.Close(p.wake[0])
	syscall.Close(p.wake[1])
}
