package main

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The sidecar waits for its parent's requests asleep in ppoll(2)
// (waitingPipe) and still ends at once when told to while the parent,
// silent, keeps its end open: SIGTERM, or exit, with nothing being read.
// A plain blocking read(2) would hang there until the parent wrote or
// closed (Serve's Close of stdin cannot end it).
func TestSidecarIdleParentSignalAndExit(t *testing.T) {
	for _, how := range []string{"SIGTERM", "SIGINT", "exit"} {
		t.Run(how, func(t *testing.T) {
			cmd := exec.Command(binPath, "serve", "--framing=ndjson")
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			defer stdin.Close()
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// One round trip first: the reader is then back waiting.
			if _, err := stdin.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"stats"}` + "\n")); err != nil {
				t.Fatal(err)
			}
			if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || !strings.Contains(line, `"id":1`) {
				t.Fatalf("stats: %q, %v", line, err)
			}
			time.Sleep(20 * time.Millisecond)
			switch how {
			case "SIGTERM":
				err = cmd.Process.Signal(syscall.SIGTERM)
			case "SIGINT":
				err = cmd.Process.Signal(syscall.SIGINT)
			default:
				_, err = stdin.Write([]byte(`{"jsonrpc":"2.0","method":"exit"}` + "\n"))
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, _, killed := waitTimeout(cmd, 20*time.Second); killed {
				t.Fatalf("%s with the parent idle and its end open: the sidecar did not exit within 20 s", how)
			}
		})
	}
}

// A socket as stdin and stdout (one file description for both), and the
// description's blocking mode put back when the sidecar exits (O_NONBLOCK
// belongs to the description, which the parent shares).
func TestSidecarSocketStdioRestoresBlocking(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	child := os.NewFile(uintptr(fds[1]), "child")
	parentFile := os.NewFile(uintptr(fds[0]), "parent")
	conn, err := net.FileConn(parentFile)
	parentFile.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A duplicate of the child's end shares its description: its mode is
	// what the sidecar leaves behind.
	probe, err := syscall.Dup(fds[1])
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(probe)
	cmd := exec.Command(binPath, "serve", "--framing=ndjson")
	cmd.Stdin, cmd.Stdout = child, child
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child.Close()
	r := bufio.NewReader(conn)
	for i := range 50 { // round trips over the socket
		if _, err := conn.Write([]byte(`{"jsonrpc":"2.0","id":7,"method":"stats"}` + "\n")); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		if line, err := r.ReadString('\n'); err != nil || !strings.Contains(line, `"id":7`) {
			t.Fatalf("round trip %d over a socket: %q, %v", i, line, err)
		}
	}
	if nonblocking(t, probe) == false {
		t.Fatal("the sidecar serves a socket in blocking mode: expected it switched to non-blocking while serving")
	}
	if _, err := conn.Write([]byte(`{"jsonrpc":"2.0","method":"exit"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	if _, _, killed := waitTimeout(cmd, 20*time.Second); killed {
		t.Fatal("exit over a socket: the sidecar did not exit within 20 s")
	}
	if nonblocking(t, probe) {
		t.Fatal("the sidecar left the parent's socket in non-blocking mode")
	}
}

func nonblocking(t *testing.T, fd int) bool {
	t.Helper()
	flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFL, 0)
	if errno != 0 {
		t.Fatal(errno)
	}
	return flags&syscall.O_NONBLOCK != 0
}
