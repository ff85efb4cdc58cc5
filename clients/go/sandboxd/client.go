// Package sandboxd is a Go client of the sandboxd sidecar: it spawns
// `sandboxd serve` (or speaks over any pipe pair), pipelines requests,
// routes each run's log notifications to its caller and turns run errors
// into *Error values carrying the kind.
//
// It serves the project's integration tests and benchmarks, and Go
// programs that prefer a process boundary to linking wasmtime. The module
// is not published: a program uses it from a local checkout through a
// `replace` line in its go.mod (clients/go/README.md).
//
// # Finding the sidecar
//
// Start(ctx, "", opts) runs the binary FindBinary finds: $SANDBOXD_BIN,
// else `sandboxd` on PATH, else bin/sandboxd of the checkout the
// program's go.mod replaces the module with, or that holds the current
// directory. A non-empty binary is used instead (a path, or a name on
// PATH). Nothing found is an error wrapping ErrBinaryNotFound that names
// what was tried.
//
// # Compiling
//
// Compile compiles a module with the sidecar's default compile limits;
// CompileWith takes all of `compile`'s params: Limits and Preinitialize,
// which compiles a reactor (a Go PDK plugin, anything with _initialize)
// pre-initialised, wizer-style (docs/preinit.md). The result's ModuleID
// is the pre-initialised module's own; runs and instances use it through
// ModuleSpec{ID: &id}. A module that cannot be pre-initialised
// is an *Error of kind invalid_module.
//
// # Design: the caller reads
//
// There is no reader goroutine. Handing each response from a reader
// goroutine to the parked caller costs a goroutine wake-up (50-100 µs on a
// small, busy machine), more than the sidecar takes to answer. Instead a
// caller waiting for its response becomes the reader: it takes the one
// reader token, reads frames itself and dispatches them until its own
// response arrives, then puts the token back for any other waiter. A
// sequential caller thus sends, reads and returns on one goroutine.
//
// Other callers' responses are handed to them through their done channel;
// log notifications are passed to the onLog of their run as they are read.
// Since the sidecar writes every log of a run before its response, and
// frames are dispatched in read order by one token holder at a time, a
// run's logs all reach onLog, in order, before Run returns.
package sandboxd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/internal/framing"
	"github.com/sandboxd/sandboxd/internal/pipewait"
	"github.com/sandboxd/sandboxd/protocol"
)

// cancelGrace is how long a call whose context ended keeps waiting for the
// server's answer to its $/cancelRequest (which comes within milliseconds
// from a healthy sidecar).
var cancelGrace = 5 * time.Second // a var for tests

// Client is a connection to one sidecar. It is safe for concurrent use;
// concurrent calls are pipelined over the one pipe.
type Client struct {
	nextID atomic.Uint64

	// Writing: one message per lock, flushed at once.
	wmu     sync.Mutex
	w       *framing.Writer
	wc      io.WriteCloser
	wclosed bool
	writers atomic.Int32 // callers in write, holding wmu or waiting for it

	// Reading: whoever holds the token (taken from readTok, capacity 1)
	// owns fr and is the only one reading.
	readTok chan struct{}
	fr      *frameReader
	rc      io.Closer // our end of the sidecar's stdout, if Start made it

	mu      sync.Mutex
	pending map[uint64]*call
	dead    error // set once the stream has ended; wraps ErrClosed

	closing   atomic.Bool // Close has begun: new calls get ErrClosed
	closeOnce sync.Once
	closeErr  error

	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd.Wait returned (Start only)
	exitErr error         // cmd.Wait's result, readable after exited

	modules moduleCache // the encodings of the modules sent last (modcache.go)

	// Releases of instances whose instantiate answer came after its caller
	// gave up (releaseLate). Close stops new ones (under mu) and waits.
	lateReleases  sync.WaitGroup
	lateReleaseOK bool // false once Close has begun; guarded by mu

	// Host calls (host.go): the client-wide handler, the host calls being
	// served by id (guarded by mu), and the context of every handler,
	// cancelled when the stream ends or Close is done with the sidecar.
	host       HostHandler
	serving    map[string]*hostRequest
	hostCtx    context.Context
	hostCancel context.CancelFunc
}

