package framing

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

// frameResult is one call of frameReader.next, summarized.
type frameResult struct {
	body string
	err  string // "", "eof", "framing", "oversized"
}

func classify(body []byte, err error) frameResult {
	var fe *Error
	var oe *TooLargeError
	switch {
	case err == nil:
		return frameResult{body: string(body)}
	case err == io.EOF:
		return frameResult{err: "eof"}
	case errors.As(err, &fe):
		return frameResult{err: "framing"}
	case errors.As(err, &oe):
		return frameResult{err: "oversized"}
	}
	return frameResult{err: "other: " + err.Error()}
}

// readFrames calls next until EOF or a framing error (at most 20 times).
func readFrames(t *testing.T, in io.Reader, f Framing, max int64) []frameResult {
	t.Helper()
	fr := NewReader(in, f, max)
	var out []frameResult
	for i := 0; i < 20; i++ {
		r := classify(fr.Read())
		out = append(out, r)
		if r.err == "eof" || r.err == "framing" || strings.HasPrefix(r.err, "other") {
			break
		}
	}
	return out
}

func ok(body string) frameResult { return frameResult{body: body} }

var (
	eof       = frameResult{err: "eof"}
	broken    = frameResult{err: "framing"}
	oversized = frameResult{err: "oversized"}
)

func sameFrames(a, b []frameResult) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func cl(body string) string {
	return "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

func TestFrameReaderContentLength(t *testing.T) {
	big := strings.Repeat("x", 2000)
	cases := []struct {
		name string
		in   string
		max  int64
		want []frameResult
	}{
		{"empty input", "", 1024, []frameResult{eof}},
		{"one frame", cl(`{"a":1}`), 1024, []frameResult{ok(`{"a":1}`), eof}},
		{"two frames", cl(`{"a":1}`) + cl(`{"b":2}`), 1024, []frameResult{ok(`{"a":1}`), ok(`{"b":2}`), eof}},
		{"empty body", cl(``), 1024, []frameResult{ok(``), eof}},
		{"content-type header", "Content-Length: 2\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n{}", 1024, []frameResult{ok(`{}`), eof}},
		{"content-type first", "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", 1024, []frameResult{ok(`{}`), eof}},
		{"lower-case name", "content-length: 2\r\n\r\n{}", 1024, []frameResult{ok(`{}`), eof}},
		{"mixed-case name", "CONTENT-length: 2\r\n\r\n{}" + cl(`[]`), 1024, []frameResult{ok(`{}`), ok(`[]`), eof}},
		{"no space after colon", "Content-Length:2\r\n\r\n{}", 1024, []frameResult{ok(`{}`), eof}},
		{"LF only", "Content-Length: 2\n\n{}", 1024, []frameResult{ok(`{}`), eof}},
		{"blank lines between", "\r\n\r\n" + cl(`{}`) + "\r\n\n\r\n" + cl(`[1]`) + "\r\n", 1024, []frameResult{ok(`{}`), ok(`[1]`), eof}},
		{"body with CRLFs", cl("{\r\n\r\n}"), 1024, []frameResult{ok("{\r\n\r\n}"), eof}},
		{"missing content-length", "Content-Type: x\r\n\r\n{}", 1024, []frameResult{broken}},
		{"negative content-length", "Content-Length: -1\r\n\r\n{}", 1024, []frameResult{broken}},
		{"non-numeric content-length", "Content-Length: two\r\n\r\n{}", 1024, []frameResult{broken}},
		{"hex content-length", "Content-Length: 0x2\r\n\r\n{}", 1024, []frameResult{broken}},
		{"empty content-length", "Content-Length: \r\n\r\n{}", 1024, []frameResult{broken}},
		{"content-length overflow", "Content-Length: 99999999999999999999\r\n\r\n{}", 1024, []frameResult{broken}},
		{"header without colon", "Content-Length 2\r\n\r\n{}", 1024, []frameResult{broken}},
		{"raw JSON instead of a header", `{"jsonrpc":"2.0"}` + "\n", 1024, []frameResult{broken}},
		{"header then EOF", "Content-Length: 2\r\n", 1024, []frameResult{broken}},
		{"header and blank line then EOF", "Content-Length: 2\r\n\r\n", 1024, []frameResult{broken}},
		{"partial header line then EOF", "Content-Len", 1024, []frameResult{broken}},
		{"body short then EOF", "Content-Length: 10\r\n\r\n{}", 1024, []frameResult{broken}},
		{"second body short", cl(`{}`) + "Content-Length: 10\r\n\r\n{}", 1024, []frameResult{ok(`{}`), broken}},
		{"header line too long", "X-Junk: " + strings.Repeat("a", MaxHeaderLine+10) + "\r\n" + cl(`{}`), 1024, []frameResult{broken}},
		{"header line longer than the buffer", "X-Junk: " + strings.Repeat("a", 70<<10) + "\r\n" + cl(`{}`), 1024, []frameResult{broken}},
		{"oversized then next", cl(big) + cl(`{"n":2}`), 1024, []frameResult{oversized, ok(`{"n":2}`), eof}},
		{"oversized larger than the buffer then next", cl(strings.Repeat("y", 200<<10)) + cl(`{"n":2}`), 1024, []frameResult{oversized, ok(`{"n":2}`), eof}},
		{"two oversized then next", cl(big) + cl(big) + cl(`{}`), 1024, []frameResult{oversized, oversized, ok(`{}`), eof}},
		{"exactly max", cl(strings.Repeat("z", 1024)), 1024, []frameResult{ok(strings.Repeat("z", 1024)), eof}},
		{"max plus one", cl(strings.Repeat("z", 1025)) + cl(`{}`), 1024, []frameResult{oversized, ok(`{}`), eof}},
		// An oversized message is refused as soon as its header is read,
		// before its body: a parent declaring 10^12 bytes hears back at
		// once. Its body is skipped on the next read.
		{"oversized body truncated by EOF", "Content-Length: 5000\r\n\r\n" + big, 1024, []frameResult{oversized, broken}},
		{"huge declared length", "Content-Length: 9223372036854775807\r\n\r\n{}", 1024, []frameResult{oversized, broken}},
		{"conflicting content-lengths", "Content-Length: 100\r\nContent-Length: 2\r\n\r\n{}", 1024, []frameResult{broken}},
		{"repeated equal content-length", "Content-Length: 2\r\ncontent-length: 2\r\n\r\n{}", 1024, []frameResult{ok(`{}`), eof}},
		{"signed content-length", "Content-Length: +2\r\n\r\n{}", 1024, []frameResult{broken}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := readFrames(t, strings.NewReader(c.in), ContentLength, c.max)
			if !sameFrames(got, c.want) {
				t.Errorf("got  %q\nwant %q", got, c.want)
			}
			// The same input delivered one byte at a time frames the same.
			got = readFrames(t, iotest.OneByteReader(strings.NewReader(c.in)), ContentLength, c.max)
			if !sameFrames(got, c.want) {
				t.Errorf("one byte at a time: got %q\nwant %q", got, c.want)
			}
		})
	}
}

