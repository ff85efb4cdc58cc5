package sandbox

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestReleaseBlockedOpens: a thread blocked opening a FIFO (for reading:
// no writer; for writing: no reader), even one renamed away while the
// thread waits on it, is released by releaseBlockedOpens, which finds it
// in /proc/self/task and interrupts the open (EINTR).
func TestReleaseBlockedOpens(t *testing.T) {
	for _, c := range []struct {
		mode     int
		replaced bool
	}{{syscall.O_RDONLY, false}, {syscall.O_WRONLY, false}, {syscall.O_RDONLY, true}} {
		mode := c.mode
		dir := t.TempDir()
		fifo := filepath.Join(dir, "fifo")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
		opened := make(chan error, 1)
		go func() {
			fd, err := syscall.Open(fifo, mode|syscall.O_CLOEXEC, 0)
			if err == nil {
				syscall.Close(fd)
			}
			opened <- err
		}()
		if c.replaced {
			for !blockedOn(fifo) {
				time.Sleep(time.Millisecond)
			}
			if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(dir, "file"), fifo); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.After(time.Minute) // a hang bound
	wait:
		for {
			releaseBlockedOpens()
			select {
			case err := <-opened:
				if err != syscall.EINTR {
					t.Errorf("%+v: the released open returned %v, want EINTR", c, err)
				}
				break wait
			case <-deadline:
				t.Fatalf("%+v: the open of a FIFO was not released", c)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}

// blockedOn says whether a thread of the process is asleep in an open.
func blockedOn(string) bool {
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		if inOpen(task.Name()) && sleeping(task.Name()) {
			return true
		}
	}
	return false
}
