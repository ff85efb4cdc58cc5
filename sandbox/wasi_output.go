package sandbox

import (
	"encoding/base64"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/protocol"
)

// Output streaming. A guest's writes reach Request.Output coalesced, so
// that a guest writing one byte at a time costs one notification per burst,
// not one per byte, while output is still seen as it happens: pending bytes
// go out when they reach outputFlushBytes, when the guest switches streams
// (order across stdout and stderr is kept), before the guest sleeps in
// poll_oneoff for a millisecond or more, outputFlushDelay after the first
// of them was written, and when the run ends.
const (
	outputFlushBytes = 16 << 10
	outputFlushDelay = 5 * time.Millisecond
)

// OutputPieceOverhead is what every forwarded piece of output costs
// against its stream's wire budget on top of its data's encoded size. It
// covers the `output` notification around the data as the sidecar writes
// it: the Content-Length header (26 bytes: a piece is under a million
// bytes), the envelope keys and stream name (125, with a seq of up to 8
// digits, more pieces than any budget allows), the bytes object's key and
// braces (11) and a request id of up to 32 encoded bytes, rounded up.
const OutputPieceOverhead = 168

// OutputPieceCost is what one piece of output costs against its stream's
// wire budget: the size of its data as the wire carries it (a JSON string
// of the text, escapes included, when the bytes are valid UTF-8, else of
// their base64) plus OutputPieceOverhead.
func OutputPieceCost(data []byte) uint64 {
	return uint64(encodedBytesLen(data)) + OutputPieceOverhead
}

// encodedBytesLen is the length of data's string in its {"text"} or
// {"base64"} object (protocol.Bytes), quotes included.
func encodedBytesLen(data []byte) int {
	if utf8.Valid(data) {
		return jsonStringLen(string(data))
	}
	return base64.StdEncoding.EncodedLen(len(data)) + 2
}

// OutputWireBudget is what the pieces of one stream may cost in all
// (OutputPieceCost each) for a run whose limits.outputBytes is
// outputBytes: twice the raw budget, so ordinary text and base64 binary
// that fill outputBytes in big writes are never cut, plus room for 48
// small pieces so that a small outputBytes still streams. The first piece
// that does not fit is dropped with everything after it on that stream.
// A run's output notifications thus take at most 2 × OutputWireBudget on
// the wire, and the result's stdout and stderr (the same bytes again, see
// outputSink) at most OutputWireBudget each.
func OutputWireBudget(outputBytes uint64) uint64 {
	return 2*outputBytes + 48*OutputPieceOverhead
}

// outputSink keeps a prefix of each stream within the budgets and forwards
// the kept bytes in order. It is written on the guest's thread (through
// capi.go's callback) and flushed from there or from its timer; forward
// runs under mu, so calls never overlap.
//
// With forward set, what a stream keeps is exactly what was forwarded, so
// the result repeats the notifications' bytes. A piece never ends inside a
// UTF-8 sequence that the next write could complete (those bytes wait for
// it or for the end), so a stream that is valid UTF-8 is sent as text
// pieces whose escaped sizes add up to at least the whole stream's: the
// result's field costs no more than its pieces did, and a stream that is
// not valid UTF-8 is base64 in the result (4/3 of its bytes, within the
// budget).
type outputSink struct {
	budget  uint64 // raw bytes per stream
	forward func(stream string, data []byte)

	mu        sync.Mutex
	streams   [2]outputStream // stdout, stderr
	truncated bool
	pending   int // stream (1 or 2) with bytes waiting for the timer or a flush, 0 for none
	timer     *time.Timer
	done      bool
}

// outputStream is one stream's kept bytes: kept[:sent] has been forwarded,
// at a cost of cost against the wire budget.
type outputStream struct {
	kept []byte
	sent int
	cost uint64
	full bool // a piece did not fit the wire budget: keep nothing more
}

func newOutputSink(budget uint64, forward func(stream string, data []byte)) *outputSink {
	s := &outputSink{}
	s.reset(budget, forward)
	return s
}

// reset readies the sink for a run (or an instance's next call, which
// keeps its store's sink): empty streams, the budget and the receiver.
// The caller holds mu or is its only user.
func (s *outputSink) reset(budget uint64, forward func(stream string, data []byte)) {
	if s.timer != nil {
		s.timer.Stop()
	}
	s.budget, s.forward, s.timer = budget, forward, nil
	s.streams, s.truncated, s.pending, s.done = [2]outputStream{}, false, 0, false
	if forward != nil {
		s.timer = time.AfterFunc(time.Hour, s.flush)
		s.timer.Stop()
	}
}

func (s *outputSink) stream(n int) *outputStream { return &s.streams[n-1] }

// write keeps what fits of p (stream 1 stdout, 2 stderr).
func (s *outputSink) write(stream int, p []byte) {
	if stream != 2 {
		stream = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stream(stream)
	if st.full {
		s.truncated = true
		return
	}
	room := s.budget - uint64(len(st.kept))
	if uint64(len(p)) > room {
		p = p[:room]
		s.truncated = true
	}
	if len(p) == 0 || s.done {
		return
	}
	if s.forward == nil {
		st.kept = append(st.kept, p...)
		return
	}
	if s.pending != 0 && s.pending != stream {
		s.flushLocked(false)
	}
	if s.pending == 0 {
		s.pending = stream
		s.timer.Reset(outputFlushDelay)
	}
	st.kept = append(st.kept, p...)
	if len(st.kept)-st.sent >= outputFlushBytes {
		s.flushLocked(false)
	}
}

// flush forwards the pending bytes now.
func (s *outputSink) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushLocked(false)
}

// flushLocked forwards the pending stream's unsent bytes, keeping back an
// incomplete UTF-8 sequence at their end unless final.
func (s *outputSink) flushLocked(final bool) {
	if s.pending == 0 || s.done {
		return
	}
	n := s.pending
	s.pending = 0
	s.timer.Stop()
	s.send(n, final)
}

func (s *outputSink) send(n int, final bool) {
	st := s.stream(n)
	if st.full {
		return
	}
	piece := st.kept[st.sent:]
	if !final {
		piece = piece[:len(piece)-protocol.IncompleteUTF8Tail(piece)]
	}
	if len(piece) == 0 {
		return
	}
	cost := OutputPieceCost(piece)
	if cost > OutputWireBudget(s.budget)-st.cost {
		st.full, s.truncated = true, true
		st.kept = st.kept[:st.sent:st.sent] // keep what was sent, no more
		return
	}
	st.cost += cost
	st.sent += len(piece)
	name := StreamStdout
	if n == 2 {
		name = StreamStderr
	}
	// The kept bytes never change once written: hand out a view of them
	// that the receiver cannot append into.
	s.forward(name, piece[:len(piece):len(piece)])
}

// finish forwards what is pending, stops forwarding for good (no call of
// forward happens after it returns) and returns the output. Idempotent.
func (s *outputSink) finish() *Output {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done && s.forward != nil {
		s.pending = 0
		s.timer.Stop()
		// Bytes kept back on a stream switch may remain on either stream.
		s.send(1, true)
		s.send(2, true)
		for i := range s.streams {
			st := &s.streams[i]
			st.kept = st.kept[:st.sent]
		}
	}
	s.done = true
	if s.timer != nil {
		s.timer.Stop()
	}
	return &Output{Stdout: s.streams[0].kept, Stderr: s.streams[1].kept, Truncated: s.truncated}
}

// restart readies the sink for a store's next call. Only between calls.
func (s *outputSink) restart(budget uint64, forward func(stream string, data []byte)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reset(budget, forward)
}
