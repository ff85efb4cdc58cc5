package rpc

import (
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/framing"
)

// TestOutboxWakesWaitersOnDirectWrite: a direct write wakes nobody when
// nobody waits (finish skips the broadcast then), but one that brings the
// pending bytes down must still wake a waitBelow waiter, and a frame
// queued behind it must still reach the writer goroutine.
func TestOutboxWakesWaitersOnDirectWrite(t *testing.T) {
	for _, queued := range []bool{false, true} {
		name := "waitBelow"
		if queued {
			name = "queued behind"
		}
		t.Run(name, func(t *testing.T) { testOutboxDirectWrite(t, queued) })
	}
}

func testOutboxDirectWrite(t *testing.T, queue bool) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	started := &startSignal{Writer: w, first: make(chan struct{})}
	o := newOutbox(started, framing.ContentLength)
	go o.run()
	defer func() { w.Close(); o.close() }()

	big := make([]byte, 4<<20) // more than a pipe holds (64 KiB by default, 1 MiB at most unprivileged): the direct write blocks
	for i := range big {
		big[i] = 'x'
	}
	big[0], big[len(big)-1] = '"', '"'
	direct := make(chan struct{})
	go func() { o.sendDirect(big); close(direct) }()
	select {
	case <-started.first: // its bytes are pending
	case <-time.After(time.Minute): // a hang bound
		t.Fatal("the direct write never started")
	}
	want := int64(len(big))
	if queue {
		o.send([]byte(`"queued"`)) // for the writer goroutine, once the direct write is done
		want += int64(len(`"queued"`))
	}
	below := make(chan struct{})
	if queue { // nobody else waits: only the queued frame must wake the writer
		close(below)
	} else {
		go func() { o.waitBelow(1024); close(below) }()
		waitUntil(t, "waitBelow waits while 4 MiB are pending", func() bool {
			o.mu.Lock()
			defer o.mu.Unlock()
			return o.belowWaiters == 1
		})
		select {
		case <-below:
			t.Fatal("waitBelow returned while 4 MiB were pending")
		default:
		}
	}
	got := make(chan int64)
	go func() {
		n, _ := io.Copy(io.Discard, r)
		got <- n
	}()
	for _, c := range []chan struct{}{direct, below} {
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatal("a direct sender or a waitBelow waiter was never woken")
		}
	}
	o.close() // once the writer goroutine has written what was queued
	if n := o.pendingBytes(); n != 0 {
		t.Fatalf("the queued frame was never written: %d bytes pending", n)
	}
	w.Close()
	if n := <-got; n < want {
		t.Fatalf("read %d bytes, want at least %d (the bodies and their headers)", n, want)
	}
}

// startSignal closes first when the outbox's first write begins.
type startSignal struct {
	io.Writer
	once  sync.Once
	first chan struct{}
}

func (s *startSignal) Write(p []byte) (int, error) {
	s.once.Do(func() { close(s.first) })
	return s.Writer.Write(p)
}

// TestOutboxSoonBodiesGoWithTheResponse: what sendSoon queues (a run's
// notifications) goes out in the same write as the direct sender's body
// (its response) that follows, in order; and without a direct sender the
// timer hands it to the writer goroutine.
func TestOutboxSoonBodiesGoWithTheResponse(t *testing.T) {
	t.Run("taken by the response", func(t *testing.T) {
		var rec writeRecorder
		o := newOutbox(&rec, framing.NDJSON)
		o.soonDelay = time.Hour // the timer must not win: under -race on a loaded machine 1 ms passed between two sends
		go o.run()
		o.sendSoon([]byte(`"output 0"`))
		o.sendSoon([]byte(`"output 1"`))
		o.sendDirect([]byte(`"response"`))
		if err := o.close(); err != nil {
			t.Fatal(err)
		}
		writes := rec.get()
		if want := "\"output 0\"\n\"output 1\"\n\"response\"\n"; len(writes) != 1 || writes[0] != want {
			t.Fatalf("writes %q, want one write %q", writes, want)
		}
	})
	t.Run("handed to the writer by the timer", func(t *testing.T) {
		var rec writeRecorder
		o := newOutbox(&rec, framing.NDJSON)
		go o.run()
		defer o.close()
		o.sendSoon([]byte(`"output"`))
		waitUntil(t, "the held notification is written without a response", func() bool { return len(rec.get()) == 1 })
	})
}

// writeRecorder keeps each Write's bytes.
type writeRecorder struct {
	mu     sync.Mutex
	writes []string
}

func (r *writeRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, string(p))
	return len(p), nil
}

func (r *writeRecorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.writes...)
}