func TestFrameReaderOversizedMessage(t *testing.T) {
	fr := NewReader(strings.NewReader(cl(strings.Repeat("x", 5000))), ContentLength, 1024)
	_, err := fr.Read()
	var oe *TooLargeError
	if !errors.As(err, &oe) {
		t.Fatalf("err = %v", err)
	}
	if want := "message of 5000 bytes exceeds --max-message-bytes 1024"; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}

func TestFrameReaderNDJSON(t *testing.T) {
	cases := []struct {
		name string
		in   string
		max  int64
		want []frameResult
	}{
		{"empty input", "", 1024, []frameResult{eof}},
		{"one line", "{\"a\":1}\n", 1024, []frameResult{ok("{\"a\":1}\n"), eof}},
		{"two lines", "{}\n[]\n", 1024, []frameResult{ok("{}\n"), ok("[]\n"), eof}},
		{"CRLF", "{}\r\n[]\r\n", 1024, []frameResult{ok("{}\r\n"), ok("[]\r\n"), eof}},
		{"blank lines", "\n\n  \n{}\n\r\n\n[]\n\n", 1024, []frameResult{ok("{}\n"), ok("[]\n"), eof}},
		{"last line without newline", "{}\n{\"last\":true}", 1024, []frameResult{ok("{}\n"), ok(`{"last":true}`), eof}},
		{"only whitespace", " \t \n \n ", 1024, []frameResult{eof}},
		// Not JSON's whitespace: a line, which the server answers as not JSON.
		{"a vertical tab", "\v\n{}\n", 1024, []frameResult{ok("\v\n"), ok("{}\n"), eof}},
		{"oversized then next", strings.Repeat("x", 2000) + "\n{}\n", 1024, []frameResult{oversized, ok("{}\n"), eof}},
		{"oversized longer than the buffer then next", strings.Repeat("x", 200<<10) + "\n{}\n", 1024, []frameResult{oversized, ok("{}\n"), eof}},
		{"oversized with a large max", strings.Repeat("x", 300<<10) + "\n{}\n", 100 << 10, []frameResult{oversized, ok("{}\n"), eof}},
		{"exactly max", strings.Repeat("z", 1024) + "\n", 1024, []frameResult{ok(strings.Repeat("z", 1024) + "\n"), eof}},
		{"max plus one", strings.Repeat("z", 1025) + "\n{}\n", 1024, []frameResult{oversized, ok("{}\n"), eof}},
		{"oversized last line without newline", "{}\n" + strings.Repeat("x", 2000), 1024, []frameResult{ok("{}\n"), oversized, eof}},
		// The rest of an oversized line is skipped and the server keeps
		// serving; EOF right after it is a clean end, not a framing error.
		{"oversized last line beyond the buffer without newline", "{}\n" + strings.Repeat("x", 100<<10), 1024, []frameResult{ok("{}\n"), oversized, eof}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := readFrames(t, strings.NewReader(c.in), NDJSON, c.max)
			if !sameFrames(got, c.want) {
				t.Errorf("got  %.200q\nwant %.200q", got, c.want)
			}
			got = readFrames(t, iotest.OneByteReader(strings.NewReader(c.in)), NDJSON, c.max)
			if !sameFrames(got, c.want) {
				t.Errorf("one byte at a time: got %.200q\nwant %.200q", got, c.want)
			}
		})
	}
}

