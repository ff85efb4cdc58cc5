package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/internal/framing"
	"github.com/sandboxd/sandboxd/internal/jsonscan"
	"github.com/sandboxd/sandboxd/protocol"
)

// MCP's stdio transport (one JSON-RPC message a line), as an mcp.Transport
// of our own rather than the SDK's IOTransport, for what a hostile client
// can do to a server that trusts it:
//
//   - A line longer than MaxMessageBytes is answered with an error and
//     skipped (internal/framing reads it no further than the limit); the
//     SDK's transport ends the session. Unparsable lines and batches are
//     answered with an error too, and the session goes on.
//   - The SDK runs every call on a goroutine of its own as soon as it is
//     read, holding its message until it is answered: a client that
//     writes calls and never reads the answers grew the server without
//     bound. Here a call is admitted only while fewer than MaxQueue calls
//     of at most MaxQueueBytes in all are unanswered; past that it is
//     answered busy (-32000) at once, by the reader itself, so a client
//     that does not read its answers stops being read.
//   - A client that does not read its output is pushed back: while more
//     than the high water waits to be written, no further call is read
//     and no run starts (backpressure.go).
//   - A request the SDK would answer by quoting it at length (a long
//     method or tool name, params that do not decode) is answered by the
//     reader, briefly, and every error response is cut as it is written
//     (screen.go).
//   - The SDK queues every notification it reads on a slice without
//     bound, ahead of the calls read after it: a flood of them grew the
//     server by ten times their size and stalled every call. Here only
//     the notifications the server uses reach the SDK: the first
//     notifications/initialized, and one notifications/cancelled per
//     call in flight (so what passes is bounded by the calls admitted);
//     every other one (progress, roots/list_changed, repeats, unknown
//     methods) is dropped and counted (notesDropped), the first logged.
//   - When the input ends, every call read is still answered: the SDK
//     cancels its calls, and fails every write, as soon as Read reports
//     the end, which lost the answers owed (`printf '<initialize>\n
//     <tools/call>\n' | sandboxd mcp` answered nothing 19 times in 20).
//     So Read reports the end only once every call it admitted has its
//     answer written, not merely begun (an answer waiting for the pipe
//     when the last call was released was dropped as the SDK closed). The calls still running drainGrace after the end are
//     cancelled (answered cancelled). The output is abandoned (its write
//     deadline, or Close) only once it has made no progress for
//     drainTimeout while a write is under way: writes go out in pieces
//     of writeChunk, each one progress, so a client that keeps reading
//     gets every answer whole however long they are, and one that stops
//     reading is abandoned drainTimeout after it stopped (perhaps
//     mid-line). Calls making their answers (not writing) are not the
//     client's doing: the server waits for them (cancelled, they end
//     within their own fences).
//
// Only protocol messages are ever written to out.

// transportLimits are the bounds of a connection.
type transportLimits struct {
	maxMessage    int64
	maxQueue      int
	maxQueueBytes int64
}

// drainTimeout is how long a write is waited for, once the input has
// ended, without the client reading any of it (no writeChunk written);
// the calls still running drainGrace after the end are cancelled, so
// that their answers (kind cancelled) are written.
const (
	drainTimeout = time.Second
	drainGrace   = drainTimeout / 2
	// writeChunk is the most written to out at once: each piece written
	// is progress for the drain.
	writeChunk = 16 << 10
)

type transport struct {
	in  io.Reader
	out io.Writer
	lim transportLimits
	log *slog.Logger
	// gate counts what waits to be written (backpressure.go).
	gate *outputGate
	// endCalls cancels the calls still running (drainGrace after the
	// input ended).
	endCalls func()
	conn     *conn // once connected
}

func newTransport(in io.Reader, out io.Writer, lim transportLimits, gate *outputGate, log *slog.Logger, endCalls func()) *transport {
	return &transport{in: in, out: out, lim: lim, gate: gate, log: log, endCalls: endCalls}
}

// Connect implements mcp.Transport: it is called once.
func (t *transport) Connect(context.Context) (mcp.Connection, error) {
	t.conn = &conn{r: framing.NewReader(t.in, framing.NDJSON, t.lim.maxMessage), in: t.in, out: t.out, lim: t.lim, log: t.log,
		gate: t.gate, endCalls: t.endCalls, inFlight: map[jsonrpc.ID]int64{}, cancelled: map[jsonrpc.ID]bool{}, closed: make(chan struct{}),
		abandoned: make(chan struct{})}
	return t.conn, nil
}

