package protocol

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ValType is a wasm value type the sandbox can pass in or out of a guest.
type ValType string

// The supported value types. Reference and vector types are refused with an
// export error naming the type.
const (
	I32 ValType = "i32"
	I64 ValType = "i64"
	F32 ValType = "f32"
	F64 ValType = "f64"
)

// Value is one wasm value, stored as its raw bits so that every value,
// including NaN payloads and -0.0, crosses every boundary unchanged.
type Value struct {
	Type ValType
	Bits uint64 // i32/f32 in the low 32 bits
}

// ValueI32 returns an i32 value.
func ValueI32(v int32) Value { return Value{I32, uint64(uint32(v))} }

// ValueI64 returns an i64 value.
func ValueI64(v int64) Value { return Value{I64, uint64(v)} }

// ValueF32 returns an f32 value with exactly the bits of v.
func ValueF32(v float32) Value { return Value{F32, uint64(math.Float32bits(v))} }

// ValueF64 returns an f64 value with exactly the bits of v.
func ValueF64(v float64) Value { return Value{F64, math.Float64bits(v)} }

// I32 returns the value as an int32.
func (v Value) I32() int32 { return int32(uint32(v.Bits)) }

// I64 returns the value as an int64.
func (v Value) I64() int64 { return int64(v.Bits) }

// F32 returns the value as a float32, bits preserved.
func (v Value) F32() float32 { return math.Float32frombits(uint32(v.Bits)) }

// F64 returns the value as a float64, bits preserved.
func (v Value) F64() float64 { return math.Float64frombits(v.Bits) }

// Float returns an f32 or f64 value widened to float64, for display and JSON.
// NaN payloads are not preserved by the widening: use Bits for those.
func (v Value) Float() float64 {
	if v.Type == F32 {
		return float64(v.F32())
	}
	return v.F64()
}

// String formats the value the way the CLI prints results: I32(42),
// I64(-1), F32(1.5), F64(NaN:0x7ff8000000000001).
func (v Value) String() string {
	switch v.Type {
	case I32:
		return fmt.Sprintf("I32(%d)", v.I32())
	case I64:
		return fmt.Sprintf("I64(%d)", v.I64())
	case F32:
		return "F32(" + formatFloat(float64(v.F32()), 32, v.Bits) + ")"
	case F64:
		return "F64(" + formatFloat(v.F64(), 64, v.Bits) + ")"
	}
	return fmt.Sprintf("%s(0x%x)", v.Type, v.Bits)
}

// formatFloat is the shortest text that parses back to the same value; NaNs
// carry their bits because their payload is otherwise lost.
func formatFloat(f float64, size int, bits uint64) string {
	switch {
	case math.IsNaN(f):
		return fmt.Sprintf("NaN:0x%0*x", size/4, bits)
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return strconv.FormatFloat(f, 'g', -1, size)
}

// ParseValue reads a value of type ty from text, as given on the CLI:
// decimal integers (i64 beyond 2^53 exactly; i32 also accepts 0..2^32-1 as
// unsigned), floats in Go syntax plus nan, inf, -inf, -0, and 0x-prefixed
// raw bits for floats ("0x7fc00001") so any NaN payload can be written.
func ParseValue(ty ValType, s string) (Value, error) {
	t := strings.TrimSpace(s)
	switch ty {
	case I32:
		if n, err := strconv.ParseInt(t, 10, 32); err == nil {
			return ValueI32(int32(n)), nil
		}
		if n, err := strconv.ParseUint(t, 10, 32); err == nil {
			return ValueI32(int32(uint32(n))), nil
		}
		return Value{}, fmt.Errorf("%q is not an i32", s)
	case I64:
		if n, err := strconv.ParseInt(t, 10, 64); err == nil {
			return ValueI64(n), nil
		}
		if n, err := strconv.ParseUint(t, 10, 64); err == nil {
			return ValueI64(int64(n)), nil
		}
		return Value{}, fmt.Errorf("%q is not an i64", s)
	case F32, F64:
		size := 64
		if ty == F32 {
			size = 32
		}
		if bits, ok := parseFloatBits(t, size); ok {
			return Value{ty, bits}, nil
		}
		bits, err := parseFloatText(t, size)
		if err != nil {
			return Value{}, fmt.Errorf("%q is not an %s", s, ty)
		}
		return Value{ty, bits}, nil
	}
	return Value{}, fmt.Errorf("unsupported value type %s", ty)
}

// parseFloatBits accepts "0x..." as the raw IEEE bits of a float of size bits.
func parseFloatBits(t string, size int) (uint64, bool) {
	if len(t) > 4 && strings.EqualFold(t[:4], "nan:") { // the form String prints
		t = t[4:]
	}
	if !strings.HasPrefix(t, "0x") && !strings.HasPrefix(t, "0X") {
		return 0, false
	}
	if strings.ContainsAny(t[2:], ".pP") { // a hex float literal, not bits
		return 0, false
	}
	bits, err := strconv.ParseUint(t[2:], 16, size)
	return bits, err == nil
}

// parseFloatText reads decimal text or a named value. "nan" is the
// canonical quiet NaN of the width (0x7fc00000, 0x7ff8000000000000), not
// Go's math.NaN(), whose payload is 1.
func parseFloatText(t string, size int) (uint64, error) {
	quiet, sign := uint64(0x7ff8000000000000), uint64(1)<<63
	inf := uint64(0x7ff0000000000000)
	if size == 32 {
		quiet, sign, inf = 0x7fc00000, 1<<31, 0x7f800000
	}
	switch strings.ToLower(t) {
	case "nan", "+nan":
		return quiet, nil
	case "-nan":
		return quiet | sign, nil
	case "inf", "+inf", "infinity", "+infinity":
		return inf, nil
	case "-inf", "-infinity":
		return inf | sign, nil
	}
	f, err := strconv.ParseFloat(t, size)
	if err != nil {
		return 0, err
	}
	if size == 32 {
		return uint64(math.Float32bits(float32(f))), nil
	}
	return math.Float64bits(f), nil
}

// ValueTypes returns the supported types, in wasm order.
func ValueTypes() []ValType { return []ValType{I32, I64, F32, F64} }
