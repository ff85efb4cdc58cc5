package rpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/sandboxd/sandboxd/internal/jsonscan"
	"github.com/sandboxd/sandboxd/protocol"
)

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

// screenOne runs Server.screen on body over an in-memory outbox and
// returns whether the message was passed on and what was written.
func screenOne(t *testing.T, body []byte) (bool, []wireMsg) {
	t.Helper()
	passed, raw := screenMsgs(t, body)
	var msgs []wireMsg
	for _, l := range raw {
		msgs = append(msgs, parseOutput(t, append(l, '\n'))...)
	}
	return passed, msgs
}

// screenMsgs runs Server.screen on body and returns whether it was passed
// on and the raw messages written.
func screenMsgs(t *testing.T, body []byte) (bool, [][]byte) {
	t.Helper()
	var buf bytes.Buffer
	s, err := NewServer(stubEngine{}, Options{Framing: FramingNDJSON})
	if err != nil {
		t.Fatal(err)
	}
	s.out = newOutbox(&buf, FramingNDJSON)
	done := make(chan struct{})
	go func() { s.out.run(); close(done) }()
	req, passed := s.screen(body)
	if req.answer != nil {
		s.out.send(req.answer)
	}
	if err := s.out.close(); err != nil {
		t.Fatal(err)
	}
	<-done
	if buf.Len() == 0 {
		return passed, nil
	}
	return passed, bytes.Split(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("\n"))
}

// stubEngine is an engine with nothing in it, for tests of the layers
// above it.
type stubEngine struct{}

func (stubEngine) Compile(context.Context, protocol.Source) (Module, protocol.CompileInfo, error) {
	return nil, protocol.CompileInfo{}, &protocol.Error{Kind: protocol.KindInvalidModule, Message: "stub"}
}

func (stubEngine) Run(context.Context, Module, protocol.Run) (*protocol.RunOutcome, error) {
	return nil, &protocol.Error{Kind: protocol.KindHost, Message: "stub"}
}