// call is one request waiting for its response.
type call struct {
	id       uint64
	onLog    func(seq int, line string)
	onLevel  func(seq int, level, line string) // instead of onLog, if set
	onOutput func(seq int, stream string, data []byte)
	host     HostHandler   // serves the host calls its guest makes
	done     chan struct{} // closed once result or err is set
	// expired is closed when ctx has ended and the grace after the cancel
	// has run out; nil (never ready) for contexts that cannot end.
	expired chan struct{}

	// dst receives the result, decoded by whichever goroutine reads the
	// response (the caller waits for done before it looks at dst).
	dst any
	err error

	// late, if set, is given the result of a response that arrives after
	// the caller gave up (instantiate: the instance it made is released);
	// such a call stays pending, abandoned (guarded by Client.mu), until
	// its answer comes or the stream ends.
	late      func(result []byte)
	abandoned bool
}

// Options for Start.
type Options struct {
	Args   []string  // extra `serve` flags
	Stderr io.Writer // the sidecar's stderr; default os.Stderr
	NDJSON bool      // use --framing=ndjson
}

// Start spawns `binary serve` and connects to it. binary is found by
// FindBinary: a path, or a name looked up on PATH; empty, it is
// $SANDBOXD_BIN, else `sandboxd` on PATH, else the checkout's
// bin/sandboxd. A binary not found is an error wrapping
// ErrBinaryNotFound that names what was tried. ctx is not used to bound
// the process (Close ends it); it is kept for compatibility.
func Start(ctx context.Context, binary string, opts Options) (*Client, error) {
	binary, err := FindBinary(binary)
	if err != nil {
		return nil, err
	}
	args := append([]string{"serve"}, opts.Args...)
	if opts.NDJSON {
		args = append(args, "--framing=ndjson")
	}
	cmd := exec.Command(binary, args...)
	cmd.Stderr = opts.Stderr
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	// Plain os.Pipes rather than StdinPipe/StdoutPipe: cmd.Wait closes the
	// latter when the process exits, which would lose responses still in
	// the pipe. With our own pipes a goroutine can wait for the exit status
	// (to explain a dead sidecar) while callers drain stdout.
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	err = cmd.Start()
	inR.Close() // the child has its own copies now
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("starting %s: %w", binary, err)
	}
	// On Linux a caller waiting for its answer sleeps in ppoll(2) rather
	// than in Go's poller, whose parking thread spins looking for work
	// (pipewait; read deadlines and Close work as on the pipe).
	var stdout io.Reader = outR
	var rc io.Closer = outR
	if p, err := pipewait.New(outR, true); err == nil {
		stdout, rc = p, p
	}
	c := New(ctx, stdout, inW, opts.NDJSON)
	c.cmd, c.rc, c.exited = cmd, rc, make(chan struct{})
	go func() {
		c.exitErr = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// Process returns the sidecar process, if Start spawned it.
func (c *Client) Process() *os.Process {
	if c.cmd == nil {
		return nil
	}
	return c.cmd.Process
}

// New speaks to a sidecar over r (its stdout) and w (its stdin). ctx is not
// used; it is kept for compatibility.
func New(ctx context.Context, r io.Reader, w io.WriteCloser, ndjson bool) *Client {
	mode := framing.ContentLength
	if ndjson {
		mode = framing.NDJSON
	}
	c := &Client{
		w:       framing.NewWriter(w, mode),
		wc:      w,
		readTok: make(chan struct{}, 1),
		fr:      newFrameReader(r, ndjson),
		pending: map[uint64]*call{},

		lateReleaseOK: true,
	}
	c.hostCtx, c.hostCancel = context.WithCancel(context.Background())
	c.readTok <- struct{}{}
	return c
}

// Error is an error response from the sidecar.
type Error struct {
	Code    int64
	Message string
	Data    json.RawMessage
}

func (e *Error) Error() string { return fmt.Sprintf("sandboxd: %s (code %d)", e.Message, e.Code) }

// Kind is data.kind of a run error ("" for protocol errors).
func (e *Error) Kind() string {
	var d struct {
		Kind string `json:"kind"`
	}
	_ = json.Unmarshal(e.Data, &d)
	return d.Kind
}

// ErrClosed is returned by calls on a closed client or a dead sidecar. A
// dead sidecar's error wraps it with the reason (test with errors.Is).
var ErrClosed = errors.New("sandboxd: connection closed")

// Call sends one request and waits for its response. If ctx ends first the
// request is cancelled with $/cancelRequest and Call still waits (up to 5 s)
// for the server's answer, which is then returned.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	if c.closing.Load() {
		return ErrClosed
	}
	return c.call(ctx, method, params, result, RunHandlers{}, cancelGrace)
}

