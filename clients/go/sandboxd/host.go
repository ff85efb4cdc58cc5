package sandboxd

// Host functions served by the parent (docs/protocol.md): a guest calls an
// import its run or instance declared (RunParams.HostFunctions,
// InstantiateParams.HostFunctions), the sidecar asks this client with a
// host/call request, and a HostHandler answers it. Handlers are found per
// call: the call's own (CallOptions.Host), its instance's (the Host of
// the RunHandlers given to InstantiateWith), its run's (RunHandlers.Host),
// else the client's (SetHostHandler).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/sandboxd/sandboxd/protocol"
)

// HostFunction declares an import the client serves: module, name, and
// the types of its params and results (i32, i64, f32, f64, or bytes, an
// Extism memory handle whose bytes travel).
type HostFunction = protocol.HostFunction

// HostValue is an argument or a result of a host call: a wasm value, or
// bytes when its Type is "bytes". Make them with HostI32 … HostBytes;
// read them with the Value's methods (I32, I64, F32, F64) or Bytes.
type HostValue = protocol.HostValue

// HostI32 … HostBytes make the values a handler returns.
func HostI32(v int32) HostValue   { return HostValue{Value: protocol.ValueI32(v)} }
func HostI64(v int64) HostValue   { return HostValue{Value: protocol.ValueI64(v)} }
func HostF32(v float32) HostValue { return HostValue{Value: protocol.ValueF32(v)} }
func HostF64(v float64) HostValue { return HostValue{Value: protocol.ValueF64(v)} }
func HostBytes(b []byte) HostValue {
	return HostValue{Value: protocol.Value{Type: protocol.TypeBytes}, Bytes: b}
}

// HostCall is one call of a host function, as the sidecar asks it.
type HostCall struct {
	// ID is the sidecar's id of the call ("sbx-N"). Requests made with
	// the handler's context carry it (hostCall), which lets the sidecar
	// refuse at once a call that would wait for itself.
	ID string
	// Instance is the instance whose call made it ("" for a run or an
	// instantiation).
	Instance     string
	Module, Name string
	Args         []HostValue
}

// HostHandler answers host calls. Its context is cancelled when the
// sidecar no longer waits for the answer (the run's deadline passed, or
// it was cancelled) or the client closes; requests made with it from the
// handler say so to the sidecar. An error is answered as the JSON-RPC
// error {code, message}: a *HostError's own code, else -32603 with the
// error's message; the run then fails with kind host_function_error.
//
// Handlers may block and may call the Client. A host call of a run (or
// call) whose caller is reading the sidecar's output when it comes is
// served on that caller's goroutine, as a sequential caller's are (no
// goroutine hand-off on the round trip); others on a goroutine of their
// own. That caller returns once the handler has, so a handler that may
// block for long should watch its context, as one that holds its answer
// past the run's deadline is cancelled through it.
type HostHandler func(ctx context.Context, call HostCall) ([]HostValue, error)

// HostError is an error answer with a code of the handler's choosing
// (the sidecar's name for it is protocol.HostCallError).
type HostError = protocol.HostCallError

// SetHostHandler sets the handler of host calls no run, instance or call
// of this client has one for (nil: none; such calls get an error answer).
func (c *Client) SetHostHandler(h HostHandler) {
	c.mu.Lock()
	c.host = h
	c.mu.Unlock()
}

type hostCallKey struct{}

// hostCallOf is the host call whose handler's context ctx is, if any.
func hostCallOf(ctx context.Context) string {
	id, _ := ctx.Value(hostCallKey{}).(string)
	return id
}

// hostRequest is a host/call the client read, to be served.
type hostRequest struct {
	id      string // the sidecar's
	params  json.RawMessage
	handler HostHandler
	ctx     context.Context
	cancel  context.CancelFunc
	// inline: made for the call the reader waits for, whose caller
	// serves it (serveInline); ctx is then a *handlerCtx.
	inline bool
}

// receiveHostCall registers a host/call the reader read (so that a
// $/cancelRequest read next finds it) and returns it to be served; inline
// if it was made for self, the call the reader waits for.
func (c *Client) receiveHostCall(idRaw, params json.RawMessage, self *call) *hostRequest {
	var id string
	if json.Unmarshal(idRaw, &id) != nil {
		return nil // not an id of the sidecar's: nothing to answer to
	}
	var p struct {
		ID json.RawMessage `json:"id"`
	}
	_ = json.Unmarshal(params, &p)
	req := &hostRequest{id: id, params: bytes.Clone(params)} // the frame's buffer is the reader's
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, err := strconv.ParseUint(string(p.ID), 10, 64); err == nil && c.pending[n] != nil && !c.pending[n].abandoned {
		req.handler = c.pending[n].host
		req.inline = c.pending[n] == self
	}
	if req.handler == nil {
		req.handler = c.host
	}
	ctx, cancel := context.WithCancel(c.hostCtx)
	req.ctx, req.cancel = context.WithValue(ctx, hostCallKey{}, id), cancel
	if req.inline {
		req.ctx = &handlerCtx{Context: req.ctx, c: c}
	}
	if c.serving == nil {
		c.serving = map[string]*hostRequest{}
	}
	c.serving[id] = req
	return req
}