func (stubEngine) CacheStats() protocol.CacheStats { return protocol.CacheStats{} }

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
		// JSON's whitespace is space, tab, newline and return only.
		{"vertical tab before", "\v{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"run\"}", false, CodeParseError, "null"},
		{"no-break space after", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"run\"}\u00a0", false, CodeParseError, "null"},
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
			if strings.HasPrefix(name, "deep params") || strings.HasPrefix(name, "deep unclosed") {
				// the id comes before the deep member: answered with it (screen_depth_test.go)
				if c, id := msgs[0].Error.Code, msgs[0].id(); c != CodeInvalidParams || id != "1" {
					t.Errorf("code %d id %s, want %d with id 1", c, id, CodeInvalidParams)
				}
				return
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

// serveAll serves ndjson input to the end over a stub engine and returns
// what the server wrote.
func serveAll(t *testing.T, input string, max int64) []wireMsg {
	t.Helper()
	s, err := NewServer(stubEngine{}, Options{Framing: FramingNDJSON, MaxMessageBytes: max})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := s.Serve(context.Background(), strings.NewReader(input), &buf); err != nil {
		t.Fatal(err)
	}
	return parseOutput(t, buf.Bytes())
}

// TestReadLoopAnswers: the read loop answers what screening refuses and
// dispatches the rest, in order, to the end of input.
func TestReadLoopAnswers(t *testing.T) {
	input := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"stats"}`,
		`not json`,
		strings.Repeat(" ", 1500) + `{}`, // oversized (max 1024)
		`[1,2]`,
		`{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"x":1}}`,
		`{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}`,
	}, "\n") + "\n"
	msgs := serveAll(t, input, 1024)
	var got []string
	for _, m := range msgs {
		if m.Error != nil {
			got = append(got, strconv.FormatInt(m.Error.Code, 10))
		} else {
			got = append(got, "result "+m.id())
		}
	}
	want := []string{"result 1", "-32700", "-32600", "-32600", "result 2"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("answered %v, want %v", got, want)
	}
	if len(msgs) == 5 && !strings.Contains(msgs[2].Error.Message, "exceeds --max-message-bytes 1024") {
		t.Errorf("oversized message: %q", msgs[2].Error.Message)
	}
}

// TestScreenMethodNull: "method": null is not a string; the error must
// echo the request's id like any other invalid method.
func TestScreenMethodNull(t *testing.T) {
	passed, msgs := screenOne(t, []byte(`{"jsonrpc":"2.0","id":7,"method":null}`))
	if passed {
		t.Errorf("passed on")
	}
	if len(msgs) != 1 || msgs[0].Error == nil || msgs[0].Error.Code != CodeInvalidRequest || msgs[0].id() != "7" {
		for _, m := range msgs {
			t.Logf("answered id %s error %+v", m.id(), m.Error)
		}
		t.Errorf("want one -32600 response with id 7")
	}
}

// TestParseIDByValue: ids are read by value, escapes decoded, so the id
// the server keys and echoes is the one the parent meant (issue 10 item 9:
// "\u0041", "a\/b" and "<" were answered -32603 and never ran).
func TestParseIDByValue(t *testing.T) {
	for _, c := range []struct {
		raw string
		id  jsonrpc2.ID
	}{
		{`0`, jsonrpc2.ID{Num: 0}},
		{`"a"`, jsonrpc2.ID{Str: "a", IsString: true}},
		{`9223372036854775807`, jsonrpc2.ID{Num: 1<<63 - 1}},
		{`"18446744073709551615"`, jsonrpc2.ID{Str: "18446744073709551615", IsString: true}},
		{`"\u0041"`, jsonrpc2.ID{Str: "A", IsString: true}},
		{`"a\/b"`, jsonrpc2.ID{Str: "a/b", IsString: true}},
		{`"<"`, jsonrpc2.ID{Str: "<", IsString: true}},
		{`"\u00e9"`, jsonrpc2.ID{Str: "é", IsString: true}},
	} {
		id, ok := parseID(json.RawMessage(c.raw))
		if !ok || id != c.id {
			t.Errorf("%s: id %+v, %v; want %+v", c.raw, id, ok, c.id)
		}
		if keyOf(id) != keyOf(c.id) {
			t.Errorf("%s: key differs", c.raw)
		}
	}
	if keyOf(jsonrpc2.ID{Num: 1}) == keyOf(jsonrpc2.ID{Str: "1", IsString: true}) {
		t.Error("the number 1 and the string \"1\" share a key")
	}
}

// FuzzScreen: arbitrary bytes through Server.screen never panic; the
// stream writes at most one response, none for what it passes on, and
// every response is a valid JSON-RPC error.
func FuzzScreen(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"run","params":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		passed, msgs := screenMsgs(t, data)
		if len(msgs) > 1 || (passed && len(msgs) > 0) {
			t.Fatalf("passed=%v and wrote %q", passed, msgs)
		}
		if passed {
			var env map[string]json.RawMessage
			if err := json.Unmarshal(data, &env); err != nil {
				t.Fatalf("passed on a non-object: %v", err)
			}
			if id, ok := env["id"]; ok && !validID(id) {
				t.Fatalf("passed on an invalid id %s", id)
			}
		}
		for _, l := range msgs {
			var m struct {
				JSONRPC string          `json:"jsonrpc"`
				ID      json.RawMessage `json:"id"`
				Error   struct {
					Code    int64  `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatalf("wrote invalid JSON %q", l)
			}
			switch m.Error.Code {
			case CodeParseError, CodeInvalidRequest, CodeInvalidParams:
			default:
				t.Fatalf("wrote code %d", m.Error.Code)
			}
			if m.JSONRPC != "2.0" || m.Error.Message == "" || m.ID == nil {
				t.Fatalf("wrote %q", l)
			}
		}
	})
}

func validID(raw json.RawMessage) bool {
	_, ok := parseID(raw)
	return ok
}