// TestFrameReaderNDJSONLastLineMax: a last line without its newline may
// not be longer than max either.
func TestFrameReaderNDJSONLastLineMax(t *testing.T) {
	in := strings.Repeat("z", 1025) // max+1 bytes, no newline
	fr := NewReader(strings.NewReader(in), NDJSON, 1024)
	body, err := fr.Read()
	var oe *TooLargeError
	if !errors.As(err, &oe) {
		t.Errorf("a final line of %d bytes (max 1024) gave a body of %d bytes, err %v; want an oversized error", len(in), len(body), err)
	}
}

func TestFrameReaderReadError(t *testing.T) {
	boom := errors.New("boom")
	for _, f := range []Framing{ContentLength, NDJSON} {
		fr := NewReader(iotest.ErrReader(boom), f, 1024)
		if _, err := fr.Read(); err == nil || err == io.EOF {
			t.Errorf("%s: a read error gave %v", f, err)
		}
	}
}

func TestEncodeFrameRoundTrip(t *testing.T) {
	bodies := []string{`{}`, `{"jsonrpc":"2.0","id":1,"result":null}`, `"é ✓"`}
	for _, f := range []Framing{ContentLength, NDJSON} {
		var buf bytes.Buffer
		for _, b := range bodies {
			buf.Write(Append(nil, f, []byte(b)))
		}
		fr := NewReader(&buf, f, 1024)
		for _, want := range bodies {
			got, err := fr.Read()
			if err != nil || string(bytes.TrimRight(got, "\n")) != want {
				t.Errorf("%s: got %q, %v; want %q", f, got, err, want)
			}
		}
		if _, err := fr.Read(); err != io.EOF {
			t.Errorf("%s: end: %v", f, err)
		}
	}
}

// TestReaderOversizedAnsweredBeforeBody: the refusal of a declared length
// over the limit needs none of the body: the reader returns while the
// source has sent only the header.
func TestReaderOversizedAnsweredBeforeBody(t *testing.T) {
	pr, pw := io.Pipe()
	go pw.Write([]byte("Content-Length: 1000000000000\r\n\r\n{"))
	fr := NewReader(pr, ContentLength, 1024)
	_, err := fr.Read()
	var oe *TooLargeError
	if !errors.As(err, &oe) || oe.Size != 1000000000000 {
		t.Fatalf("err = %v, want a TooLargeError of 10^12 bytes", err)
	}
	pw.Close()
}

// TestReaderNDJSONToContentLength: newline-delimited JSON sent to a
// Content-Length reader is named as such at once, pointing at the flag.
func TestReaderNDJSONToContentLength(t *testing.T) {
	pr, pw := io.Pipe()
	go pw.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize"}`)) // no newline, no EOF
	fr := NewReader(pr, ContentLength, 1024)
	_, err := fr.Read()
	var fe *Error
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "--framing=ndjson") {
		t.Fatalf("err = %v, want a framing error naming --framing=ndjson", err)
	}
	pw.Close()
}

func TestWriterRoundTrip(t *testing.T) {
	bodies := []string{`{}`, `{"jsonrpc":"2.0","id":1,"result":null}`, `"é ✓"`}
	for _, f := range []Framing{ContentLength, NDJSON} {
		var buf bytes.Buffer
		w := NewWriter(&buf, f)
		for _, b := range bodies {
			if err := w.Write([]byte(b)); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		var want []byte
		for _, b := range bodies {
			want = Append(want, f, []byte(b))
			if got := Overhead(f, len(b)); got != len(Append(nil, f, []byte(b)))-len(b) {
				t.Errorf("%s: Overhead(%d) = %d", f, len(b), got)
			}
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Errorf("%s: Writer wrote %q, Append %q", f, buf.Bytes(), want)
		}
	}
}
