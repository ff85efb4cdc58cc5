package sandbox

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strings"
	"sync"
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

const (
	// compileChildEnv marks a compile child; its value is the protocol
	// version, so a child of another build refuses instead of misreading.
	compileChildEnv      = "SANDBOXD_COMPILE_CHILD"
	compileChildProtocol = "1"
)

// IsCompileChild reports whether this process was started by an Engine to
// compile one module. A program that uses an Engine must, first thing in
// main (and a test binary in TestMain), do:
//
//	if sandbox.IsCompileChild() {
//		os.Exit(sandbox.CompileChildMain())
//	}
func IsCompileChild() bool { return os.Getenv(compileChildEnv) == compileChildProtocol }

// The protocol is one frame each way: the request on the child's stdin,
// the reply on its stdout. A frame is a 4-byte big-endian length, that
// many bytes of JSON header, then the header's Payload bytes as they are,
// so a module of tens of MiB is neither encoded nor copied on the way.

// childRequest heads the request; the payload is the module's bytes.
type childRequest struct {
	Payload        int    // wasm, or WAT text
	Path           string // the module file the bytes came from, if any: WAT errors must not quote it
	MemoryBytes    uint64 // RLIMIT_DATA of the child
	MaxModuleBytes int    // bound on the wasm a WAT text becomes
}

// childReply heads the reply; the payload is the compiled module.
type childReply struct {
	Payload  int // Module.Serialize of the instrumented module
	Err      *childError
	ID       string        // ModuleID of the wasm bytes
	WasmSize int           // their length
	Info     *wasmbin.Info // what the rewrite learnt about the module
}

// childError is an *Error that crossed the process boundary.
type childError struct {
	Kind    Kind
	Message string
}

const maxFrameHeader = 16 << 20 // a reply's Info grows with the module's memories and tables

func writeFrame(w *bufio.Writer, header any, payload moduleBytes) error {
	h, err := json.Marshal(header)
	if err != nil {
		return err
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(h)))
	w.Write(n[:])
	w.Write(h)
	if _, err := payload.writeTo(w); err != nil {
		return err
	}
	return w.Flush()
}

// readFrameHeader decodes a frame's header; the payload follows in r.
func readFrameHeader(r io.Reader, header any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxFrameHeader {
		return fmt.Errorf("frame header of %d bytes", size)
	}
	h := make([]byte, size)
	if _, err := io.ReadFull(r, h); err != nil {
		return err
	}
	return json.Unmarshal(h, header)
}

func readPayload(r io.Reader, n, max int) ([]byte, error) {
	if n < 0 || n > max {
		return nil, fmt.Errorf("payload of %d bytes (at most %d)", n, max)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}

// CompileChildMain serves the one compile its parent asked for, on stdin
// and stdout, and returns the process exit status. See IsCompileChild.
func CompileChildMain() int {
	quietRustBacktraces()
	engine := wasmtime.NewEngineWithConfig(wasmtimeConfig())
	// A child may be started ahead of need (a spare): it warms up while
	// it waits, so that its compile costs what one in the sidecar would.
	// It reads the request meanwhile and stops warming at the next step
	// once the request is there: a compile that waited for this child to
	// start does not wait for its warm-up too.
	in := bufio.NewReaderSize(os.Stdin, 64<<10)
	type header struct {
		req childRequest
		err error
	}
	arrived := make(chan header, 1)
	go func() {
		var h header
		h.err = readFrameHeader(in, &h.req)
		arrived <- h
	}()
	// A request already waiting (the first run of a cold start's usually
	// is by now) is served at once: the warm-up would only delay it (its
	// first step, at least, runs before the reader has its turn).
	if !stdinWaiting() {
		warmUp(engine, func() bool { return len(arrived) > 0 })
	}
	h := <-arrived
	req := h.req
	if err := h.err; err != nil {
		if !errors.Is(err, io.EOF) { // EOF: a spare the parent no longer needs
			fmt.Fprintf(os.Stderr, "sandboxd compile child: reading the request: %v\n", err)
		}
		return 2
	}
	// The limit comes before the bytes: holding them is part of the
	// compile's memory.
	if err := limitMemory(req.MemoryBytes); err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd compile child: %v\n", err)
		return 2
	}
	raw, err := readPayload(in, req.Payload, math.MaxInt32)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd compile child: reading the module: %v\n", err)
		return 2
	}
	// The parent keeps our stdin open until it has the reply: EOF means it
	// is gone, and nobody wants this compile any more.
	go func() {
		_, _ = io.Copy(io.Discard, in)
		os.Exit(3)
	}()
	reply, compiled := compileRequest(engine, req, raw)
	if err := writeFrame(bufio.NewWriterSize(os.Stdout, 64<<10), reply, moduleBytes{bin: compiled}); err != nil {
		fmt.Fprintf(os.Stderr, "sandboxd compile child: writing the reply: %v\n", err)
		return 2
	}
	return 0
}