// The wire types a client fills in and reads, from package protocol (pure
// Go, shared with the sidecar), under the client's own names so that a
// program needs no other import; docs/protocol.md describes each.
type (
	// RunParams are the params of a run.
	RunParams = protocol.RunParams
	// ModuleSpec names a module: exactly one of WAT, Wasm (base64), ID (a
	// module id from an earlier compile or run) and Path (a file on the
	// sidecar's machine) is set; Str makes the pointers.
	ModuleSpec = protocol.ModuleSpec
	// CapabilitySpec grants host functions to a run or an instance; absent
	// means none.
	CapabilitySpec = protocol.CapabilitySpec
	// RandomSpec seeds host::random.
	RandomSpec = protocol.RandomSpec
	// WASISpec grants WASI: args, env, stdin, files and directories
	// (DirSpec).
	WASISpec = protocol.WASISpec
	// DirSpec is one directory a WASI guest sees.
	DirSpec = protocol.DirSpec
	// RunResult is the result of a run.
	RunResult = protocol.RunResult
	// WireValue is one typed value of a result.
	WireValue = protocol.WireValue
	// CompileParams are the params of CompileWith.
	CompileParams = protocol.CompileParams
	// CompileResult is the result of Compile.
	CompileResult = protocol.CompileResult
	// InitializeResult is what Initialize returns: the server, its engine,
	// capabilities, default limits and concurrency.
	InitializeResult = protocol.InitializeResult
	// StatsResult is the result of Stats.
	StatsResult = protocol.StatsResult
	// Bytes is a byte string on the wire ({"text"} or {"base64"} in JSON),
	// as a plugin's output or a WASI guest's stdout.
	Bytes = protocol.Bytes
)

