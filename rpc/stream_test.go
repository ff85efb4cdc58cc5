package rpc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/sourcegraph/jsonrpc2"
)

// frameResult is one call of frameReader.next, summarized.
type frameResult struct {
	body string
	err  string // "", "eof", "framing", "oversized"
}

func classify(body []byte, err error) frameResult {
	var fe *FramingError
	var oe *oversizedError
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
func readFrames(t *testing.T, in io.Reader, framing Framing, max int64) []frameResult {
	t.Helper()
	fr := newFrameReader(in, framing, max)
	var out []frameResult
	for i := 0; i < 20; i++ {
		r := classify(fr.next())
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
	framing   = frameResult{err: "framing"}
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
		{"missing content-length", "Content-Type: x\r\n\r\n{}", 1024, []frameResult{framing}},
		{"negative content-length", "Content-Length: -1\r\n\r\n{}", 1024, []frameResult{framing}},
		{"non-numeric content-length", "Content-Length: two\r\n\r\n{}", 1024, []frameResult{framing}},
		{"hex content-length", "Content-Length: 0x2\r\n\r\n{}", 1024, []frameResult{framing}},
		{"empty content-length", "Content-Length: \r\n\r\n{}", 1024, []frameResult{framing}},
		{"content-length overflow", "Content-Length: 99999999999999999999\r\n\r\n{}", 1024, []frameResult{framing}},
		{"header without colon", "Content-Length 2\r\n\r\n{}", 1024, []frameResult{framing}},
		{"raw JSON instead of a header", `{"jsonrpc":"2.0"}` + "\n", 1024, []frameResult{framing}},
		{"header then EOF", "Content-Length: 2\r\n", 1024, []frameResult{framing}},
		{"header and blank line then EOF", "Content-Length: 2\r\n\r\n", 1024, []frameResult{framing}},
		{"partial header line then EOF", "Content-Len", 1024, []frameResult{framing}},
		{"body short then EOF", "Content-Length: 10\r\n\r\n{}", 1024, []frameResult{framing}},
		{"second body short", cl(`{}`) + "Content-Length: 10\r\n\r\n{}", 1024, []frameResult{ok(`{}`), framing}},
		{"header line too long", "X-Junk: " + strings.Repeat("a", maxHeaderLine+10) + "\r\n" + cl(`{}`), 1024, []frameResult{framing}},
		{"header line longer than the buffer", "X-Junk: " + strings.Repeat("a", 70<<10) + "\r\n" + cl(`{}`), 1024, []frameResult{framing}},
		{"oversized then next", cl(big) + cl(`{"n":2}`), 1024, []frameResult{oversized, ok(`{"n":2}`), eof}},
		{"oversized larger than the buffer then next", cl(strings.Repeat("y", 200<<10)) + cl(`{"n":2}`), 1024, []frameResult{oversized, ok(`{"n":2}`), eof}},
		{"two oversized then next", cl(big) + cl(big) + cl(`{}`), 1024, []frameResult{oversized, oversized, ok(`{}`), eof}},
		{"exactly max", cl(strings.Repeat("z", 1024)), 1024, []frameResult{ok(strings.Repeat("z", 1024)), eof}},
		{"max plus one", cl(strings.Repeat("z", 1025)) + cl(`{}`), 1024, []frameResult{oversized, ok(`{}`), eof}},
		{"oversized body truncated by EOF", "Content-Length: 5000\r\n\r\n" + big, 1024, []frameResult{framing}},
		{"huge declared length", "Content-Length: 9223372036854775807\r\n\r\n{}", 1024, []frameResult{framing}},
		{"duplicate content-length, last wins", "Content-Length: 100\r\nContent-Length: 2\r\n\r\n{}", 1024, []frameResult{ok(`{}`), eof}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := readFrames(t, strings.NewReader(c.in), FramingContentLength, c.max)
			if !sameFrames(got, c.want) {
				t.Errorf("got  %q\nwant %q", got, c.want)
			}
			// The same input delivered one byte at a time frames the same.
			got = readFrames(t, iotest.OneByteReader(strings.NewReader(c.in)), FramingContentLength, c.max)
			if !sameFrames(got, c.want) {
				t.Errorf("one byte at a time: got %q\nwant %q", got, c.want)
			}
		})
	}
}