// finished stops the drain's timers once the session is over (every
// write has returned): the output is not abandoned after Serve returns.
func (t *transport) finished() {
	if t.conn == nil {
		return
	}
	t.conn.mu.Lock()
	defer t.conn.mu.Unlock()
	t.conn.over = true
	for _, tm := range []*time.Timer{t.conn.drain, t.conn.grace} {
		if tm != nil {
			tm.Stop()
		}
	}
}

// conn is the connection: one goroutine reads (the SDK's), any writes.
type conn struct {
	r    *framing.Reader
	in   io.Reader
	out  io.Writer
	lim  transportLimits
	log  *slog.Logger
	gate *outputGate

	endCalls func()

	wmu sync.Mutex // one message at a time on out

	mu          sync.Mutex
	inFlight    map[jsonrpc.ID]int64 // calls read and not answered: their sizes
	queued      int64                // their sum
	cancelled   map[jsonrpc.ID]bool  // calls in flight whose notifications/cancelled passed
	initialized bool                 // notifications/initialized passed
	drain       *time.Timer          // set when the input ended: abandons the output once it makes no progress
	grace       *time.Timer          // set when the input ended: ends the calls still running
	answering   int                  // answers being written
	answered    chan struct{}        // set when the input ended: closed once inFlight is empty and no answer is being written
	over        bool                 // the session is over: the drain stops

	lastWrite      atomic.Int64 // when a write to out last began or wrote a piece (or the input ended), in Unix ns
	writing        atomic.Bool  // a write to out is under way
	notesDropped   atomic.Int64 // notifications not passed to the SDK
	initializeRead atomic.Bool  // an initialize call was handed to the SDK

	closeOnce     sync.Once
	closed        chan struct{}
	abandonOnce   sync.Once
	abandoned     chan struct{} // closed when the output is abandoned
	answeredClose sync.Once
}

// Read returns the next message to handle, answering at once what cannot
// be handled: an oversized or unreadable line, a batch, a call past the
// bounds. A call is held while the output is above its high water.
func (c *conn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		body, err := c.r.Read()
		var tl *framing.TooLargeError
		switch {
		case errors.As(err, &tl):
			c.refuse(jsonrpc.ID{}, protocol.CodeInvalidRequest, fmt.Sprintf("message longer than %d bytes (sandboxd mcp --max-message-bytes); skipped", tl.Max))
			continue
		case err != nil:
			if n := c.notesDropped.Load(); n > 1 {
				c.log.Warn("dropped notifications", "count", n)
			}
			c.inputEnded()
			c.awaitAnswers()
			select {
			case <-c.closed:
				return nil, io.EOF
			default:
			}
			return nil, err
		}
		size := int64(len(body))
		msg, err := decodeMessage(body)
		if err != nil {
			problem := "not a JSON-RPC message"
			if len(body) > 0 && body[0] == '[' {
				problem = "batches are not supported"
			}
			c.refuse(jsonrpc.ID{}, protocol.CodeInvalidRequest, problem)
			continue
		}
		if problem := checkID(body); problem != "" {
			c.refuse(jsonrpc.ID{}, protocol.CodeInvalidRequest, problem)
			continue
		}
		req, ok := msg.(*jsonrpc.Request)
		if !ok {
			return msg, nil
		}
		if !req.IsCall() {
			problem, _ := screen(req)
			if problem == "" {
				problem = c.passNotification(req)
			}
			if problem != "" {
				c.dropNotification(req.Method, problem)
				continue
			}
			return msg, nil
		}
		if err := c.gate.wait(ctx); err != nil {
			return nil, err
		}
		if problem := c.admit(req.ID, size); problem != "" {
			id := req.ID
			if problem == duplicateID {
				id = jsonrpc.ID{} // the answer would be taken for the first request's
			}
			c.refuse(id, protocol.CodeBusy, problem)
			continue
		}
		if problem, code := screen(req); problem != "" {
			c.refuse(req.ID, code, problem) // its answer releases its place
			continue
		}
		if req.Method == "initialize" && c.initializeRead.Swap(true) {
			// the SDK answers a second one with code 0
			c.refuse(req.ID, protocol.CodeInvalidRequest, "already initialized: initialize is sent once a session")
			continue
		}
		return msg, nil
	}
}

