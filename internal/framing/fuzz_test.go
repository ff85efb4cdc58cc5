package framing

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/sandboxd/sandboxd/internal/jsonscan"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/; `go test` runs them.

// FuzzFrameReader: arbitrary bytes through both framings never panic, never
// loop without consuming input, and never yield a body longer than max (an
// ndjson body may carry its one terminating newline on top).
func FuzzFrameReader(f *testing.F) {
	f.Add([]byte("Content-Length: 2\r\n\r\n{}"), false, uint16(1024))
	f.Add([]byte("{}\n[]\n"), true, uint16(1024))
	f.Fuzz(func(t *testing.T, data []byte, ndjson bool, m uint16) {
		max := int64(m%4096) + 1
		f := ContentLength
		if ndjson {
			f = NDJSON
		}
		fr := NewReader(bytes.NewReader(data), f, max)
		for i := 0; ; i++ {
			if i > len(data)+2 {
				t.Fatalf("more than %d frames from %d bytes", i, len(data))
			}
			body, err := fr.Read()
			var oe *TooLargeError
			var fe *Error
			switch {
			case err == nil:
			case errors.As(err, &oe):
				if body != nil {
					t.Fatalf("oversized error with a body")
				}
				continue
			case err == io.EOF, errors.As(err, &fe):
				return
			default:
				t.Fatalf("unexpected error %T %v", err, err)
			}
			n := int64(len(body))
			if ndjson {
				n = int64(len(bytes.TrimSuffix(body, []byte("\n"))))
				if len(jsonscan.TrimSpace(body)) == 0 { // JSON's whitespace: "\v" is a line
					t.Fatalf("blank ndjson line returned as a message")
				}
				if bytes.IndexByte(bytes.TrimSuffix(body, []byte("\n")), '\n') >= 0 {
					t.Fatalf("ndjson body spans lines: %q", body)
				}
			}
			if n > max {
				t.Fatalf("body of %d bytes, max %d", n, max)
			}
		}
	})
}
