package rpc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Framing is how messages are delimited on the byte stream.
type Framing string

// The two framings. Content-Length is the LSP base protocol.
const (
	FramingContentLength Framing = "content-length"
	FramingNDJSON        Framing = "ndjson"
)

// maxHeaderLine bounds one Content-Length header line.
const maxHeaderLine = 8 << 10

// FramingError means the input can no longer be split into messages: the
// sidecar answers what it owes and exits with status 2.
type FramingError struct{ Problem string }

func (e *FramingError) Error() string { return "unrecoverable framing error: " + e.Problem }

// oversizedError means one message was too large; it was skipped and the
// stream is still in step.
type oversizedError struct{ size, max int64 }

func (e *oversizedError) Error() string {
	if e.size < 0 {
		return fmt.Sprintf("message exceeds --max-message-bytes %d", e.max)
	}
	return fmt.Sprintf("message of %d bytes exceeds --max-message-bytes %d", e.size, e.max)
}

// frameReader splits the input into message bodies.
type frameReader struct {
	r       *bufio.Reader
	framing Framing
	max     int64
}

func newFrameReader(r io.Reader, framing Framing, max int64) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 64<<10), framing: framing, max: max}
}

// next returns the next message body. Errors: io.EOF at a clean end,
// *oversizedError (recoverable), *FramingError (fatal).
func (f *frameReader) next() ([]byte, error) {
	if f.framing == FramingNDJSON {
		return f.nextLine()
	}
	return f.nextContentLength()
}

func (f *frameReader) nextContentLength() ([]byte, error) {
	length := int64(-1)
	for lines := 0; ; lines++ {
		line, err := f.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) || len(line) > maxHeaderLine {
			return nil, &FramingError{fmt.Sprintf("header line longer than %d bytes", maxHeaderLine)}
		}
		if err != nil {
			if lines == 0 && len(line) == 0 {
				return nil, err // the input ended (or was closed) between messages
			}
			return nil, &FramingError{"end of input inside a message header"}
		}
		text := strings.TrimRight(string(line), "\r\n")
		if text == "" {
			if lines == 0 { // tolerate blank lines between messages
				lines--
				continue
			}
			break
		}
		name, value, ok := strings.Cut(text, ":")
		if !ok {
			return nil, &FramingError{fmt.Sprintf("malformed header line %q", truncate(text, 80))}
		}
		if strings.EqualFold(strings.TrimSpace(name), "Content-Length") {
			n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
			if err != nil || n < 0 {
				return nil, &FramingError{fmt.Sprintf("invalid Content-Length %q", truncate(strings.TrimSpace(value), 40))}
			}
			length = n
		}
	}
	if length < 0 {
		return nil, &FramingError{"message header has no Content-Length"}
	}
	if length > f.max {
		if _, err := io.CopyN(io.Discard, f.r, length); err != nil {
			return nil, &FramingError{"end of input inside an oversized message body"}
		}
		return nil, &oversizedError{length, f.max}
	}
	body := make([]byte, length)
	if n, err := io.ReadFull(f.r, body); err != nil {
		return nil, &FramingError{fmt.Sprintf("end of input after %d of %d body bytes", n, length)}
	}
	return body, nil
}

func (f *frameReader) nextLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := f.r.ReadSlice('\n')
		body := len(line) + len(chunk)
		if err == nil { // the chunk ends with the newline, which is not content
			body--
		}
		if int64(body) > f.max {
			if errors.Is(err, bufio.ErrBufferFull) {
				if skipErr := f.skipLine(); skipErr != nil && skipErr != io.EOF {
					return nil, skipErr
				}
			}
			return nil, &oversizedError{-1, f.max} // the next call reports EOF, if that is what follows
		}
		line = append(line, chunk...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF:
			if len(bytes.TrimSpace(line)) == 0 {
				return nil, io.EOF
			}
			return line, nil // a last message without its newline; EOF comes next
		case err != nil:
			return nil, err
		}
		if len(bytes.TrimSpace(line)) == 0 { // blank line: keep reading
			line = line[:0]
			continue
		}
		return line, nil
	}
}

func (f *frameReader) skipLine() error {
	for {
		_, err := f.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return err
	}
}

// encodeFrame frames one JSON message.
func encodeFrame(framing Framing, body []byte) []byte {
	if framing == FramingNDJSON {
		return append(body, '\n')
	}
	frame := make([]byte, 0, len(body)+32)
	frame = append(frame, "Content-Length: "...)
	frame = strconv.AppendInt(frame, int64(len(body)), 10)
	frame = append(frame, "\r\n\r\n"...)
	return append(frame, body...)
}

