package sandbox

import "github.com/sandboxd/sandboxd/protocol"

// Values live in the protocol package (pure Go, shared with the sidecar and
// the Go client); these names keep sandbox.Value and friends usable.

// ValType is a wasm value type the sandbox can pass in or out of a guest.
type ValType = protocol.ValType

// Value is one wasm value, stored as its raw bits so that every value,
// including NaN payloads and -0.0, crosses every boundary unchanged.
type Value = protocol.Value

// The supported value types. Reference and vector types are refused with an
// export error naming the type.
const (
	I32 = protocol.I32
	I64 = protocol.I64
	F32 = protocol.F32
	F64 = protocol.F64
)

// valueTypes lists the supported types, in wasm order (protocol.ValueTypes
// for importers).
var valueTypes = protocol.ValueTypes()

// ValueI32 returns an i32 value.
func ValueI32(v int32) Value { return protocol.ValueI32(v) }

// ValueI64 returns an i64 value.
func ValueI64(v int64) Value { return protocol.ValueI64(v) }

// ValueF32 returns an f32 value with exactly the bits of v.
func ValueF32(v float32) Value { return protocol.ValueF32(v) }

// ValueF64 returns an f64 value with exactly the bits of v.
func ValueF64(v float64) Value { return protocol.ValueF64(v) }

// ParseValue reads a value of type ty from text, as given on the CLI; see
// protocol.ParseValue.
func ParseValue(ty ValType, s string) (Value, error) { return protocol.ParseValue(ty, s) }