func TestFrameReaderOversizedMessage(t *testing.T) {
	fr := newFrameReader(strings.NewReader(cl(strings.Repeat("x", 5000))), FramingContentLength, 1024)
	_, err := fr.next()
	var oe *oversizedError
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
			got := readFrames(t, strings.NewReader(c.in), FramingNDJSON, c.max)
			if !sameFrames(got, c.want) {
				t.Errorf("got  %.200q\nwant %.200q", got, c.want)
			}
			got = readFrames(t, iotest.OneByteReader(strings.NewReader(c.in)), FramingNDJSON, c.max)
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
	fr := newFrameReader(strings.NewReader(in), FramingNDJSON, 1024)
	body, err := fr.next()
	var oe *oversizedError
	if !errors.As(err, &oe) {
		t.Errorf("a final line of %d bytes (max 1024) gave a body of %d bytes, err %v; want an oversized error", len(in), len(body), err)
	}
}

func TestFrameReaderReadError(t *testing.T) {
	boom := errors.New("boom")
	for _, f := range []Framing{FramingContentLength, FramingNDJSON} {
		fr := newFrameReader(iotest.ErrReader(boom), f, 1024)
		if _, err := fr.next(); err == nil || err == io.EOF {
			t.Errorf("%s: a read error gave %v", f, err)
		}
	}
}

func TestEncodeFrameRoundTrip(t *testing.T) {
	bodies := []string{`{}`, `{"jsonrpc":"2.0","id":1,"result":null}`, `"é ✓"`}
	for _, f := range []Framing{FramingContentLength, FramingNDJSON} {
		var buf bytes.Buffer
		for _, b := range bodies {
			buf.Write(encodeFrame(f, []byte(b)))
		}
		fr := newFrameReader(&buf, f, 1024)
		for _, want := range bodies {
			got, err := fr.next()
			if err != nil || string(bytes.TrimRight(got, "\n")) != want {
				t.Errorf("%s: got %q, %v; want %q", f, got, err, want)
			}
		}
		if _, err := fr.next(); err != io.EOF {
			t.Errorf("%s: end: %v", f, err)
		}
	}
}

// --- screening ---

// wireMsg is a message the stream wrote.
type wireMsg struct {
	JSONRPC string `json:"jsonrpc"`
	Error   *struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	rawID json.RawMessage // nil when absent
}

func (m wireMsg) id() string {
	if m.rawID == nil {
		return "<absent>"
	}
	return string(m.rawID)
}

// parseOutput splits ndjson output into messages.
func parseOutput(t *testing.T, out []byte) []wireMsg {
	t.Helper()
	var msgs []wireMsg
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m wireMsg
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil || json.Unmarshal(sc.Bytes(), &fields) != nil {
			t.Fatalf("output line %q: %v", sc.Bytes(), err)
		}
		m.rawID = fields["id"]
		msgs = append(msgs, m)
	}
	return msgs
}

