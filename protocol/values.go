package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// EncodeValue is the wire form of a value: i32 as a number, i64 as a
// decimal string, floats as a number (or "NaN"/"Infinity"/"-Infinity")
// always with their exact bits.
func EncodeValue(v Value) WireValue {
	w := WireValue{Type: string(v.Type)}
	switch v.Type {
	case I32:
		w.Value = json.RawMessage(strconv.FormatInt(int64(v.I32()), 10))
	case I64:
		w.Value = json.RawMessage(strconv.Quote(strconv.FormatInt(v.I64(), 10)))
	case F32:
		w.Value = floatJSON(float64(v.F32()), 32)
		w.Bits = fmt.Sprintf("0x%08x", uint32(v.Bits))
	case F64:
		w.Value = floatJSON(v.F64(), 64)
		w.Bits = fmt.Sprintf("0x%016x", v.Bits)
	}
	return w
}

// floatJSON writes a float so every JSON reader sees a float: non-finite
// values become strings, and integral values keep a ".0" so that Python's
// json module does not turn 2.0 (or -0.0) into an int.
func floatJSON(f float64, size int) json.RawMessage {
	switch {
	case math.IsNaN(f):
		return json.RawMessage(`"NaN"`)
	case math.IsInf(f, 1):
		return json.RawMessage(`"Infinity"`)
	case math.IsInf(f, -1):
		return json.RawMessage(`"-Infinity"`)
	}
	s := strconv.FormatFloat(f, 'g', -1, size)
	if !strings.ContainsAny(s, ".eEn") {
		s += ".0"
	}
	return json.RawMessage(s)
}

// EncodeValues encodes a result list; never nil, so JSON shows [].
func EncodeValues(vs []Value) []WireValue {
	out := make([]WireValue, len(vs))
	for i, v := range vs {
		out[i] = EncodeValue(v)
	}
	return out
}

// DecodeArg reads one argument for a parameter of type ty. It accepts a
// JSON number, a decimal string, {"type","value"} or {"type","bits"}; see
// docs/protocol.md. Errors say what was expected and what came.
func DecodeArg(raw json.RawMessage, ty ValType) (Value, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return Value{}, fmt.Errorf("expected %s, got nothing", ty)
	}
	switch raw[0] {
	case '{':
		return decodeTyped(raw, ty)
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return Value{}, fmt.Errorf("expected %s: %v", ty, err)
		}
		return decodeString(s, ty)
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return decodeNumber(string(raw), ty)
	}
	return Value{}, fmt.Errorf("expected %s, got %s", ty, describeJSON(raw))
}

func decodeTyped(raw json.RawMessage, ty ValType) (Value, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return Value{}, fmt.Errorf("expected %s: %v", ty, err)
	}
	var typ string
	if err := json.Unmarshal(obj["type"], &typ); err != nil || typ == "" {
		return Value{}, errors.New(`a typed value needs "type": "i32" | "i64" | "f32" | "f64"`)
	}
	if typ != string(ty) {
		return Value{}, fmt.Errorf("type %s does not match the parameter type %s", Quote(typ), ty)
	}
	for k := range obj {
		if k != "type" && k != "value" && k != "bits" {
			return Value{}, fmt.Errorf("unknown field %s in a typed value", Quote(k))
		}
	}
	bitsRaw, hasBits := obj["bits"]
	valueRaw, hasValue := obj["value"]
	switch {
	case hasBits && hasValue:
		v, err := decodeBits(bitsRaw, ty)
		if err != nil {
			return v, err
		}
		return v, nil // bits win: value is informational (it cannot carry NaN payloads)
	case hasBits:
		return decodeBits(bitsRaw, ty)
	case hasValue:
		if len(bytes.TrimSpace(valueRaw)) > 0 && bytes.TrimSpace(valueRaw)[0] == '{' {
			return Value{}, fmt.Errorf("expected %s, got an object", ty)
		}
		return DecodeArg(valueRaw, ty)
	}
	return Value{}, errors.New(`a typed value needs "value" or "bits"`)
}

