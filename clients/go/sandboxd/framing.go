package sandboxd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sandboxd/sandboxd/internal/framing"
)

// maxFrame bounds one incoming message. The sidecar's own limit is 64 MiB by
// default; a declared length above this means the stream is garbage, and
// allocating it would let a broken peer exhaust our memory.
const maxFrame = 256 << 20

// errFrame marks a byte stream that can no longer be parsed.
var errFrame = errors.New("broken frame")

// frameReader reads whole messages in either framing with the framing
// package the sidecar uses too, and adds what only a client needs: being
// woken between messages (poke). It is used only by the goroutine holding
// the reader token, so it needs no lock of its own.
type frameReader struct {
	fr     *framing.Reader
	ndjson bool
	dl     deadliner // the stream, if it has read deadlines (for poke)
	src    *pokeableReader
}

type deadliner interface{ SetReadDeadline(time.Time) error }

// errPoked is returned by next when a read deadline woke the reader between
// two messages: nothing was consumed, reading may simply go on.
var errPoked = errors.New("reader poked")

func newFrameReader(r io.Reader, ndjson bool) *frameReader {
	f := &frameReader{ndjson: ndjson}
	if dl, ok := r.(deadliner); ok && dl.SetReadDeadline(time.Time{}) == nil {
		f.dl = dl
		f.src = &pokeableReader{r: r, dl: dl}
		r = f.src
	}
	mode := framing.ContentLength
	if ndjson {
		mode = framing.NDJSON
	}
	f.fr = framing.NewReader(r, mode, maxFrame)
	return f
}

// pokeableReader turns a read deadline into errPoked when it strikes between
// messages, and retries when it strikes inside one (the frame must not be
// cut: the deadline is only a wake-up call, never a timeout of the stream).
type pokeableReader struct {
	r          io.Reader
	dl         deadliner
	atBoundary bool // nothing of the next message has been read yet
}

func (p *pokeableReader) Read(b []byte) (int, error) {
	for {
		n, err := p.r.Read(b)
		if n > 0 {
			p.atBoundary = false
		}
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		_ = p.dl.SetReadDeadline(time.Time{})
		if n > 0 {
			return n, nil
		}
		if p.atBoundary {
			return 0, errPoked
		}
	}
}

// next returns the next message body, valid until the following call. It
// returns io.EOF at a clean end of stream between messages,
// io.ErrUnexpectedEOF inside one, and errFrame (wrapped) for a stream
// that cannot be parsed.
func (f *frameReader) next() ([]byte, error) {
	if f.src != nil {
		f.src.atBoundary = f.fr.Buffered() == 0
	}
	body, err := f.fr.Read()
	var fe *framing.Error
	var big *framing.TooLargeError
	switch {
	case err == nil && f.ndjson:
		if !bytes.HasSuffix(body, []byte("\n")) {
			// The sidecar ends every line; a last line without its newline
			// was cut by the end of the stream.
			return nil, io.ErrUnexpectedEOF
		}
		return bytes.TrimSpace(body), nil
	case err == nil:
		return body, nil
	case errors.As(err, &fe) && fe.Truncated:
		return nil, io.ErrUnexpectedEOF
	case errors.As(err, &fe):
		return nil, fmt.Errorf("%w: %s", errFrame, fe.Problem)
	case errors.As(err, &big):
		return nil, fmt.Errorf("%w: message of %d bytes over %d", errFrame, big.Size, maxFrame)
	}
	return nil, err
}
