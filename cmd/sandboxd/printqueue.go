package main

import "sync"

// printQueue hands items to one goroutine that writes them, so the guest's
// thread only queues: a slow or stalled terminal can never hold a guest
// inside a host call, where its deadline cannot reach it. What it holds is
// bounded by the run's own budgets (logBytes, outputBytes).
type printQueue[T any] struct {
	write func(batch []T) // called on the queue's goroutine only
	wake  chan struct{}   // an item was queued or close was called (capacity 1)
	done  chan struct{}   // closed when everything queued is written

	mu     sync.Mutex
	queue  []T
	closed bool
}

func newPrintQueue[T any](write func(batch []T)) *printQueue[T] {
	q := &printQueue[T]{write: write, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go q.loop()
	return q
}

// add queues one item; it never blocks.
func (q *printQueue[T]) add(item T) {
	q.mu.Lock()
	q.queue = append(q.queue, item)
	q.mu.Unlock()
	q.signal()
}

func (q *printQueue[T]) signal() {
	select {
	case q.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// close waits until everything queued is written.
func (q *printQueue[T]) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
	<-q.done
}

func (q *printQueue[T]) loop() {
	defer close(q.done)
	for {
		q.mu.Lock()
		batch, closed := q.queue, q.closed
		q.queue = nil
		q.mu.Unlock()
		switch {
		case len(batch) > 0:
			q.write(batch)
		case closed:
			return
		default:
			<-q.wake
		}
	}
}