func decodeBits(raw json.RawMessage, ty ValType) (Value, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil || !strings.HasPrefix(s, "0x") {
		return Value{}, errors.New(`"bits" must be a string "0x" followed by hex digits`)
	}
	size := 64
	if ty == I32 || ty == F32 {
		size = 32
	}
	b, err := strconv.ParseUint(s[2:], 16, size)
	if err != nil {
		return Value{}, fmt.Errorf("bits %s do not fit %s", quoteBounded(s), ty)
	}
	return Value{Type: ty, Bits: b}, nil
}

func decodeString(s string, ty ValType) (Value, error) {
	switch ty {
	case F32, F64:
		switch s {
		case "NaN", "Infinity", "-Infinity", "-0":
		default:
			if _, err := strconv.ParseFloat(s, 64); err != nil {
				return Value{}, fmt.Errorf("expected %s, got the string %s", ty, quoteBounded(s))
			}
		}
		return ParseValue(ty, s)
	default:
		v, err := ParseValue(ty, s)
		if err != nil || strings.TrimSpace(s) != s || strings.HasPrefix(s, "0x") {
			if isDecimal(s) {
				// The right kind of string, the wrong size: say so, as
				// for a number past the range.
				return Value{}, fmt.Errorf("the string %s is out of range for %s", quoteBounded(s), ty)
			}
			return Value{}, fmt.Errorf("expected %s, got the string %s", ty, quoteBounded(s))
		}
		return v, nil
	}
}

