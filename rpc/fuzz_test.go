package rpc

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/; `go test` runs them.

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

// FuzzDecodeRun: arbitrary params never panic decodeRun or decodeCompile
// (what is not valid JSON never reaches them: screening answers it);
// errors are *ParamError; accepted limits are within the maximums.
func FuzzDecodeRun(f *testing.F) {
	f.Add([]byte(`{"module":{"wat":"(module)"}}`))
	def, max := limits.Defaults(), limits.DefaultMaximums()
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := decodeRunFully(json.RawMessage(data), def, max)
		if err != nil {
			var pe *ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("decodeRun error %T %v is not a *ParamError", err, err)
			}
		} else {
			if spec.function == "" {
				t.Fatalf("empty function")
			}
			if err := spec.limits.Validate(max); err != nil {
				t.Fatalf("accepted limits %+v: %v", spec.limits, err)
			}
			n := 0
			s := spec.source
			for _, set := range []bool{s.WAT != "", s.Wasm != nil, s.ID != "", s.Path != ""} {
				if set {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("source %+v has %d fields set", s, n)
			}
		}
		src, err := decodeCompile(json.RawMessage(data), def, max)
		if serr := screenedParams(data); serr != nil {
			src, err = protocol.Source{}, serr
		}
		if err != nil {
			var pe *ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("decodeCompile error %T %v is not a *ParamError", err, err)
			}
		} else if src.CompileTimeout <= 0 || src.CompileTimeout > max.CompileTimeout || src.CompileMemoryBytes == 0 || src.CompileMemoryBytes > max.CompileMemoryBytes {
			t.Fatalf("accepted compile limits %v, %d", src.CompileTimeout, src.CompileMemoryBytes)
		}
	})
}

func validID(raw json.RawMessage) bool {
	_, ok := parseID(raw)
	return ok
}