// cancelHostCall is the sidecar's $/cancelRequest of a host call: its
// handler's context is cancelled, and no answer is sent (the sidecar
// would drop it).
func (c *Client) cancelHostCall(params json.RawMessage) {
	var p protocol.HostCancelParams
	if json.Unmarshal(params, &p) != nil {
		return
	}
	c.mu.Lock()
	req := c.serving[p.ID]
	delete(c.serving, p.ID)
	c.mu.Unlock()
	if req != nil {
		req.cancel()
	}
}

// serveInline serves a host call on the goroutine of the caller whose run
// made it, the one that read it: a sequential caller's host call then
// costs no goroutine hand-off, as Python's sync client serves it on the
// caller's thread. The reader token is free meanwhile, so any other
// waiting caller reads. When none does, nobody reads while the handler
// runs, which matters only to a handler waiting for what the sidecar
// sends: the $/cancelRequest of its call (or the end of the stream) that
// its context reports. So a handler that asks its context whether it is
// done (Done, Err, or a request made with it) gets a goroutine reading
// for it until it returns (handlerCtx).
func (c *Client) serveInline(req *hostRequest) {
	hc := req.ctx.(*handlerCtx)
	c.serveHost(req)
	hc.mu.Lock()
	hc.returned = true
	stop := hc.stop
	hc.mu.Unlock()
	if stop != nil {
		// The helper stops at the next frame, or at once if asleep in a
		// pipe that can be poked. Until then it reads as any caller does:
		// our answer too.
		close(stop)
		c.poke()
	}
}

// handlerCtx is the context of a handler run inline: the first call of
// Done or Err starts a goroutine that reads the stream while the handler
// runs (readWhile), so that the $/cancelRequest it may wait for is read.
type handlerCtx struct {
	context.Context
	c *Client

	mu       sync.Mutex
	returned bool          // the handler returned: no helper any more
	stop     chan struct{} // closed when the handler returned, if a helper was started
}

func (h *handlerCtx) Done() <-chan struct{} {
	h.readMeanwhile()
	return h.Context.Done()
}

func (h *handlerCtx) Err() error {
	h.readMeanwhile()
	return h.Context.Err()
}

func (h *handlerCtx) readMeanwhile() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stop != nil || h.returned {
		return
	}
	h.stop = make(chan struct{})
	go h.c.readWhile(h.stop)
}

// readWhile reads and dispatches frames, holding the reader token when it
// is free, until stop is closed (or the stream ends).
func (c *Client) readWhile(stop chan struct{}) {
	select {
	case <-stop:
	case <-c.readTok:
		c.readFor(&call{done: stop}) // no id: no response or host call is its
		c.readTok <- struct{}{}
	}
}

// serveHost runs a host call's handler and sends its answer.
func (c *Client) serveHost(req *hostRequest) {
	values, err := c.runHandler(req)
	c.mu.Lock()
	live := c.serving[req.id] == req
	delete(c.serving, req.id)
	c.mu.Unlock()
	req.cancel()
	if !live {
		return // cancelled: the sidecar waits for it no more
	}
	var body []byte
	if err == nil {
		body, err = json.Marshal(hostAnswer{JSONRPC: "2.0", ID: req.id, Result: &protocol.HostCallResult{Values: protocol.EncodeHostValues(values)}})
	}
	if err != nil {
		he := &HostError{Code: protocol.CodeInternalError, Message: err.Error()}
		errors.As(err, &he)
		body, _ = json.Marshal(hostAnswer{JSONRPC: "2.0", ID: req.id, Error: &protocol.WireError{Code: he.Code, Message: he.Message}})
	}
	_ = c.write(body) // a dead stream shows up on the read side
}

type hostAnswer struct {
	JSONRPC string                   `json:"jsonrpc"`
	ID      string                   `json:"id"`
	Result  *protocol.HostCallResult `json:"result,omitempty"`
	Error   *protocol.WireError      `json:"error,omitempty"`
}

// runHandler decodes the call and runs its handler; a panic is its error.
func (c *Client) runHandler(req *hostRequest) (values []HostValue, err error) {
	var p protocol.HostCallParams
	if err := json.Unmarshal(req.params, &p); err != nil {
		return nil, &HostError{Code: protocol.CodeInvalidParams, Message: "host/call params: " + err.Error()}
	}
	call := HostCall{ID: req.id, Instance: p.Instance, Module: p.Module, Name: p.Name, Args: make([]HostValue, len(p.Args))}
	for i, a := range p.Args {
		if call.Args[i], err = a.HostValue(); err != nil {
			return nil, &HostError{Code: protocol.CodeInvalidParams, Message: fmt.Sprintf("host/call args[%d]: %v", i, err)}
		}
	}
	if req.handler == nil {
		return nil, &HostError{Code: protocol.CodeMethodNotFound,
			Message: fmt.Sprintf("no handler serves %s::%s in this client", p.Module, p.Name)}
	}
	defer func() {
		if r := recover(); r != nil {
			values, err = nil, fmt.Errorf("the handler of %s::%s panicked: %v", p.Module, p.Name, r)
		}
	}()
	return req.handler(req.ctx, call)
}