// warmUpWAT touches the code paths of a compile (the text parser, the
// validator, the rewriter, Cranelift's common lowering), so that their
// pages are loaded before a request arrives.
const warmUpWAT = `(module (memory 1)
  (func (export "f") (param i32) (result i32) (local i32)
    (loop (local.set 1 (i32.add (local.get 1) (i32.load (local.get 0))))
      (br_if 0 (i32.eqz (memory.grow (local.get 0)))))
    (call 1 (local.get 1)))
  (func (param i32) (result i32) (i64.eqz (i64.extend_i32_u (local.get 0)))))`

// warmUp goes through a compile's steps on warmUpWAT, stopping before the
// next step once requested reports a real compile waiting. Cranelift's
// step (about 1.5 ms) is the longest a request can wait.
func warmUp(engine *wasmtime.Engine, requested func() bool) {
	wasm, err := wasmtime.Wat2Wasm(warmUpWAT)
	if err != nil {
		releaseWasmtimeError(err)
		return
	}
	if requested() {
		return
	}
	if err := wasmtime.ModuleValidate(engine, wasm); err != nil {
		releaseWasmtimeError(err)
		return
	}
	if requested() {
		return
	}
	instrumented, _, err := wasmbin.Instrument(wasm)
	if err != nil || requested() {
		return
	}
	wt, err := wasmtime.NewModule(engine, instrumented)
	if err != nil {
		releaseWasmtimeError(err)
		return
	}
	if !requested() {
		_, _ = wt.Serialize()
	}
}

// stdinWaiting reports whether standard input has bytes to read now (a
// poll that does not wait, and reads nothing).
func stdinWaiting() bool {
	var set syscall.FdSet
	set.Bits[0] = 1 << syscall.Stdin
	n, err := syscall.Select(syscall.Stdin+1, &set, nil, nil, &syscall.Timeval{})
	return err == nil && n > 0
}

// limitMemory sets RLIMIT_DATA: every allocation of the Go runtime, of
// wasmtime and of Cranelift fails past it, and a failed allocation ends
// the child (Rust aborts, Go throws) or fails the compile, which the
// parent reports as compile_memory. Not RLIMIT_AS: the Go runtime
// reserves over a GiB of address space it never touches.
func limitMemory(n uint64) error {
	if n == 0 {
		return nil
	}
	lim := syscall.Rlimit{Cur: n, Max: n}
	if err := syscall.Setrlimit(syscall.RLIMIT_DATA, &lim); err != nil {
		return fmt.Errorf("setrlimit(RLIMIT_DATA, %d): %w", n, err)
	}
	return nil
}

