package rpc

// Benchmarks of the wire encoding of a run: value encoding, argument
// decoding and the decoding of a whole `run` request. No timing asserts.

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

func BenchmarkEncodeValue(b *testing.B) {
	values := []protocol.Value{protocol.ValueI32(-42), protocol.ValueI64(math.MaxInt64), protocol.ValueF32(1.5), protocol.ValueF64(math.NaN())}
	for _, v := range values {
		b.Run(string(v.Type), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = EncodeValue(v)
			}
		})
	}
}

func BenchmarkDecodeArg(b *testing.B) {
	cases := []struct {
		name string
		raw  string
		ty   protocol.ValType
	}{
		{"i32-number", `42`, protocol.I32},
		{"i64-string", `"18446744073709551615"`, protocol.I64},
		{"f64-number", `3.141592653589793`, protocol.F64},
		{"f64-bits", `{"type":"f64","bits":"0x7ff8000000000001"}`, protocol.F64},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			raw := json.RawMessage(c.raw)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeArg(raw, c.ty); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeRun decodes the params of the benchmark harness's typical
// request: a cached module by id, add(1, 2), one limit.
func BenchmarkDecodeRun(b *testing.B) {
	raw := json.RawMessage(`{"module":{"id":"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},` +
		`"function":"add","args":[1,2],"limits":{"fuel":1000000}}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := decodeRun(raw, limits.Defaults(), limits.DefaultMaximums()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeRunWAT decodes a run of a module sent as WAT text: the
// harness's well_behaved.wat, 2.4 KB with newlines to unescape.
func BenchmarkDecodeRunWAT(b *testing.B) {
	raw := watRunParams(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := decodeRun(raw, limits.Defaults(), limits.DefaultMaximums()); err != nil {
			b.Fatal(err)
		}
	}
}

func watRunParams(b *testing.B) json.RawMessage {
	wat, err := os.ReadFile("../testdata/wat/well_behaved.wat")
	if err != nil {
		b.Fatal(err)
	}
	text, _ := json.Marshal(string(wat))
	return json.RawMessage(`{"module":{"wat":` + string(text) + `},"function":"add","args":[1,2]}`)
}

// BenchmarkScreen screens a whole run message (by id, and as WAT): the
// syntax check and the envelope.
func BenchmarkScreen(b *testing.B) {
	s, err := NewServer(nil, Options{})
	if err != nil {
		b.Fatal(err)
	}
	msgs := map[string][]byte{
		"id":  []byte(`{"jsonrpc":"2.0","id":12345,"method":"run","params":{"module":{"id":"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},"function":"add","args":[1,2]}}`),
		"wat": []byte(`{"jsonrpc":"2.0","id":12345,"method":"run","params":` + string(watRunParams(b)) + `}`),
	}
	for name, msg := range msgs {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(msg)))
			for b.Loop() {
				if _, ok := s.screen(msg); !ok {
					b.Fatal("refused")
				}
			}
		})
	}
}

// benchInstance is the instance a call decodes against: add(i32, i32).
type benchInstance struct{ info *protocol.ModuleInfo }

func (b benchInstance) ID() string                   { return "inst-bench-1" }
func (b benchInstance) Module() *protocol.ModuleInfo { return b.info }
func (b benchInstance) Limits() limits.Limits        { return limits.Defaults() }
func (b benchInstance) Enqueue() Turn                { return nil }
func (b benchInstance) Release()                     {}

// BenchmarkDecodeCall splits and decodes the params of the harness's warm
// call (row 13): add(1, 2) on an instance, as takeTurn and decodeCall do.
func BenchmarkDecodeCall(b *testing.B) {
	raw := json.RawMessage(`{"instance":"inst-7f3a9c-1","function":"add","args":[1,2]}`)
	in := benchInstance{info: &protocol.ModuleInfo{ID: "sha256:x", Exports: []protocol.Export{
		{Name: "add", Kind: "func", Params: []string{"i32", "i32"}, Results: []string{"i32"}}}}}
	b.ReportAllocs()
	for b.Loop() {
		obj, _, err := callParams(raw)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := decodeCall(&obj, in, limits.Defaults(), limits.DefaultMaximums()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeCallResponse encodes the response of a warm add(1, 2).
func BenchmarkEncodeCallResponse(b *testing.B) {
	res := &protocol.CallResult{Values: protocol.EncodeValues([]protocol.Value{protocol.ValueI32(3)}), FuelConsumed: 4, ElapsedMicros: 1}
	id := jsonrpc2.ID{Num: 12345}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := responseBody(id, res, nil); err != nil {
			b.Fatal(err)
		}
	}
}