// passNotification says why a notification that passed the screen is
// not handed to the SDK, or "" to hand it on: only the first
// notifications/initialized and one notifications/cancelled per call in
// flight are.
func (c *conn) passNotification(req *jsonrpc.Request) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch req.Method {
	case "notifications/initialized":
		if c.initialized {
			return "notifications/initialized again"
		}
		c.initialized = true
		return ""
	case "notifications/cancelled":
		var id jsonrpc.ID
		found := false
		jsonscan.Members(jsonscan.TrimSpace(req.Params), func(key, value []byte) {
			if jsonscan.String(key) == "requestId" {
				id, found = idOf(value)
			}
		})
		switch {
		case !found:
			return "notifications/cancelled without a requestId that is a string or an integer"
		case c.cancelled[id]:
			return "notifications/cancelled again for the same request"
		}
		if _, ok := c.inFlight[id]; !ok {
			return "notifications/cancelled for no request in flight"
		}
		c.cancelled[id] = true
		return ""
	}
	return "a notification this server has no use for"
}

// dropNotification counts a notification not handed to the SDK, and
// logs the first.
func (c *conn) dropNotification(method, problem string) {
	if c.notesDropped.Add(1) == 1 {
		c.log.Warn("dropped a notification (the later ones are counted, not logged)", "method", clip(method), "problem", problem)
	}
}

// checkID says what is wrong with the id of a decoded message, which the
// SDK reads loosely: a null id made a call a notification (never
// answered), 1.5 was answered as 1 and 2^70 as -2^63 (answers another
// call's id, or none), and member names match case-insensitively, last
// wins. MCP's ids are strings or integers, never null; one id a message.
func checkID(body []byte) string {
	problem, seen := "", false
	jsonscan.Members(body, func(key, value []byte) {
		if problem != "" || !strings.EqualFold(jsonscan.String(key), "id") {
			return
		}
		if seen {
			problem = "the id appears twice"
			return
		}
		seen = true
		switch kindOf(value) {
		case "string":
			return
		case "number":
			if _, err := strconv.ParseInt(string(value), 10, 64); err == nil {
				return
			}
			if f, err := strconv.ParseFloat(string(value), 64); err == nil && f == math.Trunc(f) && math.Abs(f) <= 1<<53 {
				return // 1e3: the same integer
			}
			problem = "the id " + clip(string(value)) + " is not an integer of at most 64 bits"
		default:
			problem = "the id must be a string or an integer, not " + got(value)
		}
	})
	return problem
}

const duplicateID = "a request with this id is still being answered"

// admit counts a call in flight, or says why it cannot be.
func (c *conn) admit(id jsonrpc.ID, size int64) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch _, dup := c.inFlight[id]; {
	case dup:
		return duplicateID
	case len(c.inFlight) >= c.lim.maxQueue:
		return fmt.Sprintf("busy: %d requests are unanswered (sandboxd mcp --max-queue %d)", len(c.inFlight), c.lim.maxQueue)
	case c.queued+size > c.lim.maxQueueBytes:
		return fmt.Sprintf("busy: the unanswered requests hold %d bytes, and this one of %d bytes would pass %d (sandboxd mcp --max-queue-bytes)", c.queued, size, c.lim.maxQueueBytes)
	}
	c.inFlight[id] = size
	c.queued += size
	return ""
}

// release forgets an answered call as its answer's write begins (its
// place in the queue is free), and counts the write until writeEnded.
func (c *conn) release(id jsonrpc.ID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if size, ok := c.inFlight[id]; ok {
		delete(c.inFlight, id)
		delete(c.cancelled, id)
		c.queued -= size
	}
	c.answering++
}

// writeEnded uncounts an answer whose write has returned.
func (c *conn) writeEnded() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.answering--
	c.checkAnswered()
}

// checkAnswered closes answered once the input has ended and every call
// admitted has had its answer written. c.mu is held.
func (c *conn) checkAnswered() {
	if c.answered != nil && len(c.inFlight) == 0 && c.answering == 0 {
		c.answeredClose.Do(func() { close(c.answered) })
	}
}