// compileRequest does the child's work: convert, validate, instrument,
// compile, serialize.
func compileRequest(engine *wasmtime.Engine, req childRequest, raw []byte) (*childReply, []byte) {
	fail := func(err error) (*childReply, []byte) {
		var se *Error
		if errors.As(err, &se) {
			return &childReply{Err: &childError{Kind: se.Kind, Message: se.Message}}, nil
		}
		return &childReply{Err: &childError{Kind: KindHost, Message: err.Error()}}, nil
	}
	wasm, err := toWasm(raw, req.Path, req.MaxModuleBytes)
	if err != nil {
		return fail(err)
	}
	wt, info, err := compileWasm(engine, wasm)
	if err != nil {
		return fail(err)
	}
	compiled, err := wt.Serialize()
	if err != nil {
		defer releaseWasmtimeError(err)
		return fail(classifyCompileFailure(err.Error()))
	}
	return &childReply{Payload: len(compiled), ID: ModuleID(wasm), WasmSize: len(wasm), Info: info}, compiled
}

// toWasm converts text to binary (bytes that start with the wasm magic
// are binary already), bounding the result by max. Errors about a module
// file name its path and the line and column, never its text.
func toWasm(raw []byte, path string, max int) ([]byte, error) {
	if isWasmBinary(raw) {
		return raw, nil
	}
	wasm, err := wasmtime.Wat2Wasm(string(raw))
	if err != nil {
		defer releaseWasmtimeError(err)
		if path != "" {
			return nil, &Error{Kind: KindInvalidModule, Message: fmt.Sprintf("module file %q is neither a wasm binary nor valid WAT%s", path, watLocation(err.Error()))}
		}
		return nil, &Error{Kind: KindInvalidModule, Message: "invalid WAT: " + cleanMessage(err.Error())}
	}
	if len(wasm) > max {
		return nil, tooBig(int64(len(wasm)), max)
	}
	return wasm, nil
}

// compileWasm validates wasm, instruments it and compiles the result. The
// caller's bytes are always validated first, with the engine's feature
// set: the rewriter assumes a valid module, and an invalid one (a global
// index past the module's own count, say) could otherwise name what the
// rewrite injects.
func compileWasm(engine *wasmtime.Engine, wasm []byte) (*wasmtime.Module, *wasmbin.Info, error) {
	if err := wasmtime.ModuleValidate(engine, wasm); err != nil {
		defer releaseWasmtimeError(err)
		return nil, nil, classifyCompileFailure(err.Error())
	}
	instrumented, info, err := wasmbin.Instrument(wasm)
	if err != nil {
		return nil, nil, &Error{Kind: KindInvalidModule, Message: "unsupported module: " + err.Error(), err: err}
	}
	wt, err := wasmtime.NewModule(engine, instrumented)
	if err != nil {
		defer releaseWasmtimeError(err)
		return nil, nil, classifyCompileFailure(err.Error())
	}
	return wt, info, nil
}

// classifyCompileFailure turns a wasmtime error into invalid_module, or
// into a compile_memory error when it says an allocation failed.
func classifyCompileFailure(msg string) *Error {
	msg = cleanMessage(msg)
	if outOfMemory(msg) {
		return &Error{Kind: KindCompileLimitExceeded, Message: "compiling the module ran out of memory: " + firstLine(msg), Resource: ResourceCompileMemory}
	}
	return &Error{Kind: KindInvalidModule, Message: msg}
}

