package sandboxd

// Framing (framing.go), both ways.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/framing"
)

func TestFrameReader(t *testing.T) {
	long := `{"x":"` + strings.Repeat("a", 200000) + `"}`
	cl := "Content-Type: application/json\r\ncontent-length: 7\r\n\r\n{\"a\":1}" +
		fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(long), long) +
		"Content-Length:2\r\n\r\n{}"
	fr := newFrameReader(strings.NewReader(cl), false)
	for _, want := range []string{`{"a":1}`, long, `{}`} {
		got, err := fr.next()
		if err != nil || string(got) != want {
			t.Fatalf("got %.40q %v, want %.40q", got, err, want)
		}
	}
	if _, err := fr.next(); err != io.EOF {
		t.Fatalf("end: %v, want EOF", err)
	}

	nd := "{\"a\":1}\n\n  \r\n" + long + "\n{}"
	fr = newFrameReader(strings.NewReader(nd), true)
	for _, want := range []string{`{"a":1}`, long} {
		got, err := fr.next()
		if err != nil || string(got) != want {
			t.Fatalf("ndjson: got %.40q %v, want %.40q", got, err, want)
		}
	}
	if _, err := fr.next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("unterminated line: %v", err)
	}

	for _, bad := range []string{
		"Content-Length: 300000000\r\n\r\n",
		"Content-Length: -1\r\n\r\n",
		"Content-Length: x\r\n\r\n",
		"Content-Type: a\r\n\r\n{}",
		"garbage\r\n\r\n",
		"Content-Length: " + strings.Repeat("1", 70000) + "\r\n",
	} {
		_, err := newFrameReader(strings.NewReader(bad), false).next()
		if !errors.Is(err, errFrame) {
			t.Errorf("%.40q: %v, want a broken frame", bad, err)
		}
	}
	for _, cut := range []string{"Content-Length: 5\r\n", "Content-Length: 5\r\n\r\n{}"} {
		if _, err := newFrameReader(strings.NewReader(cut), false).next(); err != io.ErrUnexpectedEOF {
			t.Errorf("%q: %v, want unexpected EOF", cut, err)
		}
	}
}

func TestWriteFrame(t *testing.T) {
	var b bytes.Buffer
	w := framing.NewWriter(&b, framing.ContentLength)
	w.Write([]byte(`{"a":1}`))
	w.Flush()
	w = framing.NewWriter(&b, framing.NDJSON)
	w.Write([]byte(`{}`))
	w.Flush()
	if got := b.String(); got != "Content-Length: 7\r\n\r\n{\"a\":1}{}\n" {
		t.Fatalf("%q", got)
	}
}
