package main

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// logWriter is the sidecar's stderr: writes never block. A parent that
// pipes stderr and never reads it (subprocess.PIPE, forgotten) filled the
// pipe with warnings its own input caused, and then every log call
// blocked: the reader with it, so requests went unanswered and the
// sidecar never exited. Writes go to a bounded buffer that a goroutine
// drains; past the bound a write is dropped and counted, and the count is
// reported once stderr moves again.
type logWriter struct {
	dst io.Writer

	mu      sync.Mutex
	cond    *sync.Cond
	buf     []byte
	dropped int
	closed  bool
	done    chan struct{}
}

// logWriterBytes bounds what waits for stderr.
const logWriterBytes = 1 << 20

func newLogWriter(dst io.Writer) *logWriter {
	w := &logWriter{dst: dst, done: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	go w.run()
	return w
}

// Write queues p whole (slog writes one record per call), or drops it.
func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || len(w.buf)+len(p) > logWriterBytes {
		w.dropped++
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	w.cond.Signal()
	return len(p), nil
}

func (w *logWriter) run() {
	defer close(w.done)
	var chunk []byte
	for {
		w.mu.Lock()
		for len(w.buf) == 0 && !w.closed {
			w.cond.Wait()
		}
		if len(w.buf) == 0 {
			w.mu.Unlock()
			return
		}
		chunk, w.buf = w.buf, chunk[:0]
		dropped := w.dropped
		w.dropped = 0
		w.mu.Unlock()
		if dropped > 0 {
			fmt.Fprintf(w.dst, "sandboxd: %d log lines dropped: stderr was not read\n", dropped)
		}
		if _, err := w.dst.Write(chunk); err != nil {
			w.mu.Lock()
			w.closed, w.buf = true, nil
			w.mu.Unlock()
			return
		}
	}
}

// close writes what is queued, waiting at most d for a stderr nobody
// reads; later writes are dropped.
func (w *logWriter) close(d time.Duration) {
	w.mu.Lock()
	w.closed = true
	w.cond.Signal()
	w.mu.Unlock()
	select {
	case <-w.done:
	case <-time.After(d):
	}
}
