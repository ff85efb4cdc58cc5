package mcpserver

import (
	"context"
	"encoding/json"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Progress: when a call carries a progress token, what the guest writes
// (a WASI program's stdout and stderr, log lines) goes to the client as
// notifications/progress while the call runs. A notification's message
// is the text written (invalid UTF-8 replaced; the result carries the
// exact bytes), its _meta["sandboxd/stream"] says which stream
// ("stdout", "stderr", "log"), and its progress counts the bytes sent so
// far, so it increases with every notification as MCP requires.
//
// A notification costs its envelope (about 130 bytes and the token) for
// as little as one byte of output, and a guest alternating one-byte
// writes between stdout and stderr cuts its output into such pieces:
// 200 KB of output was 24,622 notifications, 8.6 MB on the wire. So the
// envelopes of a call's notifications take at most envelopeBudget bytes;
// past that, each stream's pieces are held until they carry
// coalesceBytes (the sidecar's rule, rpc/execute_wasi.go), and the rest
// is sent when the run ends, before the answer.
//
// The engine calls the output and log functions on the guest's thread,
// where nothing may block: they only append to a queue (the engine has
// bounded and coalesced what it hands over: at most its output and log
// budgets), which a goroutine of the call sends from, merging what
// queued up behind a slow client. The call's response waits for the
// queue to empty, so every notification precedes it. What is queued
// counts as output waiting for the client (Server.out) until its
// notification is written: a client that does not read holds back new
// runs for it as for answers (backpressure.go).

// StreamMetaKey is the _meta key of a progress notification that names
// its stream.
const StreamMetaKey = "sandboxd/stream"

// maxTokenBytes bounds the progress token (its JSON) the server repeats
// in every notification: clients send a number or a short string, and a
// token of megabytes would make every notification that large. A call
// with a longer token gets no progress notifications.
const maxTokenBytes = 256

const (
	envelopeBudget = 1 << 20 // bytes of envelopes a call's notifications may take
	envelopeBytes  = 160     // a notification's envelope, its token aside (an upper bound)
	coalesceBytes  = 16 << 10
)

// progress is one call's forwarder.
type progress struct {
	ctx     context.Context
	session *mcp.ServerSession
	token   any
	out     *outputGate // counts what is queued, until it is written

	mu       sync.Mutex
	pending  []piece           // in order; adjacent pieces of a stream merged
	envelope int               // what one notification's envelope costs
	left     int               // envelope bytes the pieces to come may still take
	held     map[string][]byte // once left is spent: each stream's data, until it carries coalesceBytes
	wake     chan struct{}     // one token: pending grew or closed
	closed   bool
	done     chan struct{} // the sender has ended
}

type piece struct {
	stream string
	data   []byte
}

// newProgress returns the call's forwarder, or nil without a progress
// token (every method of a nil *progress does nothing).
func (s *Server) newProgress(ctx context.Context, req *mcp.CallToolRequest) *progress {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return nil
	}
	b, err := json.Marshal(token)
	if err != nil || len(b) > maxTokenBytes {
		s.opts.Logger.Warn("progress token too long: no progress notifications for this call", "bytes", len(b))
		return nil
	}
	p := &progress{ctx: ctx, session: req.Session, token: token, out: s.out, envelope: envelopeBytes + len(b), left: envelopeBudget,
		held: map[string][]byte{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go p.send()
	return p
}

// output is the engine's Output function of the call (nil without a
// token).
func (p *progress) output() func(stream string, data []byte) {
	if p == nil {
		return nil
	}
	return p.add
}

// log is a function that forwards a log line (and does nothing without
// a token).
func (p *progress) log() func(level, line string) {
	if p == nil {
		return func(string, string) {}
	}
	return func(level, line string) {
		if level != "" {
			line = level + ": " + line
		}
		p.add("log", []byte(line+"\n"))
	}
}

// add queues data (copied: the engine reuses its buffer). It never blocks.
func (p *progress) add(stream string, data []byte) {
	if len(data) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.out.add(int64(len(data)))
	switch n := len(p.pending); {
	case n > 0 && p.pending[n-1].stream == stream:
		p.pending[n-1].data = append(p.pending[n-1].data, data...)
	case p.left >= p.envelope:
		p.left -= p.envelope
		p.pending = append(p.pending, piece{stream, append([]byte(nil), data...)})
	default: // the envelopes are spent: held until the piece is worth one
		p.held[stream] = append(p.held[stream], data...)
		if len(p.held[stream]) < coalesceBytes {
			return
		}
		p.pending = append(p.pending, piece{stream, p.held[stream]})
		delete(p.held, stream)
	}
	p.signal()
}

// flushHeld queues what is held, by stream; p.mu is held.
func (p *progress) flushHeld() {
	for _, stream := range []string{"stdout", "stderr", "log"} {
		if data := p.held[stream]; len(data) > 0 {
			p.pending = append(p.pending, piece{stream, data})
			delete(p.held, stream)
		}
	}
}

func (p *progress) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// send is the call's sender goroutine: it sends what is queued, in order,
// until finish has been called and the queue is empty. Once the call is
// cancelled, or a notification failed, it sends nothing more.
func (p *progress) send() {
	defer close(p.done)
	var sent float64
	failed := false
	for {
		p.mu.Lock()
		batch, closed := p.pending, p.closed
		p.pending = nil
		p.mu.Unlock()
		for _, pc := range batch {
			if !failed && p.ctx.Err() == nil {
				sent += float64(len(pc.data))
				err := p.session.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{
					Meta:          mcp.Meta{StreamMetaKey: pc.stream},
					ProgressToken: p.token,
					Message:       strings.ToValidUTF8(string(pc.data), "\uFFFD"),
					Progress:      sent,
				})
				failed = err != nil // the connection is gone or the call cancelled: the rest would fail too
			}
			p.out.done(int64(len(pc.data)))
		}
		if closed {
			return
		}
		<-p.wake
	}
}

// finish ends forwarding once the queue is sent (the run has returned:
// nothing more is added).
func (p *progress) finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.flushHeld()
	p.closed = true
	p.mu.Unlock()
	p.signal()
	<-p.done
}