// screenOne runs stream.screen on body over an in-memory outbox and returns
// whether the message was passed on and what was written.
func screenOne(t *testing.T, body []byte) (bool, []wireMsg) {
	t.Helper()
	var buf bytes.Buffer
	out := newOutbox(&buf, FramingNDJSON)
	st := &stream{out: out, warn: func(string, ...any) {}}
	_, passed := st.screen(body)
	if err := out.close(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	return passed, parseOutput(t, buf.Bytes())
}

func TestScreen(t *testing.T) {
	const none = 0 // no response expected
	cases := []struct {
		name   string
		body   string
		passed bool
		code   int64  // the one error response, or none
		id     string // its id
	}{
		{"valid request", `{"jsonrpc":"2.0","id":1,"method":"run","params":{}}`, true, none, ""},
		{"valid notification", `{"jsonrpc":"2.0","method":"exit"}`, true, none, ""},
		{"params array", `{"jsonrpc":"2.0","id":1,"method":"run","params":[]}`, true, none, ""},
		{"params null", `{"jsonrpc":"2.0","id":1,"method":"run","params":null}`, true, none, ""},
		{"whitespace around", " \n\t{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"run\"}\r\n ", true, none, ""},
		{"invalid JSON", `{"jsonrpc":`, false, CodeParseError, "null"},
		{"garbage", `hello`, false, CodeParseError, "null"},
		{"empty", ``, false, CodeParseError, "null"},
		{"trailing garbage", `{"jsonrpc":"2.0","id":1,"method":"run"} x`, false, CodeParseError, "null"},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"run"}]`, false, CodeInvalidRequest, "null"},
		{"empty batch", `[]`, false, CodeInvalidRequest, "null"},
		{"broken batch", `[{"jsonrpc":"2.0",`, false, CodeParseError, "null"},
		{"a number", `42`, false, CodeInvalidRequest, "null"},
		{"a string", `"run"`, false, CodeInvalidRequest, "null"},
		{"null", `null`, false, CodeInvalidRequest, "null"},
		{"true", `true`, false, CodeInvalidRequest, "null"},
		// ids.
		{"id string", `{"jsonrpc":"2.0","id":"abc","method":"run"}`, true, none, ""},
		{"id empty string", `{"jsonrpc":"2.0","id":"","method":"run"}`, true, none, ""},
		{"id zero", `{"jsonrpc":"2.0","id":0,"method":"run"}`, true, none, ""},
		{"id max int64", `{"jsonrpc":"2.0","id":9223372036854775807,"method":"run"}`, true, none, ""},
		// docs/protocol.md: integer ids are 0..2^63-1; larger ones get -32600 id null.
		{"id 2^63", `{"jsonrpc":"2.0","id":9223372036854775808,"method":"run"}`, false, CodeInvalidRequest, "null"},
		{"id max uint64", `{"jsonrpc":"2.0","id":18446744073709551615,"method":"run"}`, false, CodeInvalidRequest, "null"},
		{"id beyond uint64", `{"jsonrpc":"2.0","id":18446744073709551616,"method":"run"}`, false, CodeInvalidRequest, "null"},
		{"id minus zero", `{"jsonrpc":"2.0","id":-0,"method":"run"}`, false, CodeInvalidRequest, "null"},
		{"id negative", `{"jsonrpc":"2.0","id":-1,"method":"run"}`, false, CodeInvalidRequest, "null"},
		{"id fraction", `{"jsonrpc":"2.0","id":1.5,"method":"run"}`, false, CodeInvalidRequest, "null"},
		{"id exponent", `{"jsonrpc":"2.0","id":1e2,"method":"run"}`, false, CodeInvalidRequest, "null"},
		{"id true", `{"jsonrpc":"2.0","id":true,"method":"run"}`, false, CodeInvalidRequest, "null"},
		{"id null", `{"jsonrpc":"2.0","id":null,"method":"run"}`, false, CodeInvalidRequest, "null"},
		{"id object", `{"jsonrpc":"2.0","id":{},"method":"run"}`, false, CodeInvalidRequest, "null"},
		{"id array", `{"jsonrpc":"2.0","id":[],"method":"run"}`, false, CodeInvalidRequest, "null"},
		// responses sent to the server: ignored.
		{"response result", `{"jsonrpc":"2.0","id":1,"result":42}`, false, none, ""},
		{"response null result", `{"jsonrpc":"2.0","id":1,"result":null}`, false, none, ""},
		{"response error", `{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}`, false, none, ""},
		{"response without id", `{"jsonrpc":"2.0","result":42}`, false, none, ""},
		// method.
		{"missing method", `{"jsonrpc":"2.0","id":7}`, false, CodeInvalidRequest, "7"},
		{"missing method string id", `{"jsonrpc":"2.0","id":"x"}`, false, CodeInvalidRequest, `"x"`},
		{"missing method no id", `{"jsonrpc":"2.0"}`, false, CodeInvalidRequest, "null"},
		{"method not a string", `{"jsonrpc":"2.0","id":7,"method":1}`, false, CodeInvalidRequest, "7"},
		// jsonrpc.
		{"jsonrpc missing", `{"id":3,"method":"run"}`, false, CodeInvalidRequest, "3"},
		{"jsonrpc 1.0", `{"jsonrpc":"1.0","id":3,"method":"run"}`, false, CodeInvalidRequest, "3"},
		{"jsonrpc number", `{"jsonrpc":2.0,"id":3,"method":"run"}`, false, CodeInvalidRequest, "3"},
		{"jsonrpc missing no id", `{"method":"run"}`, false, CodeInvalidRequest, "null"},
		// params.
		{"params a string", `{"jsonrpc":"2.0","id":4,"method":"run","params":"x"}`, false, CodeInvalidParams, "4"},
		{"params a number", `{"jsonrpc":"2.0","id":4,"method":"run","params":1}`, false, CodeInvalidParams, "4"},
		{"params true", `{"jsonrpc":"2.0","id":4,"method":"run","params":true}`, false, CodeInvalidParams, "4"},
		{"params a string, notification", `{"jsonrpc":"2.0","method":"exit","params":"x"}`, false, none, ""},
		// non-UTF-8 inside strings: no crash, the message is passed on.
		{"non-UTF-8 method", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"r\xffun\"}", true, none, ""},
		{"non-UTF-8 id", "{\"jsonrpc\":\"2.0\",\"id\":\"\xfe\xff\",\"method\":\"run\"}", true, none, ""},
		{"non-UTF-8 param", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"run\",\"params\":{\"module\":{\"wat\":\"\xc3\x28\"}}}", true, none, ""},
		{"non-UTF-8 key", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"run\",\"\xff\":1}", true, none, ""},
		{"non-UTF-8 outside strings", "{\"jsonrpc\":\"2.0\",\"id\":1,\xff\"method\":\"run\"}", false, CodeParseError, "null"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			passed, msgs := screenOne(t, []byte(c.body))
			if passed != c.passed {
				t.Errorf("passed = %v, want %v (output %+v)", passed, c.passed, msgs)
			}
			if c.code == none {
				if len(msgs) != 0 {
					t.Errorf("wrote %d messages, want none: %+v", len(msgs), msgs[0])
				}
				return
			}
			if len(msgs) != 1 {
				t.Fatalf("wrote %d messages, want 1", len(msgs))
			}
			m := msgs[0]
			if m.JSONRPC != "2.0" || m.Error == nil || m.Error.Code != c.code || m.id() != c.id || m.Error.Message == "" {
				t.Errorf("got jsonrpc %q id %s error %+v; want code %d id %s", m.JSONRPC, m.id(), m.Error, c.code, c.id)
			}
		})
	}
}

func TestScreenDeepNesting(t *testing.T) {
	bodies := map[string]string{
		"unclosed arrays":        strings.Repeat("[", 100000),
		"closed arrays":          strings.Repeat("[", 100000) + strings.Repeat("]", 100000),
		"unclosed objects":       strings.Repeat(`{"a":`, 100000),
		"closed objects":         strings.Repeat(`{"a":`, 100000) + "1" + strings.Repeat("}", 100000),
		"deep params":            `{"jsonrpc":"2.0","id":1,"method":"run","params":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`,
		"deep id":                `{"jsonrpc":"2.0","id":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `,"method":"run"}`,
		"deep unclosed in value": `{"jsonrpc":"2.0","id":1,"method":"run","params":{"x":` + strings.Repeat("[", 100000),
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			passed, msgs := screenOne(t, []byte(body))
			if passed {
				t.Fatalf("passed on")
			}
			if len(msgs) != 1 || msgs[0].Error == nil {
				t.Fatalf("output %+v, want one error response", msgs)
			}
			if c := msgs[0].Error.Code; c != CodeParseError && c != CodeInvalidRequest {
				t.Errorf("code %d", c)
			}
			if msgs[0].id() != "null" {
				t.Errorf("id %s, want null", msgs[0].id())
			}
		})
	}
}

// readObjectAll feeds ndjson input through a whole stream (frame reader,
// screening, jsonrpc2 decoding) and returns what jsonrpc2 would receive and
// what the stream answered by itself.
func readObjectAll(t *testing.T, input string, max int64) (reqs []*jsonrpc2.Request, endErr error, msgs []wireMsg) {
	t.Helper()
	var buf bytes.Buffer
	out := newOutbox(&buf, FramingNDJSON)
	ended := 0
	st := &stream{
		in:    newFrameReader(strings.NewReader(input), FramingNDJSON, max),
		out:   out,
		warn:  func(string, ...any) {},
		onEnd: func(err error) { ended++; endErr = err },
	}
	for {
		var msg anyMessageProbe
		if err := st.ReadObject(&msg); err != nil {
			break
		}
		reqs = append(reqs, &msg.req)
	}
	if ended != 1 {
		t.Errorf("onEnd called %d times", ended)
	}
	if err := out.close(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	return reqs, endErr, parseOutput(t, buf.Bytes())
}

func TestStreamReadObject(t *testing.T) {
	input := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"stats"}`,
		`not json`,
		strings.Repeat(" ", 1500) + `{}`, // oversized (max 1024)
		`[1,2]`,
		`{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"x":1}}`,
		`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}`,
	}, "\n") + "\n"
	reqs, endErr, msgs := readObjectAll(t, input, 1024)
	if endErr != io.EOF {
		t.Errorf("end %v, want io.EOF", endErr)
	}
	if len(reqs) != 3 || reqs[0].Method != "stats" || reqs[1].Method != "initialize" || !reqs[2].Notif {
		t.Errorf("requests passed on: %+v", reqs)
	}
	var codes []int64
	for _, m := range msgs {
		codes = append(codes, m.Error.Code)
	}
	want := []int64{CodeParseError, CodeInvalidRequest, CodeInvalidRequest}
	if len(codes) != len(want) || codes[0] != want[0] || codes[1] != want[1] || codes[2] != want[2] {
		t.Errorf("stream answered %v, want %v", codes, want)
	}
	if len(msgs) == 3 && !strings.Contains(msgs[1].Error.Message, "exceeds --max-message-bytes 1024") {
		t.Errorf("oversized message: %q", msgs[1].Error.Message)
	}
}

// TestStreamMethodNull: "method": null is not a string; the error must
// echo the request's id like any other invalid method.
func TestStreamMethodNull(t *testing.T) {
	reqs, _, msgs := readObjectAll(t, `{"jsonrpc":"2.0","id":7,"method":null}`+"\n", 1024)
	if len(reqs) != 0 {
		t.Errorf("passed on %+v", reqs[0])
	}
	if len(msgs) != 1 || msgs[0].Error == nil || msgs[0].Error.Code != CodeInvalidRequest || msgs[0].id() != "7" {
		for _, m := range msgs {
			t.Logf("answered id %s error %+v", m.id(), m.Error)
		}
		t.Errorf("want one -32600 response with id 7")
	}
}

// TestStreamReadObjectJSONRPC2Decode: every message screen passes on can be
// decoded by jsonrpc2 with the id intact (otherwise the stream answers with
// id null, and the caller never learns which request failed).
func TestStreamReadObjectJSONRPC2Decode(t *testing.T) {
	for _, c := range []struct {
		body string
		id   jsonrpc2.ID
	}{
		{`{"jsonrpc":"2.0","id":0,"method":"stats"}`, jsonrpc2.ID{Num: 0}},
		{`{"jsonrpc":"2.0","id":"a","method":"stats"}`, jsonrpc2.ID{Str: "a", IsString: true}},
		{`{"jsonrpc":"2.0","id":9223372036854775807,"method":"stats"}`, jsonrpc2.ID{Num: 1<<63 - 1}},
		{`{"jsonrpc":"2.0","id":"18446744073709551615","method":"stats"}`, jsonrpc2.ID{Str: "18446744073709551615", IsString: true}},
	} {
		var buf bytes.Buffer
		out := newOutbox(&buf, FramingNDJSON)
		st := &stream{
			in:    newFrameReader(strings.NewReader(c.body+"\n"), FramingNDJSON, 1024),
			out:   out,
			warn:  func(string, ...any) {},
			onEnd: func(error) {},
		}
		var msg anyMessageProbe
		err := st.ReadObject(&msg)
		_ = out.close(time.Second)
		if err != nil {
			t.Errorf("%s: ReadObject: %v; the stream answered %s", c.body, err, strings.TrimSpace(buf.String()))
			continue
		}
		if msg.req.ID != c.id {
			t.Errorf("%s: id %v, want %v", c.body, msg.req.ID, c.id)
		}
	}
}

// anyMessageProbe decodes like jsonrpc2's request path does (screen passes
// on requests only, which jsonrpc2 decodes with Request.UnmarshalJSON).
type anyMessageProbe struct{ req jsonrpc2.Request }

func (p *anyMessageProbe) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &p.req) }
