package sandboxd

// Calls on the wire: a request written, its answer waited for by reading
// (the caller reads: see the package doc), the frames read dispatched to
// their calls (responses, log and output notifications), a call given up
// (its $/cancelRequest, and what happens to an answer that comes late),
// and the end of the connection.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/jsonscan"
	"github.com/sandboxd/sandboxd/protocol"
)

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
	cl := &call{id: id, onLog: h.Log, onLevel: h.LevelLog, onOutput: h.Output, host: h.Host, done: make(chan struct{}), dst: result}
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
wait:
	for {
		select {
		case <-cl.done:
			return nil
		case <-c.readTok:
			req := c.readFor(cl)
			c.readTok <- struct{}{} // never blocks: we held the only token
			if req != nil {
				// A host call of cl's own guest: served here, with the
				// token free for any other caller meanwhile (host.go).
				c.serveInline(req)
				continue
			}
			select {
			case <-cl.done:
				return nil
			default: // readFor stopped because the grace ran out
			}
		case <-cl.expired:
		}
		break wait
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
// is answered, the stream ends, cl's grace after a cancel runs out, or a
// host call of cl's guest comes, which it returns for the caller to serve.
func (c *Client) readFor(cl *call) *hostRequest {
	for {
		select {
		case <-cl.done:
			return nil
		case <-cl.expired:
			return nil
		default:
		}
		body, err := c.fr.next()
		if errors.Is(err, errPoked) {
			continue // woken to look at cl.expired (maybe another call's)
		}
		if err != nil {
			c.fail(err)
			return nil
		}
		if req := c.dispatch(body, cl); req != nil {
			return req
		}
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
// A host call made for self (the call the reader waits for; nil for none)
// is returned, for the reader to serve; any other is served on a
// goroutine of its own.
func (c *Client) dispatch(body []byte, self *call) *hostRequest {
	if !jsonscan.Valid(body) {
		return nil // not JSON: nothing can be attributed to a call
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
		case `"` + protocol.MethodHostCall + `"`:
			if req := c.receiveHostCall(idRaw, params, self); req != nil {
				if req.inline {
					return req
				}
				go c.serveHost(req) // not on the reader: it may block, and call the Client
			}
		case `"` + protocol.MethodCancel + `"`:
			c.cancelHostCall(params)
		}
		return nil // other notifications and server requests: none are defined
	}
	id, err := strconv.ParseUint(string(idRaw), 10, 64)
	if err != nil {
		return nil // id null (a refused message) or not ours
	}
	c.mu.Lock()
	cl := c.pending[id]
	delete(c.pending, id)
	abandoned := cl != nil && cl.abandoned
	c.mu.Unlock()
	if cl == nil {
		return nil // a call that gave up after its grace
	}
	if abandoned { // its caller is gone: only the late handler cares
		if (errRaw == nil || string(errRaw) == "null") && result != nil {
			cl.late(result)
		}
		close(cl.done)
		return nil
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
	return nil
}

// decodeError is a result the client could not decode.
type decodeError struct{ err error }

func (e *decodeError) Error() string { return e.err.Error() }

// liveCall is the call a notification's id names, if its caller still
// waits: once it has returned, no handler of it runs.
func (c *Client) liveCall(rawID json.RawMessage) *call {
	id, err := strconv.ParseUint(string(rawID), 10, 64)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl := c.pending[id]; cl != nil && !cl.abandoned {
		return cl
	}
	return nil
}

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
	cl := c.liveCall(p.ID)
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
	cl := c.liveCall(p.ID)
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
	c.hostCancel() // nobody can take a handler's answer any more
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
