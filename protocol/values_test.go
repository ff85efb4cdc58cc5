package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// goldenValues reads testdata/wire/values.json, the value encodings shared
// with the Python and Node clients.
func goldenValues(t *testing.T) []struct {
	Name string          `json:"name"`
	Wire json.RawMessage `json:"wire"`
	Bits string          `json:"bits"`
} {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "wire", "values.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []struct {
			Name string          `json:"name"`
			Wire json.RawMessage `json:"wire"`
			Bits string          `json:"bits"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) == 0 {
		t.Fatal("no cases in values.json")
	}
	return file.Cases
}

// canonicalJSON decodes JSON with numbers kept exact, for comparing two
// encodings of the same value: numbers compare by value (and sign, so that
// -0 and 0 differ), everything else structurally.
func canonicalJSON(t *testing.T, raw []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("invalid JSON %s: %v", raw, err)
	}
	return canonicalize(v)
}

func canonicalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = canonicalize(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = canonicalize(e)
		}
		return x
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return "badnumber:" + string(x)
		}
		// Integers beyond 2^53 are not used as JSON numbers by the protocol.
		return fmt.Sprintf("num:%016x", math.Float64bits(f))
	}
	return v
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	x, y := canonicalJSON(t, a), canonicalJSON(t, b)
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

func parseBits(t *testing.T, s string) uint64 {
	t.Helper()
	b, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		t.Fatalf("bad bits %q", s)
	}
	return b
}

func TestGoldenValues(t *testing.T) {
	for _, c := range goldenValues(t) {
		t.Run(c.Name, func(t *testing.T) {
			var typed struct {
				Type string `json:"type"`
			}
			if err := json.Unmarshal(c.Wire, &typed); err != nil {
				t.Fatal(err)
			}
			ty := ValType(typed.Type)
			want := Value{Type: ty, Bits: parseBits(t, c.Bits)}

			got, err := DecodeArg(c.Wire, ty)
			if err != nil {
				t.Fatalf("DecodeArg(%s, %s): %v", c.Wire, ty, err)
			}
			if got != want {
				t.Errorf("DecodeArg(%s, %s) = %#x (%v), want %#x", c.Wire, ty, got.Bits, got.Type, want.Bits)
			}

			enc, err := json.Marshal(EncodeValue(want))
			if err != nil {
				t.Fatal(err)
			}
			if !sameJSON(t, enc, c.Wire) {
				t.Errorf("EncodeValue(%#x) = %s, want %s", want.Bits, enc, c.Wire)
			}
			// And what we send decodes back to the same bits.
			back, err := DecodeArg(enc, ty)
			if err != nil || back != want {
				t.Errorf("DecodeArg(EncodeValue) = %#x, %v; want %#x", back.Bits, err, want.Bits)
			}
		})
	}
}

func TestDecodeArg(t *testing.T) {
	const (
		i32, i64, f32, f64 = I32, I64, F32, F64
	)
	cases := []struct {
		raw  string
		ty   ValType
		bits uint64
	}{
		// i32 numbers.
		{`0`, i32, 0},
		{`42`, i32, 42},
		{` 42 `, i32, 42},
		{`-1`, i32, 0xffffffff},
		{`-2147483648`, i32, 0x80000000},
		{`2147483647`, i32, 0x7fffffff},
		{`2147483648`, i32, 0x80000000},
		{`4294967295`, i32, 0xffffffff}, // unsigned wrap: -1
		{`1e3`, i32, 1000},
		{`1E3`, i32, 1000},
		{`1.0`, i32, 1},
		{`-0`, i32, 0},
		{`2.5e1`, i32, 25},
		// i32 strings.
		{`"42"`, i32, 42},
		{`"-1"`, i32, 0xffffffff},
		{`"4294967295"`, i32, 0xffffffff},
		// i64 numbers (exact to 2^53) and strings (full range).
		{`0`, i64, 0},
		{`-1`, i64, math.MaxUint64},
		{`9007199254740992`, i64, 1 << 53},
		{`"9007199254740993"`, i64, 1<<53 + 1},
		{`"-9223372036854775808"`, i64, 1 << 63},
		{`"9223372036854775807"`, i64, math.MaxInt64},
		{`"9223372036854775808"`, i64, 1 << 63},
		{`"18446744073709551615"`, i64, math.MaxUint64},
		{`"-1"`, i64, math.MaxUint64},
		{`18446744073709551615`, i64, math.MaxUint64},
		{`-9223372036854775808`, i64, 1 << 63},
		// f64.
		{`1.5`, f64, 0x3ff8000000000000},
		{`-0`, f64, 0x8000000000000000},
		{`-0.0`, f64, 0x8000000000000000},
		{`0`, f64, 0},
		{`2`, f64, 0x4000000000000000},
		{`5e-324`, f64, 1},
		{`"1.5"`, f64, 0x3ff8000000000000},
		{`"NaN"`, f64, 0x7ff8000000000000},
		{`"Infinity"`, f64, 0x7ff0000000000000},
		{`"-Infinity"`, f64, 0xfff0000000000000},
		{`"-0"`, f64, 0x8000000000000000},
		// f32.
		{`1.5`, f32, 0x3fc00000},
		{`-0`, f32, 0x80000000},
		{`"NaN"`, f32, 0x7fc00000},
		{`"Infinity"`, f32, 0x7f800000},
		{`"-Infinity"`, f32, 0xff800000},
		{`"-0"`, f32, 0x80000000},
		{`0.1`, f32, uint64(math.Float32bits(0.1))},
		{`16777217`, f32, uint64(math.Float32bits(16777216))}, // correctly rounded
		// {type, value}.
		{`{"type":"i32","value":7}`, i32, 7},
		{`{"type":"i32","value":"7"}`, i32, 7},
		{`{"type":"i64","value":"-2"}`, i64, math.MaxUint64 - 1},
		{`{"type":"f64","value":"NaN"}`, f64, 0x7ff8000000000000},
		{`{"type":"f32","value":-0.0}`, f32, 0x80000000},
		// {type, bits}: NaN payloads and integers.
		{`{"type":"f64","bits":"0x7ff8000000000123"}`, f64, 0x7ff8000000000123},
		{`{"type":"f64","bits":"0xFFF0000000000001"}`, f64, 0xfff0000000000001},
		{`{"type":"f32","bits":"0x7fc00001"}`, f32, 0x7fc00001},
		{`{"type":"f32","bits":"0xff800001"}`, f32, 0xff800001},
		{`{"type":"i32","bits":"0xffffffff"}`, i32, 0xffffffff},
		{`{"type":"i64","bits":"0x8000000000000000"}`, i64, 1 << 63},
		// bits win over value.
		{`{"type":"f64","value":"NaN","bits":"0x7ff8000000000abc"}`, f64, 0x7ff8000000000abc},
	}
	for _, c := range cases {
		got, err := DecodeArg(json.RawMessage(c.raw), c.ty)
		if err != nil {
			t.Errorf("DecodeArg(%s, %s): unexpected error %v", c.raw, c.ty, err)
			continue
		}
		want := Value{Type: c.ty, Bits: c.bits}
		if got != want {
			t.Errorf("DecodeArg(%s, %s) = %s %#x, want %#x", c.raw, c.ty, got.Type, got.Bits, c.bits)
		}
	}
}

func TestDecodeArgRefused(t *testing.T) {
	const (
		i32, i64, f32, f64 = I32, I64, F32, F64
	)
	cases := []struct {
		raw  string
		ty   ValType
		want string // substring of the error
	}{
		// out of range.
		{`4294967296`, i32, "out of range"},
		{`-2147483649`, i32, "out of range"},
		{`18446744073709551616`, i64, "out of range"},
		{`-9223372036854775809`, i64, "out of range"},
		{`1e400`, i32, "out of range"},
		// decimal strings past the range: a range problem too, not a type one.
		{`"4294967296"`, i32, `the string "4294967296" is out of range for i32`},
		{`"-2147483649"`, i32, `the string "-2147483649" is out of range for i32`},
		{`"18446744073709551616"`, i64, `the string "18446744073709551616" is out of range for i64`},
		{`"-9223372036854775809"`, i64, `the string "-9223372036854775809" is out of range for i64`},
		{`"+18446744073709551616"`, i64, "out of range for i64"},
		{`{"type":"i64","value":"18446744073709551616"}`, i64, "out of range for i64"},
		{`{"type":"i32","value":"4294967296"}`, i32, "out of range for i32"},
		{`"` + strings.Repeat("9", 100000) + `"`, i64, `"` + strings.Repeat("9", 64) + `"… (100000 bytes) is out of range for i64`},
		{`"` + strings.Repeat("a", 100000) + `"`, i32, `got the string "` + strings.Repeat("a", 64) + `"… (100000 bytes)`},
		{`"1e30"`, i64, "expected i64"},
		{`"-"`, i64, "expected i64"},
		{`"+"`, i32, "expected i32"},
		{`"99999999999999999999x"`, i64, "expected i64"},
		// fractions for ints.
		{`1.5`, i32, "expected i32"},
		{`0.1`, i64, "expected i64"},
		{`1e-1`, i32, "expected i32"},
		{`"1.5"`, i32, "expected i32"},
		{`"1.5"`, i64, "expected i64"},
		// strings that are not decimal integers.
		{`"0x10"`, i32, "expected i32"},
		{`"0x10"`, i64, "expected i64"},
		{`" 1"`, i64, "expected i64"},
		{`""`, i64, "expected i64"},
		{`"abc"`, i32, "expected i32"},
		{`"NaN"`, i64, "expected i64"},
		// strings that are not floats.
		{`"abc"`, f64, "expected f64"},
		{`""`, f32, "expected f32"},
		// invalid JSON numbers.
		{`01`, i32, "expected i32"},
		{`-`, i32, "expected i32"},
		{`1.`, f64, "expected f64"},
		{`--1`, f64, "expected f64"},
		// bools, null, arrays, nothing: the message names what came.
		{`true`, i32, "got true"},
		{`false`, f64, "got false"},
		{`null`, i64, "got null"},
		{`[1]`, i32, "got an array"},
		{`[]`, f32, "got an array"},
		{``, i32, "got nothing"},
		{`   `, i32, "got nothing"},
		// typed values.
		{`{"type":"i64","value":1}`, i32, `"i64" does not match the parameter type i32`},
		{`{"type":"f32","value":1}`, f64, `does not match`},
		{`{"type":"f64","bits":"0x0"}`, f32, `does not match`},
		{`{"value":1}`, i32, `needs "type"`},
		{`{"type":1,"value":1}`, i32, `needs "type"`},
		{`{"type":"","value":1}`, i32, `needs "type"`},
		{`{"type":"i32"}`, i32, `needs "value" or "bits"`},
		{`{"type":"i32","value":1,"extra":2}`, i32, `unknown field "extra"`},
		{`{"type":"i32","value":{"type":"i32","value":1}}`, i32, "got an object"},
		{`{"type":"i32","value":true}`, i32, "got true"},
		{`{"type":"i32","value":null}`, i32, "got null"},
		{`{"type":"f32","bits":"0x100000000"}`, f32, "do not fit f32"},
		{`{"type":"i32","bits":"0x100000000"}`, i32, "do not fit i32"},
		{`{"type":"f64","bits":"0x10000000000000000"}`, f64, "do not fit f64"},
		{`{"type":"f64","bits":"7ff8000000000000"}`, f64, `"bits" must be a string "0x"`},
		{`{"type":"f64","bits":"0x"}`, f64, "do not fit"},
		{`{"type":"f64","bits":"0xzz"}`, f64, "do not fit"},
		{`{"type":"f64","bits":1}`, f64, `"bits" must be a string`},
		{`{"type":"f64","bits":"0x-1"}`, f64, "do not fit"},
		{`{"type":"i32",`, i32, "expected i32"},
	}
	for _, c := range cases {
		got, err := DecodeArg(json.RawMessage(c.raw), c.ty)
		if err == nil {
			t.Errorf("DecodeArg(%s, %s) = %#x, want an error containing %q", c.raw, c.ty, got.Bits, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("DecodeArg(%s, %s): error %q does not contain %q", c.raw, c.ty, err, c.want)
		}
	}
}

// TestDecodeArgTinyExponent: a JSON number whose exponent is so negative
// that big.Float underflows to zero is not an integer and must not become 0.
func TestDecodeArgTinyExponent(t *testing.T) {
	for _, raw := range []string{`1e-400`, `1e-1000000000`, `5e-3000000000`} {
		for _, ty := range []ValType{I32, I64} {
			if v, err := DecodeArg(json.RawMessage(raw), ty); err == nil {
				t.Errorf("DecodeArg(%s, %s) = %#x, want an error (not an integer)", raw, ty, v.Bits)
			}
		}
	}
}

// TestDecodeArgHugeExponent: enormous exponents are refused quickly.
func TestDecodeArgHugeExponent(t *testing.T) {
	for _, raw := range []string{`1e1000000000`, `1e999999999999999999`, `-1e1000000000`} {
		for _, ty := range ValueTypes() {
			v, err := DecodeArg(json.RawMessage(raw), ty)
			switch ty {
			case I32, I64:
				if err == nil {
					t.Errorf("DecodeArg(%s, %s) = %#x, want an error", raw, ty, v.Bits)
				}
			default: // overflow rounds to an infinity
				if err != nil || !math.IsInf(v.Float(), 0) {
					t.Errorf("DecodeArg(%s, %s) = %v, %v; want an infinity", raw, ty, v, err)
				}
			}
		}
	}
}

// TestExactIntegerNeverMakesAHugeInteger: an exponent big.Float can hold
// but no range can (1e199999999, 11 bytes of JSON) was an 83 MB big.Int
// and 85 ms per number (FuzzDecodeRun found it); it is now out of every
// range without being made.
func TestExactIntegerNeverMakesAHugeInteger(t *testing.T) {
	for _, lit := range []string{`1e199999999`, `-9.5e600000000`, `123e9999999`} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		n, ok := ExactInteger(lit)
		runtime.ReadMemStats(&after)
		if !ok || n.BitLen() > 129 || n.Sign() != map[bool]int{true: -1, false: 1}[strings.HasPrefix(lit, "-")] {
			t.Errorf("ExactInteger(%s) = %d bits, sign %d, %v; want a sentinel past every range with the literal's sign", lit, n.BitLen(), n.Sign(), ok)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
			t.Errorf("ExactInteger(%s) allocated %d bytes", lit, grew)
		}
		if _, err := DecodeArg(json.RawMessage(lit), I64); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("DecodeArg(%s, i64) = %v; want out of range", lit, err)
		}
	}
}

// TestDecodeArgZeroPastEveryExponent: 0 with an exponent past int64 (which
// big.ParseFloat cannot read) is 0; a non-zero mantissa is no integer
// (negative exponent) or out of range (positive).
func TestDecodeArgZeroPastEveryExponent(t *testing.T) {
	for _, raw := range []string{`0e99999999999999999999`, `-0.0e-99999999999999999999`, `0E+99999999999999999999`} {
		for _, ty := range []ValType{I32, I64} {
			if v, err := DecodeArg(json.RawMessage(raw), ty); err != nil || v.Bits != 0 {
				t.Errorf("DecodeArg(%s, %s) = %#x, %v; want 0", raw, ty, v.Bits, err)
			}
		}
	}
	for raw, want := range map[string]string{`1e-99999999999999999999`: "an integer", `1e99999999999999999999`: "out of range", `-2e99999999999999999999`: "out of range"} {
		if _, err := DecodeArg(json.RawMessage(raw), I64); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeArg(%s, i64) = %v; want an error saying %q", raw, err, want)
		}
	}
}

func TestEncodeValue(t *testing.T) {
	cases := []struct {
		v         Value
		value     string // exact JSON of "value"
		bits      string
		pyIsFloat bool // Python's json.loads(value) must give a float
	}{
		{ValueI32(42), `42`, "", false},
		{ValueI32(-1), `-1`, "", false},
		{ValueI32(math.MinInt32), `-2147483648`, "", false},
		{ValueI64(0), `"0"`, "", false},
		{ValueI64(1), `"1"`, "", false},
		{ValueI64(-1), `"-1"`, "", false},
		{ValueI64(math.MaxInt64), `"9223372036854775807"`, "", false},
		{ValueI64(math.MinInt64), `"-9223372036854775808"`, "", false},
		{ValueF64(2), `2.0`, "0x4000000000000000", true},
		{ValueF64(0), `0.0`, "0x0000000000000000", true},
		{ValueF64(math.Copysign(0, -1)), ``, "0x8000000000000000", true},
		{ValueF64(1.5), `1.5`, "0x3ff8000000000000", true},
		{ValueF64(1e21), ``, "0x444b1ae4d6e2ef50", true},
		{ValueF64(1e300), ``, "", true},
		{ValueF64(123456789), ``, "", true},
		{ValueF64(-7), ``, "", true},
		{ValueF64(math.MaxFloat64), ``, "0x7fefffffffffffff", true},
		{ValueF64(5e-324), ``, "0x0000000000000001", true},
		{ValueF64(math.Inf(1)), `"Infinity"`, "0x7ff0000000000000", false},
		{ValueF64(math.Inf(-1)), `"-Infinity"`, "0xfff0000000000000", false},
		{Value{Type: F64, Bits: 0x7ff8000000000123}, `"NaN"`, "0x7ff8000000000123", false},
		{Value{Type: F64, Bits: 0xfff8000000000000}, `"NaN"`, "0xfff8000000000000", false},
		{ValueF32(2), `2.0`, "0x40000000", true},
		{ValueF32(0.1), `0.1`, "0x3dcccccd", true},
		{ValueF32(float32(math.Copysign(0, -1))), ``, "0x80000000", true},
		{ValueF32(16777216), ``, "0x4b800000", true},
		{ValueF32(math.MaxFloat32), ``, "0x7f7fffff", true},
		{ValueF32(float32(math.Inf(1))), `"Infinity"`, "0x7f800000", false},
		{Value{Type: F32, Bits: 0x7fc00001}, `"NaN"`, "0x7fc00001", false},
		{Value{Type: F32, Bits: 1}, ``, "0x00000001", true},
	}
	for _, c := range cases {
		w := EncodeValue(c.v)
		name := fmt.Sprintf("%s %#x", c.v.Type, c.v.Bits)
		if w.Type != string(c.v.Type) {
			t.Errorf("%s: type %q", name, w.Type)
		}
		if c.value != "" && string(w.Value) != c.value {
			t.Errorf("%s: value %s, want %s", name, w.Value, c.value)
		}
		isFloat := c.v.Type == F32 || c.v.Type == F64
		if isFloat {
			width := 16
			if c.v.Type == F32 {
				width = 8
			}
			if len(w.Bits) != 2+width || !strings.HasPrefix(w.Bits, "0x") || strings.ToLower(w.Bits) != w.Bits {
				t.Errorf("%s: bits %q, want 0x + %d lowercase hex digits", name, w.Bits, width)
			}
			if c.bits != "" && w.Bits != c.bits {
				t.Errorf("%s: bits %q, want %q", name, w.Bits, c.bits)
			}
			if parseBits(t, w.Bits) != c.v.Bits {
				t.Errorf("%s: bits %q do not match the value", name, w.Bits)
			}
		} else if w.Bits != "" {
			t.Errorf("%s: integers carry no bits, got %q", name, w.Bits)
		}
		if c.v.Type == I64 && (len(w.Value) == 0 || w.Value[0] != '"') {
			t.Errorf("%s: i64 value %s must be a string", name, w.Value)
		}
		if c.pyIsFloat && !pythonReadsFloat(string(w.Value)) {
			t.Errorf("%s: value %s would be read as an int by Python's json.loads", name, w.Value)
		}
		if isFloat && !c.pyIsFloat && w.Value[0] != '"' {
			t.Errorf("%s: non-finite value %s must be a string", name, w.Value)
		}
		if !json.Valid(w.Value) {
			t.Errorf("%s: value %s is not valid JSON", name, w.Value)
		}
		// The whole wire value marshals and decodes back to the same bits.
		b, err := json.Marshal(w)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		back, err := DecodeArg(b, c.v.Type)
		if err != nil || back != c.v {
			t.Errorf("%s: DecodeArg(%s) = %#x, %v", name, b, back.Bits, err)
		}
		// Without the bits, finite values still decode exactly (value is exact).
		if w.Value[0] != '"' || c.v.Type == I64 {
			back, err := DecodeArg(w.Value, c.v.Type)
			if err != nil || back != c.v {
				t.Errorf("%s: DecodeArg(value %s) = %#x, %v", name, w.Value, back.Bits, err)
			}
		}
	}
}

// pythonReadsFloat: Python's json module makes a float of a number that has
// a fraction or an exponent, and an int otherwise.
func pythonReadsFloat(lit string) bool {
	return json.Valid([]byte(lit)) && lit[0] != '"' && strings.ContainsAny(lit, ".eE")
}

func TestEncodeValuesNeverNil(t *testing.T) {
	b, _ := json.Marshal(EncodeValues(nil))
	if string(b) != "[]" {
		t.Errorf("EncodeValues(nil) = %s, want []", b)
	}
}

// TestEncodeDecodeRoundTripSweep: every value of a sweep of bit patterns
// survives EncodeValue + DecodeArg, with and without the bits (where the
// value alone is exact).
func TestEncodeDecodeRoundTripSweep(t *testing.T) {
	patterns := []uint64{0, 1, 2, 0x7f, 0x80, 0xff, 0x7fffffff, 0x80000000, 0xffffffff,
		0x00800000, 0x007fffff, 0x7f7fffff, 0x7f800001, 0x7fbfffff, 0xffc00000,
		0x0010000000000000, 0x000fffffffffffff, 0x7fefffffffffffff, 0x7ff0000000000001,
		0xfff8000000000001, 0x8000000000000001, 0x3fb999999999999a, 0xc3e0000000000000,
		0x43e0000000000000, 0x4340000000000001, math.MaxUint64}
	for i := uint64(0); i < 64; i++ {
		patterns = append(patterns, 1<<i, (1<<i)-1, ^(uint64(1) << i))
	}
	for _, p := range patterns {
		for _, ty := range ValueTypes() {
			v := Value{Type: ty, Bits: p}
			if ty == I32 || ty == F32 {
				v.Bits &= 0xffffffff
			}
			b, err := json.Marshal(EncodeValue(v))
			if err != nil {
				t.Fatal(err)
			}
			back, err := DecodeArg(b, ty)
			if err != nil || back != v {
				t.Errorf("%s %#x: %s decodes to %#x, %v", ty, v.Bits, b, back.Bits, err)
			}
		}
	}
}

// TestShortIntegerAgreesWithTheGeneralPath: the fast path for short
// integer literals gives what the big.Float path gives (value or error,
// for i32 and i64), and leaves alone what it cannot read.
func TestShortIntegerAgreesWithTheGeneralPath(t *testing.T) {
	lits := []string{"0", "-0", "1", "-1", "2", "42", "-42", "00", "01", "-01", "-", "", "1e3", "1.0", "1.5", "+1", " 1",
		"2147483647", "2147483648", "-2147483648", "-2147483649", "4294967295", "4294967296", "-4294967296",
		"999999999999999999", "-999999999999999999", "1000000000000000000", "9223372036854775807", "-9223372036854775808",
		"18446744073709551615", "18446744073709551616", "12a", "1-2", "--1"}
	for i := int64(1); i < 1e18; i = i*7 + 3 {
		lits = append(lits, strconv.FormatInt(i, 10), strconv.FormatInt(-i, 10))
	}
	for _, lit := range lits {
		for _, ty := range []ValType{I32, I64} {
			got, gotErr := decodeNumber(lit, ty)
			want, wantErr := decodeAnyNumber(lit, ty)
			if (gotErr == nil) != (wantErr == nil) || got != want {
				t.Errorf("%s %q: fast %v, %v; general %v, %v", ty, lit, got, gotErr, want, wantErr)
			}
		}
	}
}

// TestDecodeArgQuotesBriefly: an argument's error quotes what the parent
// sent cut (Quote), whatever its length: a typed value's type, an unknown
// member's name, its bits, each half a megabyte, give an error under
// 1 KiB.
func TestDecodeArgQuotesBriefly(t *testing.T) {
	text, _ := json.Marshal(strings.Repeat("é\x1b\u202e<x", 1<<16))
	big, digits := string(text), strings.Repeat("9", 1<<19)
	for _, arg := range []string{
		`{"type":` + big + `,"value":1}`,
		`{"type":"i32",` + big + `:1}`,
		`{"type":"i32","bits":"0x` + digits + `"}`,
		`{"type":"i32","bits":` + big + `}`,
		`{"type":"i32","value":` + big + `}`,
		big,
		`"` + digits + `"`,
		digits,
		`-` + digits + `.5`,
	} {
		_, err := DecodeArg(json.RawMessage(arg), I32)
		if err == nil || len(err.Error()) > 1024 {
			t.Errorf("%.60s…: an error of %d bytes: %.200s", arg, len(fmt.Sprint(err)), err)
		}
	}
}
