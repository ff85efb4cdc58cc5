package wakeup

import (
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Event is a one-shot signal; its zero value is ready. It must not be
// copied once used.
type Event struct {
	// state is the futex word: 0 while nothing happened, then stateSet
	// and/or stateInterrupted; the waiter sleeps while it is 0.
	state atomic.Uint32
}

const (
	stateSet         = 1
	stateInterrupted = 2

	futexWait = 0 | 128 // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
	futexWake = 1 | 128 // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
)

// Set signals e, waking its waiter. Safe from any goroutine, any number
// of times.
func (e *Event) Set() { e.raise(stateSet) }

// Interrupt ends the wait as a context's end does.
func (e *Event) Interrupt() { e.raise(stateInterrupted) }

func (e *Event) raise(bit uint32) {
	if e.state.Or(bit)&bit != 0 {
		return // raised already: its FUTEX_WAKE was made
	}
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(&e.state)), futexWake, 1, 0, 0, 0)
}

func (e *Event) isSet() bool { return e.state.Load()&stateSet != 0 }

func (e *Event) wait(deadline time.Time) Outcome {
	for {
		switch s := e.state.Load(); {
		case s&stateSet != 0:
			return Signalled
		case s != 0:
			return Interrupted
		}
		var ts *syscall.Timespec
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return Expired
			}
			t := syscall.NsecToTimespec(left.Nanoseconds())
			ts = &t
		}
		// Sleeps only while the word is still 0 (EAGAIN otherwise); wakes
		// at FUTEX_WAKE, the timeout (ETIMEDOUT) or a signal (EINTR): the
		// loop looks again in every case. A system call, not a raw one:
		// the runtime sees the thread blocked and lets its P go.
		syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(&e.state)), futexWait, 0,
			uintptr(unsafe.Pointer(ts)), 0, 0)
	}
}