// outbox owns the output. Frames leave in the order they were sent.
// Queued senders never block: a writer goroutine drains the queue, so a
// guest's host::log never waits on the parent's pipe, and a run's log
// notifications, queued before its response, are written before it. A
// worker's response may instead be written inline by the worker itself
// when nothing is queued or being written (sendDirect): that saves a
// goroutine hand-off per run, and only that worker waits if the parent is
// slow to read.
type outbox struct {
	w       *bufio.Writer
	framing Framing

	mu      sync.Mutex
	cond    *sync.Cond
	queue   [][]byte
	pending int64 // bytes queued or being written
	writing bool  // someone (the writer goroutine or a direct sender) owns w
	closed  bool
	broken  error
	done    chan struct{}
}

func newOutbox(w io.Writer, framing Framing) *outbox {
	o := &outbox{w: bufio.NewWriterSize(w, 64<<10), framing: framing, done: make(chan struct{})}
	o.cond = sync.NewCond(&o.mu)
	go o.loop()
	return o
}

// send queues one JSON body. After close or a write error it is dropped.
func (o *outbox) send(body []byte) {
	frame := encodeFrame(o.framing, body)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed || o.broken != nil {
		return
	}
	o.queue = append(o.queue, frame)
	o.pending += int64(len(frame))
	o.cond.Broadcast()
}

// sendDirect writes one JSON body from the calling goroutine if the
// outbox is idle, and queues it otherwise. It may block on the pipe.
func (o *outbox) sendDirect(body []byte) {
	frame := encodeFrame(o.framing, body)
	o.mu.Lock()
	if o.writing || len(o.queue) > 0 || o.closed || o.broken != nil {
		o.mu.Unlock()
		o.send(body)
		return
	}
	o.writing = true
	o.pending += int64(len(frame))
	o.mu.Unlock()
	o.finish([][]byte{frame}, o.write([][]byte{frame}))
}

// write puts frames on the wire; the caller owns w (writing is set).
func (o *outbox) write(frames [][]byte) error {
	for _, frame := range frames {
		if _, err := o.w.Write(frame); err != nil {
			return err
		}
	}
	return o.w.Flush()
}

// finish releases w after a write and wakes whoever waits for it.
func (o *outbox) finish(frames [][]byte, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.writing = false
	for _, frame := range frames {
		o.pending -= int64(len(frame))
	}
	if err != nil {
		o.broken = err
		o.queue, o.pending = nil, 0
	}
	o.cond.Broadcast()
}

func (o *outbox) loop() {
	defer close(o.done)
	for {
		o.mu.Lock()
		for (len(o.queue) == 0 || o.writing) && !o.closed && o.broken == nil {
			o.cond.Wait()
		}
		for o.writing { // closing: let a direct sender finish first
			o.cond.Wait()
		}
		if o.broken != nil || (o.closed && len(o.queue) == 0) {
			o.mu.Unlock()
			return
		}
		batch := o.queue
		o.queue = nil
		o.writing = true
		o.mu.Unlock()
		o.finish(batch, o.write(batch))
	}
}

// waitBelow blocks while more than limit bytes wait to be written, so the
// server takes no new work while the parent is not reading. It returns
// early when the outbox is closed or broken.
func (o *outbox) waitBelow(limit int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for o.pending > limit && !o.closed && o.broken == nil {
		o.cond.Wait()
	}
}

// close flushes what is queued, waiting at most timeout for a parent that
// does not read, and stops the writer.
func (o *outbox) close(timeout time.Duration) error {
	o.mu.Lock()
	o.closed = true
	o.cond.Broadcast()
	o.mu.Unlock()
	select {
	case <-o.done:
	case <-time.After(timeout):
		return errors.New("output not drained: the parent is not reading")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.broken
}

// errorMessage is a response the stream writes itself, for input the
// JSON-RPC layer never sees (unparsable, oversized, invalid envelopes).
type errorMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func errorBody(id json.RawMessage, code int64, msg string) []byte {
	m := errorMessage{JSONRPC: "2.0", ID: id}
	if m.ID == nil {
		m.ID = json.RawMessage("null")
	}
	m.Error.Code, m.Error.Message = code, msg
	b, _ := json.Marshal(m)
	return b
}

// stream adapts the frame reader and the outbox to jsonrpc2.ObjectStream.
// It screens each message before jsonrpc2 sees it, because jsonrpc2 closes
// the connection on any message it cannot decode; here a bad message gets
// its error response and the stream moves on.
type stream struct {
	in    *frameReader
	out   *outbox
	onEnd func(error) // called once when input ends; returns when owed responses are queued
	warn  func(msg string, args ...any)
	end   sync.Once
	input io.Reader

	current envelope // the message being handled; read loop only
}

func (s *stream) WriteObject(obj any) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	s.out.send(b)
	return nil
}

