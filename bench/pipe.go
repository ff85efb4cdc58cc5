package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// echoEnv makes this binary act as the echo child of the pipe floor: it
// copies every Content-Length frame from stdin to stdout until EOF. Re-
// executing ourselves keeps the floor a Go process on both ends, like the
// Go client talking to the Go sidecar, minus JSON-RPC and wasm.
const echoEnv = "SANDBOXD_BENCH_ECHO"

// floorMessage is a run-sized request: what the Go client sends for
// `run {id} add(1, 2)`, about 200 bytes framed.
func floorMessage() []byte {
	id := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	return []byte(`{"jsonrpc":"2.0","id":12345,"method":"run","params":{"module":{"id":"` + id + `"},"function":"add","args":[1,2]}}`)
}

// echoMain is the child's whole life.
func echoMain() {
	r := bufio.NewReader(os.Stdin)
	w := bufio.NewWriter(os.Stdout)
	for {
		body, err := readFrame(r)
		if err != nil {
			os.Exit(0)
		}
		writeFrame(w, body)
		if err := w.Flush(); err != nil {
			os.Exit(0)
		}
	}
}

func writeFrame(w *bufio.Writer, body []byte) {
	fmt.Fprintf(w, "Content-Length: %d\r\n\r\n", len(body))
	w.Write(body)
}

// readFrame reads one Content-Length frame (the headers this harness
// writes; no general LSP header parsing is needed for the floor).
func readFrame(r *bufio.Reader) ([]byte, error) {
	n := -1
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			break
		}
		if v, ok := strings.CutPrefix(line, "Content-Length: "); ok {
			if n, err = strconv.Atoi(v); err != nil {
				return nil, err
			}
		}
	}
	if n < 0 {
		return nil, fmt.Errorf("frame without Content-Length")
	}
	body := make([]byte, n)
	_, err := io.ReadFull(r, body)
	return body, err
}

// echoChild starts the echo child with its pipes.
type echoChild struct {
	cmd *exec.Cmd
	w   *bufio.Writer
	r   *bufio.Reader
	in  io.WriteCloser
}

func startEcho(self string) (*echoChild, error) {
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), echoEnv+"=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &echoChild{cmd: cmd, w: bufio.NewWriter(in), r: bufio.NewReader(out), in: in}, nil
}

func (e *echoChild) close() {
	e.in.Close()
	e.cmd.Wait()
}

// pingPong sends msg and waits for the echo n times, after warm-up rounds.
func (e *echoChild) pingPong(msg []byte, warm, n int) (Sample, error) {
	s := make(Sample, 0, n)
	for i := 0; i < warm+n; i++ {
		start := time.Now()
		writeFrame(e.w, msg)
		if err := e.w.Flush(); err != nil {
			return nil, err
		}
		if _, err := readFrame(e.r); err != nil {
			return nil, err
		}
		if i >= warm {
			s = append(s, time.Since(start))
		}
	}
	return s, nil
}
