package rpc

import (
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/framing"
)

// outbox owns the output. Frames leave in the order they were sent.
// Queued senders never block: a writer goroutine drains the queue, so a
// guest's host::log never waits on the parent's pipe, and a run's log
// notifications, queued before its response, are written before it. A
// job's response may instead be written inline by the job's goroutine
// when nothing is queued or being written (sendDirect): that saves a
// goroutine hand-off per run, and only that goroutine waits if the parent
// is slow to read.
//
// A run's log and output notifications are queued without waking the
// writer (sendSoon): the run's response, sent directly, usually follows
// within microseconds and takes them with it in one write, so a run that
// prints a line costs the parent one read, not two, and the sidecar no
// wake-up of the writer goroutine. A timer wakes the writer if nothing
// has taken them within soonDelay (defaultSoonDelay), so a run that
// prints and keeps running streams its output that much later at most.
//
// The bytes waiting (pending) are what back-pressure watches: the read
// loop, and each job before it runs, wait while they are above
// OutputHighWater.
type outbox struct {
	dst io.Writer
	w   *framing.Writer
	f   framing.Framing

	mu           sync.Mutex
	cond         *sync.Cond
	queue        [][]byte
	pending      int64         // bytes queued or being written, framing included
	total        uint64        // bytes written so far
	writing      bool          // someone (the writer goroutine or a direct sender) owns w
	belowWaiters int           // goroutines in waitBelow
	soonDelay    time.Duration // how long sendSoon's bodies wait (defaultSoonDelay; tests set their own)
	soonArmed    bool          // soonTimer will wake the writer for what sendSoon queued
	soonBytes    int64         // bytes sendSoon queued that the writer was not woken for
	soonTimer    *time.Timer
	closed       bool
	broken       error
	done         chan struct{}
}

const (
	// defaultSoonDelay is how long sendSoon's bodies wait for a direct
	// sender to take them before the writer goroutine is woken for them.
	defaultSoonDelay = time.Millisecond
	// soonMaxBytes wakes the writer at once past this many such bytes.
	soonMaxBytes = 64 << 10
)

// errAbandoned is the outbox's error once the drain deadline passed with
// output still waiting.
var errAbandoned = errors.New("output abandoned: the parent did not read it within the drain timeout")

func newOutbox(w io.Writer, f framing.Framing) *outbox {
	o := &outbox{dst: w, w: framing.NewWriter(w, f), f: f, soonDelay: defaultSoonDelay, done: make(chan struct{})}
	o.cond = sync.NewCond(&o.mu)
	o.soonTimer = time.AfterFunc(time.Hour, o.wakeForSoon)
	o.soonTimer.Stop()
	return o
}

func (o *outbox) cost(body []byte) int64 {
	return int64(len(body) + framing.Overhead(o.f, len(body)))
}

// send queues one JSON body. After close or a write error it is dropped.
func (o *outbox) send(body []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed || o.broken != nil {
		return
	}
	o.queue = append(o.queue, body)
	o.pending += o.cost(body)
	o.cond.Broadcast()
}

// sendSoon queues one JSON body as send does, but wakes the writer for it
// only after its soonDelay (or soonMaxBytes of such bodies), unless a direct
// sender or the writer takes it first. It never blocks.
func (o *outbox) sendSoon(body []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed || o.broken != nil {
		return
	}
	o.queue = append(o.queue, body)
	cost := o.cost(body)
	o.pending += cost
	o.soonBytes += cost
	switch {
	case o.soonBytes >= soonMaxBytes:
		o.soonBytes = 0
		o.cond.Broadcast()
	case !o.soonArmed:
		o.soonArmed = true
		o.soonTimer.Reset(o.soonDelay)
	}
}

// wakeForSoon is soonTimer's: what sendSoon queued and nobody took goes
// to the writer.
func (o *outbox) wakeForSoon() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.soonArmed = false
	if len(o.queue) > 0 {
		o.soonBytes = 0
		o.cond.Broadcast()
	}
}

