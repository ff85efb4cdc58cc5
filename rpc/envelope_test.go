package rpc

import (
	"bytes"
	"encoding/json"
	"testing"
)

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