// FuzzEnvelopeOf: for any JSON object, envelopeOf finds what a decoding
// into a map (exact keys, the last repeated one winning) finds.
func FuzzEnvelopeOf(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"stats","Method":"shutdown"}`,
		`{"ID":2,"id":"a\"b","params":{"x":[1,{"y":"}"}]},"params":null}`,
		` { "\u0069d" : -1.5e3 , "method" : "run" , "error" : true } `,
		`{"result":[],"jsonrpc":"\\","":{},"id":"\u00e9"}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want map[string]json.RawMessage
		if json.Unmarshal(b, &want) != nil || want == nil {
			return
		}
		env := envelopeOf(bytes.TrimSpace(b))
		for name, got := range map[string]json.RawMessage{"jsonrpc": env.JSONRPC, "id": env.ID, "method": env.Method,
			"params": env.Params, "result": env.Result, "error": env.Error} {
			w, ok := want[name]
			if ok != (got != nil) || (ok && !jsonEqual(w, got)) {
				t.Fatalf("%q in %s: got %q, want %q (present %v)", name, b, got, w, ok)
			}
		}
	})
}

func jsonEqual(a, b []byte) bool {
	var x, y bytes.Buffer
	return json.Compact(&x, a) == nil && json.Compact(&y, b) == nil && bytes.Equal(x.Bytes(), y.Bytes())
}

// nested is n arrays, one inside the other.
func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// TestScreenTooDeep: a message nested past the parser's limit is answered
// with the id it carried before the deep member (naming the limit), and
// -32700 with id null only when no id could be read before it.
func TestScreenTooDeep(t *testing.T) {
	deep := nested(jsonscan.MaxDepth) // with the envelope: one level past the limit
	cases := []struct {
		name, body, id string
		code           int64
		msg            string
	}{
		{"deep params", `{"jsonrpc":"2.0","id":7,"method":"run","params":` + deep + `}`,
			"7", CodeInvalidParams, "params: nested deeper than 10000 levels (the limit)"},
		{"deep other member", `{"jsonrpc":"2.0","id":"a","method":"run","x":{"y":` + nested(jsonscan.MaxDepth-1) + `}}`,
			`"a"`, CodeInvalidRequest, `invalid request: member "x" is nested deeper than 10000 levels (the limit)`},
		{"id after the deep member", `{"jsonrpc":"2.0","method":"run","params":` + deep + `,"id":7}`,
			"null", CodeParseError, "parse error: the message is nested deeper than 10000 levels (the limit)"},
		{"a deep id", `{"jsonrpc":"2.0","method":"run","id":` + deep + `}`,
			"null", CodeParseError, "parse error: the message is nested deeper than 10000 levels (the limit)"},
		{"no id", `{"jsonrpc":"2.0","method":"run","params":` + deep + `}`,
			"null", CodeParseError, "parse error: the message is nested deeper than 10000 levels (the limit)"},
		{"a bad id", `{"jsonrpc":"2.0","id":-1,"method":"run","params":` + deep + `}`,
			"null", CodeParseError, "parse error: the message is nested deeper than 10000 levels (the limit)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			passed, msgs := screenOne(t, []byte(c.body))
			if passed || len(msgs) != 1 || msgs[0].Error == nil {
				t.Fatalf("passed %v, answers %+v", passed, msgs)
			}
			if m := msgs[0]; m.id() != c.id || m.Error.Code != c.code || m.Error.Message != c.msg {
				t.Fatalf("answer id %s, %d %q; want id %s, %d %q", m.id(), m.Error.Code, m.Error.Message, c.id, c.code, c.msg)
			}
		})
	}
	// At the limit the message is valid and passes on.
	if passed, msgs := screenOne(t, []byte(`{"jsonrpc":"2.0","id":7,"method":"run","params":[`+nested(jsonscan.MaxDepth-2)+`]}`)); !passed || len(msgs) != 0 {
		t.Fatalf("at the limit: passed %v, answers %+v", passed, msgs)
	}
	// A syntax error before the deep member is still a parse error.
	if _, msgs := screenOne(t, []byte(`{"jsonrpc":"2.0","id":7,"method":run,"params":`+deep+`}`)); len(msgs) != 1 || msgs[0].Error.Code != CodeParseError || msgs[0].id() != "null" {
		t.Fatalf("a syntax error first: %+v", msgs)
	}
}
