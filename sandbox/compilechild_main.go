package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"syscall"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox/internal/wasmbin"
)

// The compile child's side: its main (read the one request, under the
// memory limit it sets on itself, while it warms up) and the compile it
// does. The engine's side is compilechild_driver.go; the frames between
// them, compilechild_frame.go.

// IsCompileChild reports whether this process was started by an Engine to
// compile one module. A program that uses an Engine must, first thing in
// main (and a test binary in TestMain), do:
//
//	if sandbox.IsCompileChild() {
//		os.Exit(sandbox.CompileChildMain())
//	}
func IsCompileChild() bool { return os.Getenv(compileChildEnv) == compileChildProtocol }

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
			return nil, &Error{Kind: KindInvalidModule, Message: fmt.Sprintf("module file %s is neither a wasm binary nor valid WAT%s", protocol.QuoteN(path, maxQuotedPath), watLocation(err.Error()))}
		}
		return nil, &Error{Kind: KindInvalidModule, Message: "invalid WAT: " + engineMessage(err.Error())}
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
		return nil, nil, &Error{Kind: KindInvalidModule, Message: "unsupported module: " + clipQuoted(err.Error()), err: err}
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
		return &Error{Kind: KindCompileLimitExceeded, Message: "compiling the module ran out of memory: " + engineMessage(firstLine(msg)), Resource: ResourceCompileMemory}
	}
	return &Error{Kind: KindInvalidModule, Message: engineMessage(msg)}
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