// Initialize calls `initialize`, which says what the sidecar is and
// offers. Calling it is optional: the sidecar serves every method without.
func (c *Client) Initialize(ctx context.Context) (*InitializeResult, error) {
	var res InitializeResult
	if err := c.Call(ctx, protocol.MethodInitialize, map[string]any{}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Run calls `run`. onLog, if set, receives the run's log lines in order
// before Run returns. It is called on whichever calling goroutine is
// reading at the time, so it must be quick and must not call the Client.
func (c *Client) Run(ctx context.Context, p RunParams, onLog func(seq int, line string)) (*RunResult, error) {
	return c.RunWith(ctx, p, RunHandlers{Log: onLog})
}

// RunHandlers receive a run's notifications, in order, before RunWith
// returns. Like onLog, they are called on whichever calling goroutine is
// reading at the time: they must be quick and must not call the Client.
type RunHandlers struct {
	Log func(seq int, line string)
	// Output receives the pieces of a WASI guest's stdout and stderr
	// (stream "stdout" or "stderr") as the sidecar sends them; concatenated
	// per stream they are the result's stdout and stderr.
	Output func(seq int, stream string, data []byte)
	// LevelLog, if set, receives the log lines instead of Log, with their
	// level: an Extism log_* line's ("trace" … "error"), "" for host::log.
	LevelLog func(seq int, level, line string)
	// Host serves the host functions the run declares (RunParams.HostFunctions);
	// given to InstantiateWith, the instance's, for its life. Unlike the
	// others it may block and may call the Client (see HostHandler).
	Host HostHandler
}

// RunWith calls `run` with handlers for its log and output notifications.
// A WASI run's result has ExitCode, Stdout and Stderr set (WASIResult).
func (c *Client) RunWith(ctx context.Context, p RunParams, h RunHandlers) (*RunResult, error) {
	if c.closing.Load() {
		return nil, ErrClosed
	}
	var res RunResult
	if p.HostCall == "" {
		p.HostCall = hostCallOf(ctx)
	}
	if err := c.call(ctx, protocol.MethodRun, p, &res, h, cancelGrace); err != nil {
		return nil, err
	}
	return &res, nil
}

// Compile calls `compile` for m with the sidecar's default compile limits.
func (c *Client) Compile(ctx context.Context, m ModuleSpec) (*CompileResult, error) {
	return c.CompileWith(ctx, CompileParams{Module: m})
}

// CompileWith calls `compile` with all its params: compile limits
// (compileTimeoutMs, compileMemoryBytes) and Preinitialize, which
// compiles a reactor pre-initialised (docs/preinit.md) under a module id
// of its own, the one later runs and instances name with ModuleSpec.ID.
func (c *Client) CompileWith(ctx context.Context, p CompileParams) (*CompileResult, error) {
	var res CompileResult
	if err := c.Call(ctx, protocol.MethodCompile, p, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Stats calls `stats`.
func (c *Client) Stats(ctx context.Context) (*StatsResult, error) {
	var res StatsResult
	if err := c.Call(ctx, protocol.MethodStats, nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Str returns a pointer to s, for ModuleSpec fields.
func Str(s string) *string { return &s }

// Close performs the shutdown/exit handshake, closes the sidecar's stdin
// and, for a spawned sidecar, waits for it to exit (killing it after 5 s).
// Idempotent: later calls return the first one's result.
func (c *Client) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.close() })
	return c.closeErr
}

func (c *Client) close() error {
	c.closing.Store(true)
	c.mu.Lock()
	c.lateReleaseOK = false
	c.mu.Unlock()
	defer c.lateReleases.Wait() // each is one write, which ends or fails once the pipe is closed
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// shutdown waits for in-flight runs, so their answers are read first
	// (their host calls are still served meanwhile).
	shutdownErr := c.call(ctx, protocol.MethodShutdown, nil, nil, RunHandlers{}, 0)
	c.hostCancel()
	if !errors.Is(shutdownErr, ErrClosed) {
		// Not after the stream died: a peer that stopped reading would
		// block the write forever on an unbuffered pipe.
		c.notify(protocol.MethodExit, nil)
	}
	c.wmu.Lock()
	c.wclosed = true
	_ = c.w.Flush()
	_ = c.wc.Close()
	c.wmu.Unlock()
	if c.cmd == nil {
		return shutdownErr
	}
	var err error
	select {
	case <-c.exited:
		err = c.exitErr
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
		err = errors.New("sandboxd: sidecar did not exit; killed")
	}
	// The process is gone: drain what it wrote (answers to calls that
	// raced with Close) up to the end of its stdout, which fails whatever
	// is still pending, then close our end. A reader already at it sees
	// the same end and gives the token back. The deadline bounds the drain
	// should a grandchild hold the pipe open.
	if c.fr.dl != nil {
		_ = c.fr.dl.SetReadDeadline(time.Now().Add(time.Second))
	}
	select {
	case <-c.readTok:
		for {
			body, err := c.fr.next()
			if errors.Is(err, errPoked) {
				err = io.EOF // out of patience, not a broken stream
			}
			if err != nil {
				c.fail(err)
				break
			}
			c.dispatch(body, nil) // no caller reads here: every host call gets a goroutine
		}
		_ = c.rc.Close()
		c.readTok <- struct{}{}
	case <-time.After(2 * time.Second):
	}
	if shutdownErr != nil {
		return shutdownErr
	}
	return err
}
