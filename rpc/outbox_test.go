package rpc

import (
	"io"
	"os"
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
	o := newOutbox(w, framing.ContentLength)
	go o.run()
	defer func() { w.Close(); o.close() }()

	big := make([]byte, 4<<20) // more than a pipe holds (64 KiB by default, 1 MiB at most unprivileged): the direct write blocks
	for i := range big {
		big[i] = 'x'
	}
	big[0], big[len(big)-1] = '"', '"'
	direct := make(chan struct{})
	go func() { o.sendDirect(big); close(direct) }()
	deadline := time.Now().Add(10 * time.Second)
	for o.pendingBytes() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the direct write never started")
		}
		time.Sleep(time.Millisecond)
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
		select {
		case <-below:
			t.Fatal("waitBelow returned while 4 MiB were pending")
		case <-time.After(20 * time.Millisecond):
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
	for o.pendingBytes() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the queued frame was never written: %d bytes pending", o.pendingBytes())
		}
		time.Sleep(time.Millisecond)
	}
	w.Close()
	o.close()
	if n := <-got; n < want {
		t.Fatalf("read %d bytes, want at least %d (the bodies and their headers)", n, want)
	}
}
