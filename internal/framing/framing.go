// Package framing splits a byte stream into JSON-RPC messages and writes
// messages back, in the two framings sandboxd speaks: Content-Length
// headers (the LSP base protocol) and newline-delimited JSON. The sidecar
// (rpc) and the Go client (clients/go/sandboxd) both use it, so the two
// ends cannot disagree about a frame.
//
// A Reader never allocates more than its limit for one message: a declared
// length over the limit is reported at once (a *TooLargeError, before the
// body is read), and the body is skipped by the next Read, so the stream
// stays in step.
package framing

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/internal/jsonscan"
)

// Framing is how messages are delimited on the byte stream.
type Framing string

// The two framings.
const (
	ContentLength Framing = "content-length"
	NDJSON        Framing = "ndjson"
)

// Valid reports whether f is one of the two framings.
func (f Framing) Valid() bool { return f == ContentLength || f == NDJSON }

// MaxHeaderLine bounds one Content-Length header line.
const MaxHeaderLine = 8 << 10

// bufSize is the size of the read and write buffers.
const bufSize = 64 << 10

// keepBuf is the largest body buffer a Reader keeps between messages: a
// buffer grown for one huge message is dropped, so memory follows the
// usual message size.
const keepBuf = 4 * bufSize

// Error means the input can no longer be split into messages. Truncated
// says the input ended inside a message.
type Error struct {
	Problem   string
	Truncated bool
}

func (e *Error) Error() string { return "unrecoverable framing error: " + e.Problem }

// TooLargeError means one message was longer than the Reader's limit. It is
// returned before the body is read; the next Read skips the body, so the
// stream is still in step. Size is -1 when the length is not known (an
// ndjson line is refused as soon as it passes the limit). Head is the
// start of the body that had arrived (at most HeadBytes, a copy): where a message's id
// usually is, so that the refusal can be told to what it answered (the
// sidecar's host calls).
type TooLargeError struct {
	Size, Max int64
	Head      []byte
}

// HeadBytes is how much of a refused message TooLargeError keeps.
const HeadBytes = 256

func (e *TooLargeError) Error() string {
	if e.Size < 0 {
		return fmt.Sprintf("message exceeds --max-message-bytes %d", e.Max)
	}
	return fmt.Sprintf("message of %d bytes exceeds --max-message-bytes %d", e.Size, e.Max)
}

// NoContentLengthHint is appended to the errors of a Content-Length reader
// that is evidently fed newline-delimited JSON.
const NoContentLengthHint = "for newline-delimited JSON, start the sidecar with --framing=ndjson"

// Reader reads whole message bodies. It is not safe for concurrent use.
type Reader struct {
	br      *bufio.Reader
	framing Framing
	max     int64
	buf     []byte

	skipBody int64 // content-length: body bytes of a refused message still to skip
	skipLine bool  // ndjson: the rest of a refused line is still to skip
}

// NewReader returns a Reader of r in framing f that refuses messages over
// max bytes.
func NewReader(r io.Reader, f Framing, max int64) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, bufSize), framing: f, max: max}
}

// Buffered returns how many bytes are read from the source but not yet
// returned: 0 means the next Read starts at the source.
func (r *Reader) Buffered() int { return r.br.Buffered() }

// Read returns the next message body, valid until the next call (an
// ndjson body keeps its line ending). Errors: io.EOF at a clean end
// between messages, *TooLargeError (recoverable: call Read again), *Error
// (the stream is broken), or the source's own error.
func (r *Reader) Read() ([]byte, error) {
	if r.framing == NDJSON {
		return r.readLine()
	}
	return r.readContentLength()
}

func (r *Reader) readContentLength() ([]byte, error) {
	if r.skipBody > 0 {
		n, err := io.CopyN(io.Discard, r.br, r.skipBody)
		r.skipBody -= n
		if err != nil {
			return nil, &Error{Problem: "end of input inside an oversized message body", Truncated: true}
		}
	}
	length := int64(-1)
	for lines := 0; ; lines++ {
		if lines == 0 {
			// A message that starts with '{' where a header belongs is
			// newline-delimited JSON: say so now, rather than waiting for
			// a blank line that never comes.
			b, err := r.br.Peek(1)
			if err != nil {
				return nil, err // the input ended (or failed) between messages
			}
			if b[0] == '{' {
				return nil, &Error{Problem: "a message starts with '{' where a Content-Length header was expected: " + NoContentLengthHint}
			}
		}
		line, err := r.br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) || len(line) > MaxHeaderLine {
			return nil, &Error{Problem: fmt.Sprintf("header line longer than %d bytes", MaxHeaderLine)}
		}
		if err != nil {
			if lines == 0 && len(line) == 0 {
				return nil, err // the input ended (or failed) between messages
			}
			if err == io.EOF {
				return nil, &Error{Problem: "end of input inside a message header", Truncated: true}
			}
			return nil, err
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
			return nil, &Error{Problem: fmt.Sprintf("malformed header line %q", truncate(text, 80))}
		}
		if strings.EqualFold(strings.TrimSpace(name), "Content-Length") {
			// Digits only (ParseInt alone takes "+5"), and one value: as
			// in HTTP, headers that disagree cannot be read one way
			// that everything between parent and sidecar agrees on.
			value = strings.TrimSpace(value)
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil || n < 0 || strings.TrimLeft(value, "0123456789") != "" {
				return nil, &Error{Problem: fmt.Sprintf("invalid Content-Length %q", truncate(value, 40))}
			}
			if length >= 0 && n != length {
				return nil, &Error{Problem: fmt.Sprintf("conflicting Content-Length headers (%d and %d)", length, n)}
			}
			length = n
		}
	}
	if length < 0 {
		return nil, &Error{Problem: "message header has no Content-Length (" + NoContentLengthHint + ")"}
	}
	if length > r.max {
		r.skipBody = length
		// What has come of it already (waiting for more would wait for a
		// parent that sends the header alone); the skip reads it again.
		head, _ := r.br.Peek(int(min(length, HeadBytes, int64(r.br.Buffered()))))
		return nil, &TooLargeError{Size: length, Max: r.max, Head: bytes.Clone(head)}
	}
	r.grow(int(length))
	if n, err := io.ReadFull(r.br, r.buf); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, &Error{Problem: fmt.Sprintf("end of input after %d of %d body bytes", n, length), Truncated: true}
		}
		return nil, err
	}
	return r.buf, nil
}