// isDecimal reports whether s is a decimal integer that ParseValue reads
// when it fits: an optional sign and at least one digit, nothing else.
func isDecimal(s string) bool {
	if s != "" && (s[0] == '-' || s[0] == '+') {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// quoteBounded is Quote with the length of a string it cut, so that an
// argument of megabytes is not echoed back whole.
func quoteBounded(s string) string {
	if len(s) <= MaxQuotedBytes {
		return Quote(s)
	}
	return Quote(s) + fmt.Sprintf(" (%d bytes)", len(s))
}

var (
	minI32 = big.NewInt(math.MinInt32)
	maxU32 = big.NewInt(math.MaxUint32)
	minI64 = big.NewInt(math.MinInt64)
	maxU64 = new(big.Int).SetUint64(math.MaxUint64)
)

// decodeNumber reads a JSON number literal. Integers must be integral and
// in range (i32 accepts -2^31..2^32-1, i64 -2^63..2^64-1; the unsigned
// upper halves wrap); floats are correctly rounded to their width.
func decodeNumber(lit string, ty ValType) (Value, error) {
	if ty == I32 || ty == I64 {
		if n, ok := shortInteger(lit); ok { // what nearly every argument is
			return integerValue(n, ty, lit)
		}
	}
	return decodeAnyNumber(lit, ty)
}

// decodeAnyNumber is decodeNumber for every literal.
func decodeAnyNumber(lit string, ty ValType) (Value, error) {
	if !json.Valid([]byte(lit)) {
		return Value{}, fmt.Errorf("expected %s, got %s", ty, quoteBounded(lit))
	}
	switch ty {
	case F32:
		f, err := strconv.ParseFloat(lit, 32)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return Value{}, fmt.Errorf("expected f32, got %s", lit)
		}
		return ValueF32(float32(f)), nil
	case F64:
		f, err := strconv.ParseFloat(lit, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return Value{}, fmt.Errorf("expected f64, got %s", lit)
		}
		return ValueF64(f), nil
	}
	if len(lit) > 400 { // keep big.Float parsing bounded
		return Value{}, fmt.Errorf("expected %s, got a number of %d digits", ty, len(lit))
	}
	n, ok := ExactInteger(lit)
	if !ok {
		return Value{}, fmt.Errorf("expected %s (an integer), got %s", ty, lit)
	}
	lo, hi := minI64, maxU64
	if ty == I32 {
		lo, hi = minI32, maxU32
	}
	if n.Cmp(lo) < 0 || n.Cmp(hi) > 0 {
		return Value{}, fmt.Errorf("%s is out of range for %s", lit, ty)
	}
	if n.Sign() < 0 {
		if ty == I32 {
			return ValueI32(int32(n.Int64())), nil
		}
		return ValueI64(n.Int64()), nil
	}
	if ty == I32 {
		return ValueI32(int32(uint32(n.Uint64()))), nil
	}
	return ValueI64(int64(n.Uint64())), nil
}

// shortInteger reads a JSON integer literal of at most 18 digits, no
// fraction and no exponent ("-12", "0"; not "012", "1e3", "1.0"), which
// int64 holds whatever the digits: the common argument, read without
// big.Float. Anything else is left to the general path (false).
func shortInteger(lit string) (int64, bool) {
	digits := lit
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 18 || (digits[0] == '0' && len(digits) > 1) {
		return 0, false
	}
	var n int64
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if lit[0] == '-' {
		n = -n
	}
	return n, true
}

// integerValue is n as an i32 or i64 argument, if it is in the type's
// range (signed or unsigned); lit names it in the error.
func integerValue(n int64, ty ValType, lit string) (Value, error) {
	if ty == I32 {
		if n < math.MinInt32 || n > math.MaxUint32 {
			return Value{}, fmt.Errorf("%s is out of range for %s", lit, ty)
		}
		return ValueI32(int32(uint32(n))), nil // a negative n wraps to the same bits
	}
	return ValueI64(n), nil // 18 digits are within i64 either way
}

// ExactInteger reads a JSON number literal that denotes an integer exactly
// ("1e3" does, "1.5" and "1e-1000000000" do not). The caller bounds the
// literal's length; big.Float keeps the work bounded even for huge
// exponents, and a result that is not exact (an underflow to zero, say)
// is refused.
func ExactInteger(lit string) (*big.Int, bool) {
	f, _, err := big.ParseFloat(lit, 10, 256, big.ToNearestEven)
	if err != nil {
		return beyondExponents(lit)
	}
	if f.IsInf() {
		return nil, false
	}
	if f.Sign() == 0 { // 0 only if every mantissa digit is: "1e-1000000000" underflows to 0
		mantissa, _, _ := strings.Cut(strings.ToLower(lit), "e")
		return new(big.Int), strings.Trim(mantissa, "-+.0") == ""
	}
	if f.IsInt() && f.MantExp(nil) > 64 { // far out of every range: let the caller say so
		return beyondEveryRange(f.Sign()), true // never f.Int: 1e199999999 is an 83 MB integer
	}
	if f.Acc() != big.Exact || !f.IsInt() {
		return nil, false
	}
	n, _ := f.Int(nil)
	return n, true
}

// beyondExponents reads a number literal whose exponent big.ParseFloat
// cannot hold (past int64): 0 when every mantissa digit is 0
// ("0e99999999999999999999" was refused), a value beyond every integer
// range (with the literal's sign) when the exponent is positive, and no
// integer otherwise.
func beyondExponents(lit string) (*big.Int, bool) {
	mantissa, exp, ok := strings.Cut(strings.ToLower(lit), "e")
	digits := strings.TrimLeft(exp, "+-")
	if !ok || digits == "" || len(exp)-len(digits) > 1 || strings.Trim(digits, "0123456789") != "" ||
		strings.Trim(mantissa, "-+.0123456789") != "" {
		return nil, false
	}
	switch {
	case strings.Trim(mantissa, "-+.0") == "":
		return new(big.Int), true
	case strings.HasPrefix(exp, "-"):
		return nil, false
	}
	if strings.HasPrefix(mantissa, "-") {
		return beyondEveryRange(-1), true
	}
	return beyondEveryRange(1), true
}

// beyondEveryRange stands for an integer past every range a caller checks
// (±2^128, with sign's sign): what the caller reports is the literal, so
// the integer itself, however large, is never made.
func beyondEveryRange(sign int) *big.Int {
	n := new(big.Int).Lsh(big.NewInt(1), 128)
	if sign < 0 {
		n.Neg(n)
	}
	return n
}

func describeJSON(raw json.RawMessage) string {
	switch raw[0] {
	case 't', 'f':
		return string(raw)
	case 'n':
		return "null"
	case '[':
		return "an array"
	}
	if len(raw) > 40 {
		return fmt.Sprintf("%q…", raw[:40])
	}
	return fmt.Sprintf("%q", raw)
}
