//go:build !linux

package wakeup

import (
	"sync"
	"time"
)

// Event is a one-shot signal; its zero value is ready. It must not be
// copied once used.
type Event struct {
	once        sync.Once
	set, intr   chan struct{}
	setOnce     sync.Once
	interrupted sync.Once
}

func (e *Event) init() {
	e.once.Do(func() { e.set, e.intr = make(chan struct{}), make(chan struct{}) })
}

// Set signals e, waking its waiter. Safe from any goroutine, any number
// of times.
func (e *Event) Set() {
	e.init()
	e.setOnce.Do(func() { close(e.set) })
}

// Interrupt ends the wait as a context's end does.
func (e *Event) Interrupt() {
	e.init()
	e.interrupted.Do(func() { close(e.intr) })
}

func (e *Event) isSet() bool {
	e.init()
	select {
	case <-e.set:
		return true
	default:
		return false
	}
}

func (e *Event) wait(deadline time.Time) Outcome {
	e.init()
	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-e.set:
		return Signalled
	case <-e.intr:
	case <-expired:
		if e.isSet() {
			return Signalled
		}
		return Expired
	}
	if e.isSet() {
		return Signalled
	}
	return Interrupted
}
