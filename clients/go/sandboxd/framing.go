package sandboxd

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// maxFrame bounds one incoming message. The sidecar's own limit is 64 MiB by
// default; a declared length above this means the stream is garbage, and
// allocating it would let a broken peer exhaust our memory.
const maxFrame = 256 << 20

// ioBufSize is the size of the read and write buffers. It also bounds one
// Content-Length header line (the server refuses lines over 8 KiB).
const ioBufSize = 64 << 10

// errFrame marks a byte stream that can no longer be parsed.
var errFrame = errors.New("broken frame")

// frameReader reads whole messages in either framing. It is used only by the
// goroutine holding the reader token, so it needs no lock of its own.
type frameReader struct {
	br     *bufio.Reader
	ndjson bool
	buf    []byte    // reused body buffer; callers copy what they keep
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
	f.br = bufio.NewReaderSize(r, ioBufSize)
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
// returns io.EOF at a clean end of stream between messages.
func (f *frameReader) next() ([]byte, error) {
	if f.src != nil {
		f.src.atBoundary = f.br.Buffered() == 0
	}
	if f.ndjson {
		return f.nextLine()
	}
	return f.nextContentLength()
}

func (f *frameReader) nextContentLength() ([]byte, error) {
	n := int64(-1)
	for first := true; ; first = false {
		line, err := f.br.ReadSlice('\n')
		if err != nil {
			switch {
			case err == io.EOF && first && len(line) == 0:
				return nil, io.EOF
			case err == io.EOF:
				return nil, io.ErrUnexpectedEOF
			case err == bufio.ErrBufferFull:
				return nil, fmt.Errorf("%w: header line over %d bytes", errFrame, ioBufSize)
			}
			return nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break // the blank line ending the header block
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return nil, fmt.Errorf("%w: header line %q", errFrame, line)
		}
		if !bytes.EqualFold(bytes.TrimSpace(name), []byte("Content-Length")) {
			continue // Content-Type and the like carry nothing we need
		}
		v, err := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%w: Content-Length %q", errFrame, value)
		}
		n = v
	}
	if n < 0 {
		return nil, fmt.Errorf("%w: no Content-Length header", errFrame)
	}
	if n > maxFrame {
		return nil, fmt.Errorf("%w: Content-Length %d over %d", errFrame, n, maxFrame)
	}
	f.grow(int(n))
	if _, err := io.ReadFull(f.br, f.buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return f.buf, nil
}

func (f *frameReader) nextLine() ([]byte, error) {
	for {
		// The common case is a line that fits the read buffer: ReadSlice
		// returns it without a copy, valid until the next read.
		line, err := f.br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A longer line is gathered in f.buf, up to maxFrame.
			acc := append(f.buf[:0], line...)
			for err == bufio.ErrBufferFull {
				line, err = f.br.ReadSlice('\n')
				if len(acc)+len(line) > maxFrame {
					return nil, fmt.Errorf("%w: line over %d bytes", errFrame, maxFrame)
				}
				acc = append(acc, line...)
			}
			line, f.buf = acc, acc
			if cap(acc) > 4*ioBufSize {
				f.buf = nil // do not keep a huge buffer for one huge line
			}
		}
		switch {
		case err == io.EOF && len(bytes.TrimSpace(line)) == 0:
			return nil, io.EOF
		case err == io.EOF:
			return nil, io.ErrUnexpectedEOF
		case err != nil:
			return nil, err
		}
		if line = bytes.TrimSpace(line); len(line) > 0 {
			return line, nil
		}
	}
}

// grow sets f.buf to n bytes, reusing the old buffer when it fits. A buffer
// grown for one huge message is not kept, so memory follows the usual size.
func (f *frameReader) grow(n int) {
	if cap(f.buf) >= n && cap(f.buf) <= 4*ioBufSize {
		f.buf = f.buf[:n]
		return
	}
	c := n
	if c < 4096 {
		c = 4096
	}
	f.buf = make([]byte, n, c)
}

// writeFrame appends one framed message to w (which the caller flushes).
func writeFrame(w *bufio.Writer, body []byte, ndjson bool) {
	if ndjson {
		// encoding/json never emits a raw newline, so the body is one line.
		w.Write(body)
		w.WriteByte('\n')
		return
	}
	var num [20]byte
	w.WriteString("Content-Length: ")
	w.Write(strconv.AppendInt(num[:0], int64(len(body)), 10))
	w.WriteString("\r\n\r\n")
	w.Write(body)
}