func (r *Reader) readLine() ([]byte, error) {
	if r.skipLine {
		r.skipLine = false
		for {
			_, err := r.br.ReadSlice('\n')
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if err != nil {
				return nil, err // io.EOF: the refused line was the last one
			}
			break
		}
	}
	line := r.buf[:0]
	for {
		chunk, err := r.br.ReadSlice('\n')
		content := len(line) + len(chunk)
		if err == nil { // the chunk ends with the newline, which is not content
			content--
		}
		if int64(content) > r.max {
			r.skipLine = errors.Is(err, bufio.ErrBufferFull)
			head := append(line, chunk[:min(len(chunk), max(0, HeadBytes-len(line)))]...)
			r.keep(line)
			return nil, &TooLargeError{Size: -1, Max: r.max, Head: bytes.Clone(head[:min(len(head), HeadBytes)])}
		}
		line = append(line, chunk...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF:
			r.keep(line)
			if len(jsonscan.TrimSpace(line)) == 0 {
				return nil, io.EOF
			}
			return line, nil // a last message without its newline; EOF comes next
		case err != nil:
			return nil, err
		}
		if len(jsonscan.TrimSpace(line)) == 0 { // blank line (JSON's whitespace; a vertical tab is not): keep reading
			line = line[:0]
			continue
		}
		r.keep(line)
		return line, nil
	}
}

// grow sets r.buf to n bytes, reusing the old buffer when it fits.
func (r *Reader) grow(n int) {
	if cap(r.buf) >= n {
		r.buf = r.buf[:n]
		if cap(r.buf) > keepBuf && n <= keepBuf {
			r.buf = make([]byte, n, keepBuf)
		}
		return
	}
	r.buf = make([]byte, n, max(n, 4096))
}

// keep remembers buf for reuse unless it grew past keepBuf.
func (r *Reader) keep(buf []byte) {
	if cap(buf) > keepBuf {
		r.buf = nil
		return
	}
	r.buf = buf[:0]
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Append appends body framed in f to dst.
func Append(dst []byte, f Framing, body []byte) []byte {
	if f == NDJSON {
		// encoding/json never emits a raw newline, so the body is one line.
		dst = append(dst, body...)
		return append(dst, '\n')
	}
	dst = append(dst, "Content-Length: "...)
	dst = strconv.AppendInt(dst, int64(len(body)), 10)
	dst = append(dst, "\r\n\r\n"...)
	return append(dst, body...)
}

// Overhead is how many bytes framing adds to a body of n bytes.
func Overhead(f Framing, n int) int {
	if f == NDJSON {
		return 1
	}
	return len("Content-Length: \r\n\r\n") + len(strconv.Itoa(n))
}

// Writer writes framed messages through a buffer. It is not safe for
// concurrent use.
type Writer struct {
	bw      *bufio.Writer
	framing Framing
	hdr     []byte
}

// NewWriter returns a Writer of w in framing f.
func NewWriter(w io.Writer, f Framing) *Writer {
	return &Writer{bw: bufio.NewWriterSize(w, bufSize), framing: f}
}

// Write buffers one framed message; Flush sends what is buffered.
func (w *Writer) Write(body []byte) error {
	if w.framing == NDJSON {
		w.bw.Write(body)
		return w.bw.WriteByte('\n')
	}
	w.hdr = append(w.hdr[:0], "Content-Length: "...)
	w.hdr = strconv.AppendInt(w.hdr, int64(len(body)), 10)
	w.hdr = append(w.hdr, "\r\n\r\n"...)
	w.bw.Write(w.hdr)
	_, err := w.bw.Write(body)
	return err
}

// Flush writes what is buffered to the underlying writer.
func (w *Writer) Flush() error { return w.bw.Flush() }
