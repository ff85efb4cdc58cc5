package sandbox

import (
	"sync"
	"time"
)

// Output streaming. A guest's writes reach Request.Output coalesced, so
// that a guest writing one byte at a time costs one notification per burst,
// not one per byte, while output is still seen as it happens: pending bytes
// go out when they reach outputFlushBytes, when the guest switches streams
// (order across stdout and stderr is kept), before the guest sleeps in
// poll_oneoff for a millisecond or more, outputFlushDelay after the first
// of them was written, and when the run ends.
const (
	outputFlushBytes = 16 << 10
	outputFlushDelay = 5 * time.Millisecond
)

// outputSink keeps a prefix of each stream within the budget and forwards
// the kept bytes in order. It is written on the guest's thread (through
// capi.go's callback) and flushed from there or from its timer; forward
// runs under mu, so calls never overlap.
type outputSink struct {
	budget  uint64
	forward func(stream string, data []byte)

	mu             sync.Mutex
	stdout, stderr []byte
	truncated      bool
	pending        int // stream with bytes not yet forwarded (1 or 2), 0 for none
	from           int // where they start in that stream's buffer
	timer          *time.Timer
	done           bool
}

func newOutputSink(budget uint64, forward func(stream string, data []byte)) *outputSink {
	s := &outputSink{budget: budget, forward: forward}
	if forward != nil {
		s.timer = time.AfterFunc(time.Hour, s.flush)
		s.timer.Stop()
	}
	return s
}

func (s *outputSink) buf(stream int) *[]byte {
	if stream == 2 {
		return &s.stderr
	}
	return &s.stdout
}

// write keeps what fits of p (stream 1 stdout, 2 stderr).
func (s *outputSink) write(stream int, p []byte) {
	if stream != 2 {
		stream = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	buf := s.buf(stream)
	room := s.budget - uint64(len(*buf))
	if uint64(len(p)) > room {
		p = p[:room]
		s.truncated = true
	}
	if len(p) == 0 || s.done {
		return
	}
	if s.forward == nil {
		*buf = append(*buf, p...)
		return
	}
	if s.pending != 0 && s.pending != stream {
		s.flushLocked()
	}
	if s.pending == 0 {
		s.pending, s.from = stream, len(*buf)
		s.timer.Reset(outputFlushDelay)
	}
	*buf = append(*buf, p...)
	if len(*buf)-s.from >= outputFlushBytes {
		s.flushLocked()
	}
}

// flush forwards the pending bytes now.
func (s *outputSink) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushLocked()
}

func (s *outputSink) flushLocked() {
	if s.pending == 0 || s.done {
		return
	}
	buf := *s.buf(s.pending)
	name := StreamStdout
	if s.pending == 2 {
		name = StreamStderr
	}
	s.pending = 0
	s.timer.Stop()
	// The kept bytes never change once written: hand out a view of them
	// that the receiver cannot append into.
	s.forward(name, buf[s.from:len(buf):len(buf)])
}

// finish forwards what is pending, stops forwarding for good (no call of
// forward happens after it returns) and returns the output. Idempotent.
func (s *outputSink) finish() *Output {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushLocked()
	s.done = true
	if s.timer != nil {
		s.timer.Stop()
	}
	return &Output{Stdout: s.stdout, Stderr: s.stderr, Truncated: s.truncated}
}