func (s *stream) ReadObject(v any) error {
	for {
		body, err := s.in.next()
		var big *oversizedError
		switch {
		case errors.As(err, &big):
			s.warn("refused oversized message", "error", big.Error())
			s.out.send(errorBody(nil, CodeInvalidRequest, big.Error()))
			continue
		case err != nil:
			s.end.Do(func() { s.onEnd(err) })
			return err
		}
		env, ok := s.screen(body)
		if !ok {
			continue
		}
		// jsonrpc2 decodes each message twice more; params can be large
		// (a base64 module), so it gets the envelope without them and the
		// handler takes them from here. This relies on jsonrpc2 calling
		// the handler on its read loop before reading the next message,
		// which handler.Handle checks.
		s.current = env
		if err := json.Unmarshal(env.withoutParams(), v); err != nil {
			s.out.send(errorBody(nil, CodeInvalidRequest, "invalid request: "+err.Error()))
			continue
		}
		return nil
	}
}

// takeParams returns the params of the message the read loop is handling,
// if it is the one named by method and id.
func (s *stream) takeParams(method string, id json.RawMessage) (json.RawMessage, bool) {
	env := s.current
	s.current = envelope{}
	var name string
	if json.Unmarshal(env.Method, &name) != nil || name != method || !bytes.Equal(bytes.TrimSpace(env.ID), bytes.TrimSpace(id)) {
		return nil, false
	}
	return env.Params, true
}

// Close is called by jsonrpc2 when the connection closes.
func (s *stream) Close() error {
	if c, ok := s.input.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// envelope is the top level of a message, undecoded. A field that is
// absent is nil; one that is JSON null is "null".
type envelope struct {
	JSONRPC json.RawMessage `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  json.RawMessage `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

// withoutParams re-encodes the envelope of a screened request without its
// params.
func (e envelope) withoutParams() []byte {
	b := make([]byte, 0, 64+len(e.ID)+len(e.Method))
	b = append(b, `{"jsonrpc":"2.0","method":`...)
	b = append(b, e.Method...)
	if e.ID != nil {
		b = append(b, `,"id":`...)
		b = append(b, e.ID...)
	}
	return append(b, '}')
}

// screen checks the JSON-RPC envelope, answering what is invalid. It
// reports whether the message should be passed on.
func (s *stream) screen(body []byte) (envelope, bool) {
	var env envelope
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		if json.Valid(trimmed) {
			s.out.send(errorBody(nil, CodeInvalidRequest, "batch requests are not supported: send one request per message"))
		} else {
			s.out.send(errorBody(nil, CodeParseError, "parse error: the message is not valid JSON"))
		}
		return env, false
	}
	if len(trimmed) == 0 || trimmed[0] != '{' {
		if json.Valid(trimmed) {
			s.out.send(errorBody(nil, CodeInvalidRequest, "invalid request: a message must be a JSON object"))
		} else {
			s.out.send(errorBody(nil, CodeParseError, "parse error: the message is not valid JSON"))
		}
		return env, false
	}
	if err := json.Unmarshal(trimmed, &env); err != nil {
		s.out.send(errorBody(nil, CodeParseError, "parse error: "+err.Error()))
		return env, false
	}
	id, hasID := env.ID, env.ID != nil
	if hasID && !validID(id) {
		s.out.send(errorBody(nil, CodeInvalidRequest, "invalid request: id must be a string or an integer in 0..2^63-1"))
		return env, false
	}
	if env.Method == nil {
		if env.Result != nil || env.Error != nil {
			s.warn("ignoring a response sent to the server", "id", string(id))
			return env, false
		}
		s.out.send(errorBody(idOrNull(id, hasID), CodeInvalidRequest, `invalid request: "method" is missing`))
		return env, false
	}
	var name string
	if m := bytes.TrimSpace(env.Method); len(m) == 0 || m[0] != '"' || json.Unmarshal(m, &name) != nil {
		s.out.send(errorBody(idOrNull(id, hasID), CodeInvalidRequest, `invalid request: "method" must be a string`))
		return env, false
	}
	if v := env.JSONRPC; v == nil || string(bytes.TrimSpace(v)) != `"2.0"` {
		s.out.send(errorBody(idOrNull(id, hasID), CodeInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`))
		return env, false
	}
	if p := bytes.TrimSpace(env.Params); env.Params != nil {
		if len(p) == 0 || (p[0] != '{' && p[0] != '[' && string(p) != "null") {
			if hasID {
				s.out.send(errorBody(id, CodeInvalidParams, "params: must be an object"))
			}
			return env, false
		}
		if string(p) == "null" {
			env.Params = nil
		}
	}
	return env, true
}

func idOrNull(id json.RawMessage, has bool) json.RawMessage {
	if !has {
		return nil
	}
	return id
}

// validID accepts the ids jsonrpc2 can echo exactly: strings and integers
// in 0..2^63-1 (jsonrpc2 decodes numeric ids as int64).
func validID(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return false
	}
	if raw[0] == '"' {
		var s string
		return json.Unmarshal(raw, &s) == nil
	}
	_, err := strconv.ParseInt(string(raw), 10, 64)
	return err == nil && raw[0] != '-'
}
