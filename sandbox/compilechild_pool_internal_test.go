package sandbox

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestChildPoolCloseEndsEveryChild: Close kills the spare and a child a
// compile still holds (that compile returns cancelled), and returns only
// when both are waited for (no zombie left in /proc); a closed pool
// starts no child.
func TestChildPoolCloseEndsEveryChild(t *testing.T) {
	p := openChildPool(false, false)
	c, err := p.take() // the spare being started when the pool opened
	if err != nil {
		t.Fatal(err)
	}
	held := c.cmd.Process.Pid
	p.refillSpare()
	p.mu.Lock()
	for p.starting {
		p.started.Wait()
	}
	if p.spare == nil {
		p.mu.Unlock()
		t.Fatal("no spare after refillSpare")
	}
	spare := p.spare.cmd.Process.Pid
	p.mu.Unlock()

	// A compile that would run for minutes: only Close can end it.
	wat := "(module (func (export \"run\")" + strings.Repeat(" (loop", 20_000) + strings.Repeat(")", 20_000) + "))"
	done := make(chan error, 1)
	go func() {
		defer p.compileEnded()
		mod := moduleBytes{text: wat}
		_, err := c.compile(context.Background(), childRequest{Payload: mod.size(), MemoryBytes: 4 << 30, MaxModuleBytes: DefaultMaxModuleBytes}, mod,
			compileLimits{timeout: 10 * time.Minute, memoryBytes: 4 << 30})
		done <- err
	}()
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(time.Minute): // a hang bound
		t.Fatal("Close did not return")
	}
	if err := <-done; KindOf(err) != KindCancelled {
		t.Errorf("the compile holding a child: %v, want cancelled", err)
	}
	for _, pid := range []int{held, spare} {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("child %d still in /proc after Close (not waited for): %v", pid, err)
		}
	}
	starts := p.starts.Load()
	if _, err := p.take(); err == nil {
		t.Error("a closed pool handed out a child")
	}
	p.compileEnded()
	if got := p.starts.Load(); got != starts {
		t.Errorf("a closed pool started %d children", got-starts)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestChildPoolKeepsFirstError: of the errors met in ending children,
// Close returns the first; an exit status is how a child ends, no error.
func TestChildPoolKeepsFirstError(t *testing.T) {
	p := openChildPool(false, false)
	p.mu.Lock()
	p.wg.Add(3) // three children, ended below
	p.mu.Unlock()
	first := errors.New("first")
	p.ended(1, first)
	p.ended(2, errors.New("second"))
	p.ended(3, nil)
	if err := p.Close(); !errors.Is(err, first) {
		t.Errorf("Close: %v, want the first error", err)
	}
}
