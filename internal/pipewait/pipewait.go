// Package pipewait reads a pipe or socket with the reading thread asleep
// in ppoll(2) while nothing has arrived, as a blocking read(2) sleeps,
// instead of parking the goroutine in Go's network poller.
//
// Why: a process that waits for one message at a time (the sidecar for
// its parent's next request, a client for its answer) spends nothing
// while it waits only if its thread sleeps in the kernel. With the poller,
// the thread that parks the reading goroutine first looks for other work
// (a "spinning" thread), and the thread the poller later wakes may wake
// another to spin: on two cores shared by the two processes that cost
// each sequential round trip several µs of CPU on its critical path.
//
// Unlike a blocking read, the wait can be ended: Close ends it (and every
// later Read) with os.ErrClosed, and a read deadline (SetReadDeadline,
// as os.File has one) ends it with os.ErrDeadlineExceeded; ppoll also
// watches a pipe of the Reader's own that both write to.
//
// The descriptor is switched to non-blocking mode (O_NONBLOCK belongs to
// the file description, which another process may share: Restore puts
// blocking mode back). Only Linux is supported: New fails elsewhere and
// callers keep the os.File.
package pipewait

import (
	"errors"
	"time"
)

// ErrUnsupported is New's error where ppoll(2) is not used.
var ErrUnsupported = errors.New("pipewait: not supported on this platform")

// Reader is safe for one reading goroutine at a time, with Close and
// SetReadDeadline from any goroutine.
type Reader struct {
	impl
}

var _ interface {
	Read([]byte) (int, error)
	Close() error
	SetReadDeadline(time.Time) error
} = (*Reader)(nil)
