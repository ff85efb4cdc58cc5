package protocol_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/protocol"
)

// TestBytesNeverCostMoreThanBase64: bytes that are
// valid UTF-8 but escape to 6 bytes each (NUL, control bytes, <>&,
// U+2028) were written as {"text"}, 6 × their length; every output is now
// at most its base64 plus the wrapper, and still decodes to the same bytes.
func TestBytesNeverCostMoreThanBase64(t *testing.T) {
	cases := map[string]struct {
		in   []byte
		form string
	}{
		"plain text":        {[]byte("Hello, Ada!\n"), "text"},
		"empty":             {[]byte{}, "text"},
		"accents":           {[]byte("héllo wörld"), "text"},
		"nuls":              {make([]byte, 3000), "base64"},
		"controls":          {bytes.Repeat([]byte{1, 2, 3, 0x1f}, 500), "base64"},
		"html":              {[]byte(strings.Repeat("<&>", 400)), "base64"},
		"line separators":   {[]byte(strings.Repeat("\u2028", 400)), "base64"},
		"invalid utf-8":     {[]byte{0xff, 0xfe, 'a'}, "base64"},
		"text with a few <": {[]byte(strings.Repeat("a <b>bold</b> word among many other words of a long plain sentence; ", 40)), "text"},
	}
	for name, c := range cases {
		out, err := json.Marshal(protocol.Bytes(c.in))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if limit := 4*((len(c.in)+2)/3) + len(`{"base64":""}`); len(out) > limit {
			t.Errorf("%s: %d bytes on the wire for %d bytes (limit %d)", name, len(out), len(c.in), limit)
		}
		if !bytes.HasPrefix(out, []byte(`{"`+c.form+`":`)) {
			t.Errorf("%s: written as %.40s…, want {%q}", name, out, c.form)
		}
		var back protocol.Bytes
		if err := json.Unmarshal(out, &back); err != nil || !bytes.Equal(back, c.in) {
			t.Errorf("%s: does not decode back (%v)", name, err)
		}
	}
}
