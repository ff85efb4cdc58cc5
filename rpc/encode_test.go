package rpc

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/sandboxd/sandboxd/protocol"
)

// TestPlainResultEncoding: the reflection-free encoding of a plain run's
// or call's result writes exactly what json.Marshal writes, and declines
// (so json.Marshal encodes) every result it does not cover.
func TestPlainResultEncoding(t *testing.T) {
	values := protocol.EncodeValues([]protocol.Value{protocol.ValueI32(-5), protocol.ValueI32(math.MaxInt32),
		protocol.ValueI64(math.MinInt64), protocol.ValueF32(1.5), protocol.ValueF32(float32(math.NaN())),
		protocol.ValueF64(math.Inf(-1)), protocol.ValueF64(-2.5e-300), protocol.ValueF64(0)})
	out := protocol.Bytes("hi")
	yes, exit := true, 3
	covered := []any{
		&protocol.RunResult{Values: values, FuelConsumed: 12, PeakMemoryBytes: 65536, ElapsedMicros: 3, QueuedMicros: 0,
			ModuleID: "sha256:00ff", LogLines: 2, LogTruncated: true},
		&protocol.RunResult{Values: []protocol.WireValue{}, ModuleID: "sha256:"},
		&protocol.RunResult{Values: nil, ElapsedMicros: -1},
		&protocol.CallResult{Values: values[:1], FuelConsumed: math.MaxUint64, ElapsedMicros: math.MaxInt64, LogLines: 1},
		&protocol.CallResult{Values: []protocol.WireValue{}},
	}
	for i, r := range covered {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendPlainResult(nil, r)
		if !ok {
			t.Errorf("result %d: declined, want it encoded: %s", i, want)
			continue
		}
		if string(got) != string(want) {
			t.Errorf("result %d:\n got %s\nwant %s", i, got, want)
		}
	}
	declined := []any{
		&protocol.RunResult{Values: values, Output: &out},
		&protocol.RunResult{Values: values, WASIResult: &protocol.WASIResult{ExitCode: 1}},
		&protocol.RunResult{Values: values, ModuleID: "sha256:<script>"},
		&protocol.RunResult{Values: []protocol.WireValue{{Type: "i32", Value: json.RawMessage(" 1")}}},
		&protocol.RunResult{Values: []protocol.WireValue{{Type: "i32", Value: json.RawMessage(`"a\u00e9"`)}}},
		&protocol.RunResult{Values: []protocol.WireValue{{Type: "i32", Value: json.RawMessage(`1e`)}}},
		&protocol.CallResult{Values: values, Output: &out},
		&protocol.CallResult{Values: values, OutputTruncated: &yes},
		&protocol.CallResult{Values: values, ExitCode: &exit},
		&protocol.CallResult{Values: values, Stdout: &out},
		&protocol.CallResult{Values: values, Stderr: &out},
		&protocol.CompileResult{ModuleID: "sha256:00"},
		nil,
	}
	for i, r := range declined {
		if got, ok := appendPlainResult(nil, r); ok {
			t.Errorf("declined result %d: encoded as %s", i, got)
		}
	}
}

// TestHostCallEncoding: the host/call request written by hand is what
// json.Marshal writes of its params (values of every type, bytes as text
// and as base64, escapes in names and ids, a call of an instance's).
func TestHostCallEncoding(t *testing.T) {
	type request struct {
		JSONRPC string                  `json:"jsonrpc"`
		ID      string                  `json:"id"`
		Method  string                  `json:"method"`
		Params  protocol.HostCallParams `json:"params"`
	}
	bytesOf := func(b string) protocol.HostValue {
		return protocol.HostValue{Value: protocol.Value{Type: protocol.TypeBytes}, Bytes: []byte(b)}
	}
	args := []protocol.HostValue{{Value: protocol.ValueI32(-1)}, {Value: protocol.ValueI64(math.MinInt64)},
		{Value: protocol.ValueF32(float32(math.Inf(-1)))}, {Value: protocol.Value{Type: protocol.F64, Bits: 0x7ff8000000000123}},
		bytesOf("héllo <&> \"q\""), bytesOf("\x00\x01\xff"), bytesOf("")}
	for _, c := range []struct {
		id       jsonrpc2.ID
		instance string
		call     protocol.HostCall
	}{
		{jsonrpc2.ID{Num: 7}, "", protocol.HostCall{Module: "env", Name: "lookup", Args: args}},
		{jsonrpc2.ID{Str: "a\u2028\"b", IsString: true}, "inst-1-2", protocol.HostCall{Module: "extism:host/user", Name: "<kv>\x1b", Args: nil}},
	} {
		got, err := encodeHostCall("sbx-3", &job{id: c.id}, c.instance, c.call)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(request{JSONRPC: "2.0", ID: "sbx-3", Method: protocol.MethodHostCall,
			Params: protocol.HostCallParams{ID: c.id, Instance: c.instance, Module: c.call.Module, Name: c.call.Name, Args: protocol.EncodeHostValues(c.call.Args)}})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("encoded\n%s\nwant\n%s", got, want)
		}
		var back request
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatal(err)
		}
		for i, w := range back.Params.Args {
			v, err := w.HostValue()
			if err != nil || v.Type != c.call.Args[i].Type || v.Bits != c.call.Args[i].Bits || string(v.Bytes) != string(c.call.Args[i].Bytes) {
				t.Errorf("arg %d read back as %+v, %v; sent %+v", i, v, err, c.call.Args[i])
			}
		}
	}
}