// sendDirect writes one JSON body from the calling goroutine if the
// outbox is idle, after whatever is queued (a run's notifications go out
// in the same write as its response), and queues it when the writer
// owns the output. It may block on the pipe, until the output is
// abandoned at the latest.
func (o *outbox) sendDirect(body []byte) {
	o.mu.Lock()
	if o.writing || o.closed || o.broken != nil {
		o.mu.Unlock()
		o.send(body)
		return
	}
	batch := append(o.queue, body)
	o.queue, o.soonBytes = nil, 0
	o.writing = true
	o.pending += o.cost(body)
	o.mu.Unlock()
	o.finish(batch, o.write(batch))
}

// write puts bodies on the wire; the caller owns w (writing is set).
func (o *outbox) write(bodies [][]byte) error {
	for _, b := range bodies {
		if err := o.w.Write(b); err != nil {
			return err
		}
	}
	return o.w.Flush()
}

// finish releases w after a write and wakes whoever waits for it.
func (o *outbox) finish(bodies [][]byte, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.writing = false
	for _, b := range bodies {
		o.pending -= o.cost(b)
		if err == nil {
			o.total += uint64(o.cost(b))
		}
	}
	if err != nil && o.broken == nil {
		o.broken = err
	}
	if o.broken != nil {
		o.queue, o.pending = nil, 0
	}
	// Wake only who may go on: the writer goroutine for what was queued
	// meanwhile (or to end), waitBelow for the bytes just written. A
	// direct sender's write on an idle outbox wakes nobody: a wake-up per
	// response was a thread wake-up per response.
	if len(o.queue) > 0 || o.closed || o.broken != nil || o.belowWaiters > 0 {
		o.cond.Broadcast()
	}
}

// run is the writer goroutine: it writes what is queued until the outbox
// is closed and empty, or broken.
func (o *outbox) run() {
	defer close(o.done)
	for {
		o.mu.Lock()
		for (len(o.queue) == 0 || o.writing) && !o.closed && o.broken == nil {
			o.cond.Wait()
		}
		for o.writing && o.broken == nil { // closing: let a direct sender finish first
			o.cond.Wait()
		}
		if o.broken != nil || (o.closed && len(o.queue) == 0) {
			o.mu.Unlock()
			return
		}
		batch := o.queue
		o.queue, o.soonBytes = nil, 0
		o.writing = true
		o.mu.Unlock()
		o.finish(batch, o.write(batch))
	}
}

// waitBelow blocks while more than limit bytes wait to be written, so the
// server reads no request and starts no run while the parent is not
// reading. It returns early once the outbox is closed or broken.
func (o *outbox) waitBelow(limit int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for o.pending > limit && !o.closed && o.broken == nil {
		o.belowWaiters++
		o.cond.Wait()
		o.belowWaiters--
	}
}

// written returns how many bytes have reached the writer so far.
func (o *outbox) written() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.total
}

// isBroken reports whether the output failed or was abandoned.
func (o *outbox) isBroken() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.broken != nil
}

// pendingBytes returns how many bytes wait to be written.
func (o *outbox) pendingBytes() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.pending
}

// close flushes what is queued and stops the writer goroutine; it returns
// once that has happened or the output was abandoned.
func (o *outbox) close() error {
	o.mu.Lock()
	o.closed = true
	o.soonTimer.Stop()
	o.cond.Broadcast()
	o.mu.Unlock()
	<-o.done
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.broken
}

// abandon gives up on a parent that does not read: writes in progress are
// interrupted (a write deadline if the writer has one, else closing it)
// and everything still waiting is dropped. Called by the drain deadline.
func (o *outbox) abandon() {
	o.mu.Lock()
	if o.broken == nil && (o.writing || len(o.queue) > 0 || !o.closed) {
		o.broken = errAbandoned
		o.queue, o.pending = nil, 0
	}
	stuck := o.writing
	o.cond.Broadcast()
	o.mu.Unlock()
	if !stuck {
		return
	}
	if d, ok := o.dst.(interface{ SetWriteDeadline(time.Time) error }); ok {
		if err := d.SetWriteDeadline(time.Now()); err == nil || !errors.Is(err, os.ErrNoDeadline) {
			return
		}
	}
	if c, ok := o.dst.(io.Closer); ok {
		_ = c.Close()
	}
}
