package rpc

// Benchmarks of the wire encoding of a run: value encoding, argument
// decoding and the decoding of a whole `run` request. No timing asserts.

import (
	"encoding/json"
	"math"
	"testing"

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
