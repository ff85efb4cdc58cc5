package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/sandbox/internal/wasmbin"
)

// The compile fence. Compiling untrusted bytes is as dangerous as running
// them: a 300 KB module of nested loops kept Cranelift busy for 27 s and
// 2.2 GB, and wasmtime's parser took 1.6 GB for a 58 MiB WAT text; none
// of it can be interrupted from inside. So the engine never compiles
// caller bytes itself. It re-executes its own program as a compile child
// (the process finds the mode in its environment: IsCompileChild), hands
// it the bytes on stdin, and reads back the module serialized by wasmtime
// (Module.Serialize), which it deserializes with an engine of the same
// settings. The child converts WAT, validates, instruments and compiles
// under a data-size limit (RLIMIT_DATA: heap and every private writable
// mapping, the Go runtime's and Rust's alike) that it sets on itself
// before it reads the bytes, and the parent kills it when the compile
// deadline passes or the caller cancels. When the child exits, its memory
// is the kernel's again.
//
// This file is the parent's side of one compile; the child's is
// compilechild_main.go, the frames between them compilechild_frame.go,
// and the children themselves (started ahead of need, ended, waited for)
// are the engine's childPool (compilechild_pool.go).

// compileLimits are the fences of one compile.
type compileLimits struct {
	timeout     time.Duration
	memoryBytes uint64
}

// childResult is a compile the child finished.
type childResult struct {
	id       string
	wasmSize int
	info     *wasmbin.Info
	compiled []byte
}

// compileInChildProcess runs one compile child for the module's bytes and
// returns its result, or the *Error that says why there is none. It
// returns promptly (the child killed) when ctx is done or the deadline
// passes.
func (e *Engine) compileInChildProcess(ctx context.Context, mod moduleBytes, path string, lim compileLimits) (*childResult, error) {
	req := childRequest{Payload: mod.size(), Path: path, MemoryBytes: lim.memoryBytes, MaxModuleBytes: e.cfg.MaxModuleBytes}
	if e.compileInProcess { // tests only: see export_test.go
		reply, compiled := compileRequest(wasmtime.NewEngineWithConfig(wasmtimeConfig()), req, mod.bytes())
		return childOutcome(reply, compiled, lim)
	}
	c, err := e.children.take()
	defer e.children.compileEnded() // the next spare, a little later
	if err != nil {
		return nil, &Error{Kind: KindHost, Message: "cannot start the compile process: " + err.Error(), err: err}
	}
	return c.compile(ctx, req, mod, lim)
}

// compile has the child compile mod and reads its reply. Whatever happens,
// the child has exited or is killed when it returns, and is waited for,
// here or in the background (childProc.reap).
func (c *childProc) compile(ctx context.Context, req childRequest, mod moduleBytes, lim compileLimits) (*childResult, error) {
	timer := time.AfterFunc(lim.timeout, func() { c.kill(errCompileTime) })
	defer timer.Stop()
	stopWatch := context.AfterFunc(ctx, func() { c.kill(errCancelled) })
	defer stopWatch()

	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		// stdin stays open: closing it tells the child to give up.
		_ = writeFrame(bufio.NewWriterSize(c.stdin, 64<<10), req, mod)
	}()
	var reply childReply
	out := bufio.NewReaderSize(c.stdout, 64<<10)
	readErr := readFrameHeader(out, &reply)
	var compiled []byte
	if readErr == nil {
		// The child cannot have produced more than its memory limit.
		if compiled, readErr = readPayload(out, reply.Payload, int(min(lim.memoryBytes, math.MaxInt32))); readErr != nil {
			c.kill(errBadReply) // it would block writing the rest
		}
	}
	_ = c.stdin.Close() // a child still running without a reply exits on EOF
	if readErr == nil {
		// Its work is done: it is killed rather than waited for, since an
		// exiting process may wait long for a core on a busy machine.
		c.kill(errDone)
		c.reap(wrote)
		return childOutcome(&reply, compiled, lim)
	}
	switch why := c.settle(); {
	case errors.Is(why, errCancelled):
		c.reap(wrote)
		return nil, errCompileCancelled()
	case errors.Is(why, errCompileTime):
		c.reap(wrote)
		return nil, &Error{Kind: KindCompileLimitExceeded, Resource: ResourceCompileTime, Limit: uint64(lim.timeout / time.Millisecond),
			Message: fmt.Sprintf("compiling the module took longer than the compile time limit of %d ms", lim.timeout/time.Millisecond)}
	}
	waitErr := c.wait(wrote)
	// The child died without a reply. An allocation that failed under the
	// memory limit ends it with a message on stderr (Rust aborts, Go
	// throws); a signal we did not send (SIGSEGV for a stack that could not
	// grow, SIGKILL from the kernel's OOM killer) is memory too.
	head := c.stderr.String()
	if outOfMemory(head) || killedBySignal(waitErr) {
		return nil, &Error{Kind: KindCompileLimitExceeded, Resource: ResourceCompileMemory, Limit: lim.memoryBytes,
			Message: fmt.Sprintf("compiling the module needed more than the compile memory limit of %d bytes", lim.memoryBytes),
			err:     fmt.Errorf("compile child: %v: %s", waitErr, head)}
	}
	cause := fmt.Errorf("compile child: wait %v, read %v: %s", waitErr, readErr, head)
	return nil, &Error{Kind: KindHost, Message: fmt.Sprintf("the compile process failed (%v)", waitErr), err: cause}
}

// childOutcome turns a whole reply into the result or its error.
func childOutcome(reply *childReply, compiled []byte, lim compileLimits) (*childResult, error) {
	if reply.Err != nil {
		se := &Error{Kind: reply.Err.Kind, Message: reply.Err.Message}
		if se.Kind == KindCompileLimitExceeded {
			se.Resource, se.Limit = ResourceCompileMemory, lim.memoryBytes
		}
		return nil, se
	}
	if reply.Info == nil || !strings.HasPrefix(reply.ID, IDPrefix) {
		return nil, &Error{Kind: KindHost, Message: "the compile process sent an incomplete reply"}
	}
	return &childResult{id: reply.ID, wasmSize: reply.WasmSize, info: reply.Info, compiled: compiled}, nil
}

// Why a child was killed (childProc.kill); errCancelled is the engine's.
var (
	errCompileTime = errors.New("compile time limit")
	errBadReply    = errors.New("reply past the memory limit")
	errDone        = errors.New("reply read")
)

func killedBySignal(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}
