package pipewait

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

func pipe(t *testing.T, closeFile bool) (*Reader, *os.File, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	p, err := New(r, closeFile)
	if err != nil {
		t.Fatal(err)
	}
	return p, r, w
}

// readAsync starts a Read and returns its outcome.
func readAsync(p *Reader) chan error {
	done := make(chan error, 1)
	go func() {
		var b [16]byte
		n, err := p.Read(b[:])
		if err == nil && n == 0 {
			err = errors.New("empty read")
		}
		done <- err
	}()
	return done
}

func wait(t *testing.T, done chan error, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: Read still waiting after 10 s", what)
		return nil
	}
}

func TestReadsWhatArrivesAndTheEnd(t *testing.T) {
	p, _, w := pipe(t, true)
	defer p.Close()
	done := readAsync(p)
	time.Sleep(10 * time.Millisecond) // most likely asleep in ppoll by now
	w.Write([]byte("hi"))
	if err := wait(t, done, "data"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var b [4]byte
	if n, err := p.Read(b[:]); n != 0 || err != io.EOF {
		t.Fatalf("after the writer closed: %d, %v; want 0, EOF", n, err)
	}
}

// Close ends a Read that waits with the writer still open, and the file is
// closed once that Read is out (closeFile).
func TestCloseEndsAWaitingRead(t *testing.T) {
	p, r, _ := pipe(t, true)
	done := readAsync(p)
	time.Sleep(10 * time.Millisecond)
	p.Close()
	if err := wait(t, done, "close"); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("a Read ended by Close: %v, want os.ErrClosed", err)
	}
	var b [4]byte
	if _, err := p.Read(b[:]); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("a Read after Close: %v", err)
	}
	if err := r.Close(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("the file was not closed by Close (closing it again: %v)", err)
	}
}

// Without closeFile the file stays open, and Restore puts it back in
// blocking mode.
func TestRestoreLeavesTheFileOpen(t *testing.T) {
	p, r, w := pipe(t, false)
	p.Restore()
	w.Write([]byte("x"))
	var b [1]byte
	if n, err := r.Read(b[:]); n != 1 || err != nil {
		t.Fatalf("reading the file after Restore: %d, %v", n, err)
	}
	r.Close()
}

// A deadline that passes (now, or later) ends the wait; moved away, reading
// goes on and finds what came meanwhile.
func TestReadDeadline(t *testing.T) {
	p, _, w := pipe(t, true)
	defer p.Close()
	done := readAsync(p)
	time.Sleep(10 * time.Millisecond)
	p.SetReadDeadline(time.Now())
	if err := wait(t, done, "deadline now"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("deadline now: %v", err)
	}
	p.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	if err := wait(t, readAsync(p), "deadline later"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("deadline 30 ms on: %v", err)
	}
	p.SetReadDeadline(time.Time{})
	w.Write([]byte("late"))
	if err := wait(t, readAsync(p), "no deadline"); err != nil {
		t.Fatalf("after the deadline was cleared: %v", err)
	}
}

func TestNewRefusesFiles(t *testing.T) {
	f, err := os.Open("pipewait.go")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := New(f, false); err == nil {
		t.Fatal("New accepted a regular file")
	}
}
