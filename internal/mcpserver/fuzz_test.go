package mcpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// FuzzToolArguments: whatever arguments an agent sends, reading them (the
// members, the limits, the module) never panics, and a refusal is an
// inputError naming its problem, bounded however large the input. The
// arguments reach the tools as the SDK's json.RawMessage, valid JSON, which
// jsonscan's readers take as given; other bytes are not arguments.
func FuzzToolArguments(f *testing.F) {
	for _, s := range []string{
		`{"module":{"wat":"(module)"},"function":"f"}`,
		`{"module":{"base64":"AGFzbQEAAAA="},"limits":{"fuel":1,"timeoutMs":"7"}}`,
		`{"module":{"path":"/etc/passwd"}}`,
		`{"module":{"wat":"x","path":"/a"},"limits":{"memoryBytes":1e400}}`,
		`{"limits":{"varBytes":18446744073709551616}}`,
		`{"module":null,"module":{}}`,
		`[]`, `{"\u0000":1}`,
	} {
		f.Add([]byte(s))
	}
	srv, err := New(newEngine(), Options{})
	if err != nil {
		f.Fatal(err)
	}
	known := []string{"module", "function", "args", "limits", "capabilities", "input", "config", "wasi"}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		args, err := readObject("", raw, known)
		if err == nil {
			var varBytes uint64
			_, _, err = srv.limitsAndSource(args, &varBytes)
		}
		if err == nil {
			return
		}
		var ie *inputError
		if !errors.As(err, &ie) {
			t.Fatalf("%q: %T %v, want an inputError", raw, err, err)
		}
		if ie.Problem == "" {
			t.Fatalf("%q: an inputError without a problem: %+v", raw, ie)
		}
		if n := len(err.Error()); n > 2048 {
			t.Fatalf("%q: a %d-byte error", raw, n)
		}
	})
}

// FuzzEnvelope: the transport reads a message's envelope as the SDK's
// jsonrpc.DecodeMessage does (the same message, or a refusal where it
// refuses), but for a line with more than one JSON value, which the SDK
// reads the first of, and nesting past the SDK's 1,000 levels (the SDK
// refuses those params when it decodes them); and what it writes decodes
// as what the SDK would have written.
func FuzzEnvelope(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":[1,"\u00e9"]}}}`,
		`{"jsonrpc":"2.0","id":"a\"b","method":"ping"}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`,
		`{"jsonrpc":"2.0","id":7,"result":{"roots":[]}}`,
		`{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"no","data":[1]}}`,
		`{"jsonrpc":"2.0","id":7,"error":null}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"x":1e400,"y":-0.0e-999,"z":1e99999999999}}`,
		`{"jsonrpc":"2.0","method":"","id":1e3}`,
		`{"jsonrpc":"2.0","method":null,"id":-0}`,
		`{"jsonrpc":"1.0","id":1,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":true,"method":"ping"}`,
		`{"jsonrpc":"2.0","method":5}`,
		`{"jsonrpc":"2.0","result":{}}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","method":"b","params":null}`,
		`{"JSONRPC":"2.0","id":1,"method":"ping"}`,
		` {"jsonrpc":"2.0","id":1,"method":"ping"} `,
		`[]`, `"x"`, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if depth(body) > 900 {
			return
		}
		ours, err := decodeMessage(body)
		theirs, sdkErr := jsonrpc.DecodeMessage(body)
		if err != nil && sdkErr == nil && !json.Valid(body) {
			return // the SDK's decoder reads the first value of a line and ignores what follows; a line is one message here
		}
		if (err == nil) != (sdkErr == nil) {
			t.Fatalf("%q: ours %v, the SDK's %v", body, err, sdkErr)
		}
		if err != nil {
			return
		}
		if !reflect.DeepEqual(ours, theirs) {
			t.Fatalf("%q: ours %+v, the SDK's %+v", body, ours, theirs)
		}
		if req, ok := ours.(*jsonrpc.Request); ok && req.Method == "" {
			return // the SDK would write no method at all; the server never sends one
		}
		if !sameJSON(t, mustEncode(t, encodeMessage, ours), mustEncode(t, sdkEncode, theirs)) {
			t.Fatalf("%q: written as %q, the SDK writes %q", body, mustEncode(t, encodeMessage, ours), mustEncode(t, sdkEncode, theirs))
		}
	})
}

func sdkEncode(m jsonrpc.Message) ([]byte, error) { return jsonrpc.EncodeMessage(m) }

func mustEncode(t *testing.T, enc func(jsonrpc.Message) ([]byte, error), m jsonrpc.Message) []byte {
	t.Helper()
	b, err := enc(m)
	if err != nil {
		t.Fatalf("encoding %+v: %v", m, err)
	}
	if i := bytes.IndexByte(b, '\n'); i >= 0 && i != len(b)-1 {
		t.Fatalf("a newline inside the line: %q", b)
	}
	return b
}

// sameJSON: a and b are the same JSON values, numbers spelled alike.
// (Decoded as float64, 1e400, valid JSON, is refused; both sides write
// a request's params as they came and an id as the same type.)
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	return reflect.DeepEqual(decodeUsingNumber(t, a), decodeUsingNumber(t, b))
}

func decodeUsingNumber(t *testing.T, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	return v
}

// depth is the deepest nesting in b (strings not skipped: an upper bound).
func depth(b []byte) int {
	d, most := 0, 0
	for _, c := range b {
		switch c {
		case '{', '[':
			d++
			most = max(most, d)
		case '}', ']':
			d--
		}
	}
	return most
}
