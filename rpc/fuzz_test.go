package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/; `go test` runs them.

// FuzzFrameReader: arbitrary bytes through both framings never panic, never
// loop without consuming input, and never yield a body longer than max (an
// ndjson body may carry its one terminating newline on top).
func FuzzFrameReader(f *testing.F) {
	f.Add([]byte("Content-Length: 2\r\n\r\n{}"), false, uint16(1024))
	f.Add([]byte("{}\n[]\n"), true, uint16(1024))
	f.Fuzz(func(t *testing.T, data []byte, ndjson bool, m uint16) {
		max := int64(m%4096) + 1
		framing := FramingContentLength
		if ndjson {
			framing = FramingNDJSON
		}
		fr := newFrameReader(bytes.NewReader(data), framing, max)
		for i := 0; ; i++ {
			if i > len(data)+2 {
				t.Fatalf("more than %d frames from %d bytes", i, len(data))
			}
			body, err := fr.next()
			var oe *oversizedError
			var fe *FramingError
			switch {
			case err == nil:
			case errors.As(err, &oe):
				if body != nil {
					t.Fatalf("oversized error with a body")
				}
				continue
			case err == io.EOF, errors.As(err, &fe):
				return
			default:
				t.Fatalf("unexpected error %T %v", err, err)
			}
			n := int64(len(body))
			if ndjson {
				n = int64(len(bytes.TrimSuffix(body, []byte("\n"))))
				if len(bytes.TrimSpace(body)) == 0 {
					t.Fatalf("blank ndjson line returned as a message")
				}
				if bytes.IndexByte(bytes.TrimSuffix(body, []byte("\n")), '\n') >= 0 {
					t.Fatalf("ndjson body spans lines: %q", body)
				}
			}
			if n > max {
				t.Fatalf("body of %d bytes, max %d", n, max)
			}
		}
	})
}

// FuzzScreen: arbitrary bytes through stream.screen never panic; the
// stream writes at most one response, none for what it passes on, and
// every response is a valid JSON-RPC error.
func FuzzScreen(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"run","params":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var buf bytes.Buffer
		out := newOutbox(&buf, FramingNDJSON)
		st := &stream{out: out, warn: func(string, ...any) {}}
		_, passed := st.screen(data)
		if err := out.close(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		lines := bytes.Split(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("\n"))
		if buf.Len() == 0 {
			lines = nil
		}
		if len(lines) > 1 || (passed && len(lines) > 0) {
			t.Fatalf("passed=%v and wrote %q", passed, buf.Bytes())
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
		for _, l := range lines {
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

// FuzzDecodeRun: arbitrary params never panic decodeRun or decodeCompile;
// errors are *ParamError; accepted limits are within the maximums.
func FuzzDecodeRun(f *testing.F) {
	f.Add([]byte(`{"module":{"wat":"(module)"}}`))
	def, max := limits.Defaults(), limits.DefaultMaximums()
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := decodeRun(json.RawMessage(data), def, max)
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
		if _, err := decodeCompile(json.RawMessage(data)); err != nil {
			var pe *ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("decodeCompile error %T %v is not a *ParamError", err, err)
			}
		}
	})
}

// FuzzDecodeArg: arbitrary JSON never panics DecodeArg; what it accepts
// has the parameter's type and survives EncodeValue + DecodeArg bit for bit.
func FuzzDecodeArg(f *testing.F) {
	f.Add([]byte(`42`), byte(0))
	f.Fuzz(func(t *testing.T, raw []byte, tyByte byte) {
		ty := sandbox.ValueTypes[int(tyByte)%len(sandbox.ValueTypes)]
		v, err := DecodeArg(json.RawMessage(raw), ty)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if v.Type != ty {
			t.Fatalf("decoded type %s, want %s", v.Type, ty)
		}
		if (ty == sandbox.I32 || ty == sandbox.F32) && v.Bits>>32 != 0 {
			t.Fatalf("%s value with bits %#x", ty, v.Bits)
		}
		enc, err := json.Marshal(EncodeValue(v))
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		back, err := DecodeArg(enc, ty)
		if err != nil || back != v {
			t.Fatalf("%s %#x encodes as %s, which decodes to %#x, %v", ty, v.Bits, enc, back.Bits, err)
		}
	})
}
