package mcpserver

import (
	"encoding/json"
	"errors"
	"testing"
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