// outOfMemory recognises what the Rust allocator, the Go runtime and the
// kernel say when an allocation fails (a thread's stack is an allocation
// too: pthread_create fails under the limit).
func outOfMemory(text string) bool {
	for _, marker := range []string{"memory allocation of", "out of memory", "Cannot allocate memory", "cannot allocate memory", "os error 12", "pthread_create failed"} {
		if strings.Contains(text, marker) {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------------------
// The parent's side

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
	c, err := e.takeChild()
	defer e.refillSpareAfterCompile() // if takeChild did not
	if err != nil {
		return nil, &Error{Kind: KindHost, Message: "cannot start the compile process: " + err.Error(), err: err}
	}
	cmd, stdin, stdout, stderr := c.cmd, c.stdin, c.stdout, c.stderr

	// Whatever happens next, the child has exited or is killed when this
	// function returns, and is waited for, here or by a reaper.
	var once sync.Once
	var why error // what ended the child early: errCancelled or errCompileTime
	kill := func(reason error) {
		once.Do(func() {
			why = reason
			_ = cmd.Process.Kill()
		})
	}
	timer := time.AfterFunc(lim.timeout, func() { kill(errCompileTime) })
	defer timer.Stop()
	stopWatch := context.AfterFunc(ctx, func() { kill(errCancelled) })
	defer stopWatch()

	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		// stdin stays open: closing it tells the child to give up.
		_ = writeFrame(bufio.NewWriterSize(stdin, 64<<10), req, mod)
	}()
	var reply childReply
	out := bufio.NewReaderSize(stdout, 64<<10)
	readErr := readFrameHeader(out, &reply)
	var compiled []byte
	if readErr == nil {
		// The child cannot have produced more than its memory limit.
		if compiled, readErr = readPayload(out, reply.Payload, int(min(lim.memoryBytes, math.MaxInt32))); readErr != nil {
			kill(errBadReply) // it would block writing the rest
		}
	}
	_ = stdin.Close() // a child still running without a reply exits on EOF
	if readErr == nil {
		// Its work is done: it is killed rather than waited for, since an
		// exiting process may wait long for a core on a busy machine.
		kill(errDone)
		e.reap(cmd, wrote)
		return childOutcome(&reply, compiled, lim)
	}
	once.Do(func() {}) // no kill from here on: why is settled
	switch {
	case errors.Is(why, errCancelled):
		e.reap(cmd, wrote)
		return nil, &Error{Kind: KindCancelled, Message: "compile cancelled by the caller", err: errCancelled}
	case errors.Is(why, errCompileTime):
		e.reap(cmd, wrote)
		return nil, &Error{Kind: KindCompileLimitExceeded, Resource: ResourceCompileTime, Limit: uint64(lim.timeout / time.Millisecond),
			Message: fmt.Sprintf("compiling the module took longer than the compile time limit of %d ms", lim.timeout/time.Millisecond)}
	}
	waitErr := cmd.Wait()
	<-wrote
	// The child died without a reply. An allocation that failed under the
	// memory limit ends it with a message on stderr (Rust aborts, Go
	// throws); a signal we did not send (SIGSEGV for a stack that could not
	// grow, SIGKILL from the kernel's OOM killer) is memory too.
	head := stderr.String()
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

var (
	errCompileTime = errors.New("compile time limit")
	errBadReply    = errors.New("reply past the memory limit")
	errDone        = errors.New("reply read")
)

// reap waits for a child that was killed, in the background; Close waits
// for every reaper.
func (e *Engine) reap(cmd *exec.Cmd, wrote <-chan struct{}) {
	e.reapers.Add(1)
	go func() {
		defer e.reapers.Done()
		_ = cmd.Wait()
		<-wrote
	}()
}

func killedBySignal(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

// childProc is a started compile child, waiting for its request.
type childProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	stderr *headBuffer
}

// startChild starts a compile child.
func (e *Engine) startChild() (*childProc, error) {
	exe, err := e.childExecutable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	// The child inherits nothing from the parent's environment: it needs
	// no secrets to compile, and no backtraces should reach its stderr.
	cmd.Env = []string{compileChildEnv + "=" + compileChildProtocol, "RUST_BACKTRACE=0", "RUST_LIB_BACKTRACE=0", "GOMAXPROCS=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c := &childProc{cmd: cmd, stderr: &headBuffer{max: 8 << 10}}
	cmd.Stderr = c.stderr
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if c.stdout, err = cmd.StdoutPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	e.childStarts.Add(1)
	return c, nil
}

// takeChild returns the spare child, started ahead of need, or starts one.
// A new module then pays for writing and reading pipes, not for starting
// and warming a process. A compile that finds the spare still being
// started (the first module after a start usually does) waits for that
// start rather than starting a second child: a second start takes as
// long, and the two would share the cores (measured on 2 cores: a third
// of cold starts did this, each about 1 ms slower). Only one compile
// waits so; others start their own. The next spare starts at once when
// the machine has a core to spare for it beside the compiles and the
// sidecar (spareBeside); otherwise after this compile is over (the
// caller's refillSpareAfterCompile), since its start-up (about 4 ms of
// CPU) would slow the compile a caller waits for: measured on 2 cores, a
// first run 2-3 ms slower after a restart. A OneShot engine keeps no
// spare after its first compile. Engine.Close kills the spare.
func (e *Engine) takeChild() (*childProc, error) {
	e.spareMu.Lock()
	if e.spare == nil && e.spareStarting && !e.spareClaimed {
		e.spareClaimed = true
		for e.spareStarting { // a fork and exec: bounded, not worth a ctx
			e.spareStarted.Wait()
		}
		e.spareClaimed = false
	}
	if e.cfg.OneShot {
		e.spareClosed = true // no refill
	}
	c := e.spare
	e.spare = nil
	e.spareMu.Unlock()
	if e.spareBeside {
		e.refillSpare()
	}
	if c != nil {
		return c, nil
	}
	return e.startChild()
}

// spareRefillDelay is how long after a compile the next spare starts
// (without spareBeside). The caller of the compile still has work to do
// (load the module, run it, answer), and the spare's start-up would share
// the cores with it: on 2 cores under load, the next spare started as the
// compile ended made the first run of a cold start about 1 ms slower. A
// new module arriving before the spare is started starts its own child,
// as it would have to without the delay had it arrived at once.
const spareRefillDelay = 5 * time.Millisecond

// refillSpareAfterCompile starts a spare child spareRefillDelay after a
// compile ended, unless a compile is running by then (its end tries
// again).
func (e *Engine) refillSpareAfterCompile() {
	e.spareMu.Lock()
	defer e.spareMu.Unlock()
	if e.spareClosed || e.compileInProcess {
		return
	}
	if e.spareTimer == nil {
		e.spareTimer = time.AfterFunc(e.refillDelay, func() {
			if len(e.compileSlots) == 0 {
				e.refillSpare()
			}
		})
		return
	}
	e.spareTimer.Reset(e.refillDelay)
}

// refillSpare starts a spare child unless one is there or being started,
// or the engine keeps no more spares (closing, or OneShot and its spare
// taken).
func (e *Engine) refillSpare() {
	e.spareMu.Lock()
	defer e.spareMu.Unlock()
	if e.spare != nil || e.spareStarting || e.spareClosed || e.compileInProcess {
		return
	}
	e.spareStarting = true
	e.spareWG.Add(1)
	go func() {
		defer e.spareWG.Done()
		c, err := e.startChild()
		e.spareMu.Lock()
		defer e.spareMu.Unlock()
		e.spareStarting = false
		e.spareStarted.Broadcast()
		switch {
		case err != nil: // takeChild will start one and report the error
		case e.spareClosed:
			c.discard()
		default:
			e.spare = c
		}
	}()
}

// closeSpare stops keeping a spare, waits for one being started and ends
// the one there is.
func (e *Engine) closeSpare() {
	e.spareMu.Lock()
	e.spareClosed = true
	if e.spareTimer != nil {
		e.spareTimer.Stop() // one that fired finds spareClosed
	}
	c := e.spare
	e.spare = nil
	e.spareMu.Unlock()
	e.spareWG.Wait()
	if c != nil {
		c.discard()
	}
}

// discard ends a child that was given no request: EOF on its stdin ends
// it, a kill makes sure.
func (c *childProc) discard() {
	_ = c.stdin.Close()
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}

// childExecutable is the program re-executed as compile child: this one.
func (e *Engine) childExecutable() (string, error) {
	if IsCompileChild() {
		// A program that does not dispatch the mode would otherwise start
		// children of children.
		return "", errors.New("this process is a compile child that did not dispatch the mode (call sandbox.CompileChildMain first in main)")
	}
	e.exeOnce.Do(func() { e.exe, e.exeErr = os.Executable() })
	return e.exe, e.exeErr
}

// headBuffer keeps the first max bytes written to it (a child's stderr:
// enough to classify its death, never unbounded).
type headBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *headBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if room := t.max - len(t.b); room > 0 {
		t.b = append(t.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (t *headBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