// awaitAnswers waits, once the input has ended, until every call admitted
// has had its answer written (not merely begun), or the output has been
// abandoned, or the connection closed.
func (c *conn) awaitAnswers() {
	c.mu.Lock()
	if c.answered == nil {
		c.answered = make(chan struct{})
		c.checkAnswered()
	}
	answered := c.answered
	c.mu.Unlock()
	select {
	case <-answered:
	case <-c.abandoned:
	case <-c.closed:
	}
}

// refuse answers a message the server will not handle.
func (c *conn) refuse(id jsonrpc.ID, code int64, message string) {
	c.log.Warn("refused a message", "problem", message)
	if err := c.Write(context.Background(), &jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: code, Message: message}}); err != nil {
		c.log.Debug("writing a refusal", "error", err)
	}
}

// Write sends one message. A response releases its call's place as its
// write begins, and is counted until the write has returned, whatever
// became of it: Read reports the end of the input only after that, so
// the SDK closes no connection with an answer still to write.
func (c *conn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if resp, ok := msg.(*jsonrpc.Response); ok {
		c.release(resp.ID)
		defer c.writeEnded() // runs after the write's own defers

		if resp.Error != nil {
			msg = boundError(resp)
		}
	}
	if err := ctx.Err(); err != nil {
		return err // a notification of a cancelled call (answers come with a context that is never done)
	}
	parts, err := encodeParts(msg)
	if err != nil {
		return fmt.Errorf("encoding a message: %w", err)
	}
	size := int64(len(parts[0]) + len(parts[1]) + len(parts[2]))
	c.gate.add(size)
	defer c.gate.done(size)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	select {
	case <-c.closed:
		return mcp.ErrConnectionClosed
	default:
	}
	c.lastWrite.Store(time.Now().UnixNano())
	c.writing.Store(true)
	defer c.writing.Store(false)
	for _, p := range parts {
		for len(p) > 0 {
			n, err := c.out.Write(p[:min(len(p), writeChunk)])
			if n > 0 {
				c.lastWrite.Store(time.Now().UnixNano())
			}
			if err != nil {
				return err
			}
			p = p[n:]
		}
	}
	return nil
}

// inputEnded starts the drain: the calls still running after drainGrace
// are cancelled (their answers say so), and the output is abandoned once
// nothing has been written to it for drainTimeout, so no writer stays
// blocked on a client that does not read.
func (c *conn) inputEnded() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.drain == nil {
		c.lastWrite.Store(time.Now().UnixNano())
		c.drain = time.AfterFunc(drainTimeout, c.checkDrain)
		if c.endCalls != nil {
			c.grace = time.AfterFunc(drainGrace, c.endCalls)
		}
	}
}

// checkDrain abandons the output if a write to it has made no progress
// for drainTimeout, else looks again drainTimeout after the last
// progress. While no write is under way (the calls still running are
// making their answers) the output is not stuck, and is kept.
func (c *conn) checkDrain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over {
		return
	}
	if !c.writing.Load() {
		c.drain = time.AfterFunc(drainTimeout, c.checkDrain)
		return
	}
	if idle := time.Since(time.Unix(0, c.lastWrite.Load())); idle < drainTimeout {
		c.drain = time.AfterFunc(drainTimeout-idle, c.checkDrain)
		return
	}
	c.abandonOutput()
}

// abandonOutput ends every write in progress and to come: by a write
// deadline in the past where out has one (a pipe in non-blocking mode),
// else by closing out.
func (c *conn) abandonOutput() {
	c.abandonOnce.Do(func() { close(c.abandoned) })
	if d, ok := c.out.(interface{ SetWriteDeadline(time.Time) error }); ok && d.SetWriteDeadline(time.Now()) == nil {
		return
	}
	if cl, ok := c.out.(io.Closer); ok {
		_ = cl.Close()
	}
}

// Close implements mcp.Connection: it ends a Read waiting for input (by
// closing the input, if it can be closed) and every later Write.
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.gate.shutDown()
		if cl, ok := c.in.(io.Closer); ok {
			_ = cl.Close()
		}
		c.inputEnded()
	})
	return nil
}

// SessionID implements mcp.Connection: stdio has one session, no id.
func (c *conn) SessionID() string { return "" }
