// Package sandboxd is a Go client of the sandboxd sidecar: it spawns
// `sandboxd serve` (or speaks over any pipe pair), pipelines requests,
// routes each run's log notifications to its caller and turns run errors
// into *Error values carrying the kind.
//
// It serves the project's integration tests and benchmarks, and Go
// programs that prefer a process boundary to linking wasmtime.
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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/internal/framing"
	"github.com/sandboxd/sandboxd/internal/jsonscan"
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
}

// call is one request waiting for its response.
type call struct {
	id       uint64
	onLog    func(seq int, line string)
	onLevel  func(seq int, level, line string) // instead of onLog, if set
	onOutput func(seq int, stream string, data []byte)
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

// Start spawns `binary serve` and connects to it. ctx is not used to bound
// the process (Close ends it); it is kept for compatibility.
func Start(ctx context.Context, binary string, opts Options) (*Client, error) {
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

// RunParams are the params of a run; see docs/protocol.md.
type RunParams = protocol.RunParams

// Run calls `run`. onLog, if set, receives the run's log lines in order
// before Run returns. It is called on whichever calling goroutine is
// reading at the time, so it must be quick and must not call the Client.
func (c *Client) Run(ctx context.Context, p RunParams, onLog func(seq int, line string)) (*protocol.RunResult, error) {
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
}

// RunWith calls `run` with handlers for its log and output notifications.
// A WASI run's result has ExitCode, Stdout and Stderr set (WASIResult).
func (c *Client) RunWith(ctx context.Context, p RunParams, h RunHandlers) (*protocol.RunResult, error) {
	if c.closing.Load() {
		return nil, ErrClosed
	}
	var res protocol.RunResult
	if err := c.call(ctx, protocol.MethodRun, p, &res, h, cancelGrace); err != nil {
		return nil, err
	}
	return &res, nil
}

// Compile calls `compile`.
func (c *Client) Compile(ctx context.Context, m protocol.ModuleSpec) (*protocol.CompileResult, error) {
	var res protocol.CompileResult
	if err := c.Call(ctx, protocol.MethodCompile, protocol.CompileParams{Module: m}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Stats calls `stats`.
func (c *Client) Stats(ctx context.Context) (*protocol.StatsResult, error) {
	var res protocol.StatsResult
	if err := c.Call(ctx, protocol.MethodStats, nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Str returns a pointer to s, for ModuleSpec fields.
func Str(s string) *string { return &s }

// outMsg is a request or notification as written.
type outMsg struct {
	JSONRPC string  `json:"jsonrpc"`
	ID      *uint64 `json:"id,omitempty"`
	Method  string  `json:"method"`
	Params  any     `json:"params,omitempty"`
}

// call sends one request and waits for its answer. With grace 0 a context
// that ends makes it return at once, without $/cancelRequest (Close uses
// this for shutdown).
func (c *Client) call(ctx context.Context, method string, params, result any, h RunHandlers, grace time.Duration) error {
	id := c.nextID.Add(1)
	body, err := c.encodeRequest(id, method, params)
	if err != nil {
		return fmt.Errorf("sandboxd: encoding %s params: %w", method, err)
	}
	cl := &call{id: id, onLog: h.Log, onLevel: h.LevelLog, onOutput: h.Output, done: make(chan struct{}), dst: result}
	if method == protocol.MethodInstantiate {
		// An instance made for a caller who gave up must not be left
		// behind until idle eviction, whenever its answer comes.
		cl.late = c.releaseInstantiated
	}
	// Register before sending: the response may be read by another caller
	// the moment the request is out.
	c.mu.Lock()
	if c.dead != nil {
		err := c.dead
		c.mu.Unlock()
		return err
	}
	c.pending[id] = cl
	c.mu.Unlock()
	if err := c.write(body); err != nil {
		c.forget(cl)
		return err
	}
	if err := c.wait(ctx, cl, grace); err != nil {
		return err
	}
	var de *decodeError
	if errors.As(cl.err, &de) {
		return fmt.Errorf("sandboxd: decoding %s result: %w", method, de.err)
	}
	return cl.err
}

// forget removes cl from the pending calls. It reports false if cl was
// already taken out by a dispatcher, whose close of cl.done is then imminent.
func (c *Client) forget(cl *call) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[cl.id] != cl {
		return false
	}
	delete(c.pending, cl.id)
	return true
}

// wait blocks until cl is answered, reading the stream itself whenever the
// reader token is free. It returns non-nil only if it gave up (ctx ended
// and the grace ran out); otherwise cl.result/cl.err hold the answer.
func (c *Client) wait(ctx context.Context, cl *call, grace time.Duration) error {
	if ctx.Done() != nil {
		// The cancel is sent from its own goroutine so that a caller blocked
		// reading the stream cancels too; the server always answers a
		// cancelled run, which ends the wait. If it does not within the
		// grace, cl.expired is closed and a blocked reader is woken.
		cl.expired = make(chan struct{})
		var mu sync.Mutex
		var t *time.Timer
		returned := false
		expire := func() {
			close(cl.expired)
			c.poke()
		}
		stop := context.AfterFunc(ctx, func() {
			if grace <= 0 {
				expire()
				return
			}
			c.notify(protocol.MethodCancel, cancelParams{ID: cl.id})
			mu.Lock()
			if !returned {
				t = time.AfterFunc(grace, expire)
			}
			mu.Unlock()
		})
		defer func() {
			stop()
			mu.Lock()
			returned = true
			if t != nil {
				t.Stop() // no stray wake-up of a later reader
			}
			mu.Unlock()
		}()
	}
	select {
	case <-cl.done:
		return nil
	case <-c.readTok:
		c.readFor(cl)
		c.readTok <- struct{}{} // never blocks: we held the only token
		select {
		case <-cl.done:
			return nil
		default: // readFor stopped because the grace ran out
		}
	case <-cl.expired:
	}
	if c.abandon(cl) {
		return ctx.Err()
	}
	<-cl.done // delivered meanwhile: take the answer after all
	return nil
}

// abandon is forget for a caller that gave up waiting: a call with a late
// handler stays pending, marked abandoned, so that its answer still
// reaches the handler.
func (c *Client) abandon(cl *call) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[cl.id] != cl {
		return false
	}
	if cl.late != nil {
		cl.abandoned = true
	} else {
		delete(c.pending, cl.id)
	}
	return true
}

// releaseInstantiated is the late handler of instantiate: it releases the
// instance a successful answer names.
func (c *Client) releaseInstantiated(result []byte) {
	var r struct {
		Instance string `json:"instance"`
	}
	if json.Unmarshal(result, &r) == nil && r.Instance != "" {
		c.releaseLate(r.Instance)
	}
}

// releaseLate sends `release` for instance from a goroutine of its own:
// it is called by whoever is reading, which must not block writing (a
// sidecar that waits for its output to be read may not be reading its
// input). Nobody waits for the answer, which dispatch drops. Once Close
// has begun nothing is sent: the sidecar's exit takes the instance.
func (c *Client) releaseLate(instance string) {
	c.mu.Lock()
	if !c.lateReleaseOK || c.dead != nil {
		c.mu.Unlock()
		return
	}
	c.lateReleases.Add(1)
	c.mu.Unlock()
	body, err := c.encodeRequest(c.nextID.Add(1), protocol.MethodRelease, protocol.ReleaseParams{Instance: instance})
	go func() {
		defer c.lateReleases.Done()
		if err == nil {
			_ = c.write(body) // a dead stream shows up on the read side
		}
	}()
}

// readFor reads and dispatches frames, holding the reader token, until cl
// is answered, the stream ends, or cl's grace after a cancel runs out.
func (c *Client) readFor(cl *call) {
	for {
		select {
		case <-cl.done:
			return
		case <-cl.expired:
			return
		default:
		}
		body, err := c.fr.next()
		if errors.Is(err, errPoked) {
			continue // woken to look at cl.expired (maybe another call's)
		}
		if err != nil {
			c.fail(err)
			return
		}
		c.dispatch(body)
	}
}

// poke wakes the goroutine blocked reading the stream, if the stream
// supports read deadlines (pipes from Start do), so that it can notice its
// grace ran out. Without deadlines a reader stuck on a silent sidecar waits
// for the next frame or the end of the stream.
func (c *Client) poke() {
	if c.fr.dl != nil {
		_ = c.fr.dl.SetReadDeadline(time.Now())
	}
}

// dispatch routes one message from the server. The frame is checked once
// (jsonscan.Valid) and stepped over (jsonscan) to find what it is; a response's
// result is then decoded straight into its caller's value, so a response
// costs one syntax pass over the frame and one decoding of its result.
func (c *Client) dispatch(body []byte) {
	if !jsonscan.Valid(body) {
		return // not JSON: nothing can be attributed to a call
	}
	var idRaw, method, params, result, errRaw []byte
	jsonscan.Members(bytes.TrimSpace(body), func(key, value []byte) {
		switch string(key) {
		case `"id"`:
			idRaw = value
		case `"method"`:
			method = value
		case `"params"`:
			params = value
		case `"result"`:
			result = value
		case `"error"`:
			errRaw = value
		}
	})
	if method != nil {
		switch string(method) {
		case `"` + protocol.NotifyLog + `"`:
			c.dispatchLog(params)
		case `"` + protocol.NotifyOutput + `"`:
			c.dispatchOutput(params)
		}
		return // other notifications and server requests: none are defined
	}
	id, err := strconv.ParseUint(string(idRaw), 10, 64)
	if err != nil {
		return // id null (a refused message) or not ours
	}
	c.mu.Lock()
	cl := c.pending[id]
	delete(c.pending, id)
	abandoned := cl != nil && cl.abandoned
	c.mu.Unlock()
	if cl == nil {
		return // a call that gave up after its grace
	}
	if abandoned { // its caller is gone: only the late handler cares
		if (errRaw == nil || string(errRaw) == "null") && result != nil {
			cl.late(result)
		}
		close(cl.done)
		return
	}
	switch {
	case errRaw != nil && string(errRaw) != "null":
		var we protocol.WireError // its Data is a copy: it outlives the frame
		if err := json.Unmarshal(errRaw, &we); err != nil {
			cl.err = &decodeError{err}
			break
		}
		e := &Error{Code: we.Code, Message: we.Message, Data: we.Data}
		if string(e.Data) == "null" {
			e.Data = nil
		}
		cl.err = e
	case cl.dst != nil && result != nil:
		if err := json.Unmarshal(result, cl.dst); err != nil {
			cl.err = &decodeError{err}
		}
	}
	close(cl.done)
}

// decodeError is a result the client could not decode.
type decodeError struct{ err error }

func (e *decodeError) Error() string { return e.err.Error() }

func (c *Client) dispatchLog(params json.RawMessage) {
	var p struct {
		ID    json.RawMessage `json:"id"`
		Seq   int             `json:"seq"`
		Line  string          `json:"line"`
		Level string          `json:"level"`
	}
	if json.Unmarshal(params, &p) != nil {
		return
	}
	id, err := strconv.ParseUint(string(p.ID), 10, 64)
	if err != nil {
		return
	}
	c.mu.Lock()
	cl := c.pending[id]
	if cl != nil && cl.abandoned {
		cl = nil // its caller has returned: no handler runs after that
	}
	c.mu.Unlock()
	if cl != nil && cl.onLevel != nil {
		cl.onLevel(p.Seq, p.Level, p.Line) // as onLog below
	} else if cl != nil && cl.onLog != nil {
		// Called without c.mu: onLog may take its time. It cannot race with
		// cl's own return, which needs this run's response, read later by
		// this or a following token holder.
		cl.onLog(p.Seq, p.Line)
	}
}

func (c *Client) dispatchOutput(params json.RawMessage) {
	var p struct {
		ID     json.RawMessage `json:"id"`
		Seq    int             `json:"seq"`
		Stream string          `json:"stream"`
		Data   protocol.Bytes  `json:"data"`
	}
	if json.Unmarshal(params, &p) != nil {
		return
	}
	id, err := strconv.ParseUint(string(p.ID), 10, 64)
	if err != nil {
		return
	}
	c.mu.Lock()
	cl := c.pending[id]
	if cl != nil && cl.abandoned {
		cl = nil
	}
	c.mu.Unlock()
	if cl != nil && cl.onOutput != nil {
		cl.onOutput(p.Seq, p.Stream, p.Data) // as dispatchLog: without c.mu
	}
}

// fail ends the stream: every pending call, and every later one, gets
// ErrClosed wrapped with the reason.
func (c *Client) fail(readErr error) {
	var err error
	switch reason := c.exitReason(); {
	case errors.Is(readErr, errFrame):
		err = fmt.Errorf("%w: %v", ErrClosed, readErr)
	case reason != "":
		err = fmt.Errorf("%w: %s", ErrClosed, reason)
	case readErr == io.EOF:
		err = ErrClosed
	default:
		err = fmt.Errorf("%w: %v", ErrClosed, readErr)
	}
	c.mu.Lock()
	if c.dead == nil {
		c.dead = err
	}
	err = c.dead
	calls := c.pending
	c.pending = map[uint64]*call{}
	c.mu.Unlock()
	for _, cl := range calls {
		cl.err = err
		close(cl.done)
	}
}

// exitReason describes how a spawned sidecar ended, waiting up to a second
// for its exit status (the end of its stdout usually comes just before it;
// a loaded machine can take a while to reap). "" if unknown.
func (c *Client) exitReason() string {
	if c.exited == nil {
		return ""
	}
	select {
	case <-c.exited:
	case <-time.After(time.Second):
		return ""
	}
	if c.exitErr == nil {
		return "sidecar exited with status 0"
	}
	return "sidecar " + c.exitErr.Error()
}

type cancelParams struct {
	ID uint64 `json:"id"`
}

// notify sends a notification; errors are dropped (a dead stream shows up
// on the read side).
func (c *Client) notify(method string, params any) {
	body, err := json.Marshal(outMsg{JSONRPC: "2.0", Method: method, Params: params})
	if err == nil {
		_ = c.write(body)
	}
}

// write sends one framed message. Writers queued behind each other share
// one flush: each buffers its frame, and the last of the queue flushes
// what all buffered, so 64 pipelined callers cost a few system calls, not
// 64, while a lone caller's frame goes out at once.
func (c *Client) write(body []byte) error {
	c.writers.Add(1)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	last := c.writers.Add(-1) == 0
	if c.wclosed {
		return ErrClosed
	}
	_ = c.w.Write(body)
	if !last {
		return nil // the writer behind us flushes this frame with its own
	}
	if err := c.w.Flush(); err != nil {
		return fmt.Errorf("%w: %v", ErrClosed, err)
	}
	return nil
}

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
	// shutdown waits for in-flight runs, so their answers are read first.
	shutdownErr := c.call(ctx, protocol.MethodShutdown, nil, nil, RunHandlers{}, 0)
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
			c.dispatch(body)
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
