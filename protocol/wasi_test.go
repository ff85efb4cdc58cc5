package protocol

import (
	"encoding/json"
	"testing"
)

func TestBytesOnTheWire(t *testing.T) {
	for _, c := range []struct {
		in   []byte
		wire string
	}{
		{[]byte("hello\n"), `{"text":"hello\n"}`},
		{[]byte{}, `{"text":""}`},
		{[]byte{0xff, 0x00}, `{"base64":"/wA="}`},
		{[]byte("ü\x00"), `{"base64":"w7wA"}`}, // NUL escapes to 6 bytes: base64 is cheaper
	} {
		out, err := json.Marshal(Bytes(c.in))
		if err != nil || string(out) != c.wire {
			t.Errorf("%q: %s, %v; want %s", c.in, out, err, c.wire)
		}
		var back Bytes
		if err := json.Unmarshal(out, &back); err != nil || string(back) != string(c.in) {
			t.Errorf("%s read back as %q, %v", out, back, err)
		}
	}
	for raw, want := range map[string]string{`"plain"`: "plain", `{"text":"t"}`: "t", `{"base64":"aGk="}`: "hi"} {
		b, problem := DecodeBytes([]byte(raw))
		if problem != "" || string(b) != want {
			t.Errorf("%s: %q %q", raw, b, problem)
		}
	}
	for _, raw := range []string{`1`, `null`, `{}`, `{"text":"a","base64":"YQ=="}`, `{"hex":"00"}`, `{"text":1}`, `{"base64":"!"}`, `["a"]`} {
		if _, problem := DecodeBytes([]byte(raw)); problem == "" {
			t.Errorf("%s accepted", raw)
		}
	}
}
