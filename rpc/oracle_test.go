package rpc

// The oracle of the params decoder's differential fuzz targets
// (FuzzDecodeRunDifferential): docs/protocol.md applied to what
// encoding/json reads, sharing no code with the decoder (params*.go), so
// that it also catches a mistake the decoder's helpers would share. The
// documented protocol is what encoding/json reads (exact member names,
// the last of a repeated member counts, escapes and invalid UTF-8 as
// encoding/json decodes them): its Decoder reads the params into plain
// values (every member kept, in order; numbers as their literal text),
// and the rules are applied to those values. On every valid JSON input
// the decoder and the oracle both accept with the same spec, or both
// refuse, the decoder naming a field the oracle finds at fault (with
// several faults, any of them). It was written when the params came to be
// read by walking the text screening checked instead of by encoding/json
// (red team, issue 14).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// plainObject is a JSON object as written: every member in order, a
// member given twice twice.
type plainObject []plainMember

type plainMember struct {
	name  string
	value any
}

// readPlain reads one JSON value with encoding/json's Decoder: objects as
// plainObject, arrays as []any, numbers as json.Number, strings, booleans
// and nil.
func readPlain(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return readPlainValue(dec)
}

func readPlainValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	if d == '{' {
		obj := plainObject{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := readPlainValue(dec)
			if err != nil {
				return nil, err
			}
			obj = append(obj, plainMember{k.(string), v})
		}
		_, err := dec.Token()
		return obj, err
	}
	arr := []any{}
	for dec.More() {
		v, err := readPlainValue(dec)
		if err != nil {
			return nil, err
		}
		arr = append(arr, v)
	}
	_, err = dec.Token()
	return arr, err
}

// get is the member's value: of a member given twice, the last counts.
func (o plainObject) get(name string) (any, bool) {
	for i := len(o) - 1; i >= 0; i-- {
		if o[i].name == name {
			return o[i].value, true
		}
	}
	return nil, false
}

// names are the member names, each once, in order of first appearance.
func (o plainObject) names() []string {
	var out []string
	for _, m := range o {
		if !slices.Contains(out, m.name) {
			out = append(out, m.name)
		}
	}
	return out
}

// canonical renders a plain value, for comparing args by what they say.
func canonical(v any) string {
	switch v := v.(type) {
	case plainObject:
		parts := make([]string, len(v))
		for i, m := range v {
			parts[i] = canonical(m.name) + ":" + canonical(m.value)
		}
		return "{" + strings.Join(parts, ",") + "}"
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = canonical(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case json.Number:
		return string(v)
	case nil:
		return "null"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// oracle applies docs/protocol.md to plain values, noting every field at
// fault.
type oracle struct{ faults []string }

func (o *oracle) fault(field string) { o.faults = append(o.faults, field) }

// member is the field path of a member: the params' own members by name
// alone, a member named "" by its parent (as the messages say `unknown
// field ""`). The name is the parent's, so it is shown as messages show
// it.
func member(parent, name string) string {
	switch {
	case name == "":
		return parent
	case parent == "params":
		return shown(name)
	}
	return parent + "." + shown(name)
}

// shown is a name of the parent's as a message shows it in a field path
// (docs/protocol.md, *What messages quote*): at most its first 64 bytes,
// cut on a UTF-8 boundary and followed by "…" where cut, with control and
// format characters and invalid UTF-8 escaped in Go's syntax, no quotes.
func shown(name string) string {
	cut := name
	if len(cut) > 64 {
		n := 64
		for n > 0 && !utf8.RuneStart(cut[n]) {
			n--
		}
		cut = cut[:n]
	}
	q := strconv.Quote(cut)
	q = q[1 : len(q)-1]
	if len(cut) < len(name) {
		q += "…"
	}
	return q
}

// object is v as an object whose members are all in allowed (unknown
// members are refused: a typo is an error, not a silent default), those
// given null left out.
func (o *oracle) object(v any, field string, allowed ...string) (plainObject, bool) {
	obj, ok := v.(plainObject)
	if !ok {
		o.fault(field)
		return nil, false
	}
	for _, n := range obj.names() {
		if !slices.Contains(allowed, n) {
			o.fault(member(field, n))
		}
	}
	// A member the protocol names whose (last) value is null is absent
	// (docs/protocol.md, Messages).
	var present plainObject
	for _, m := range obj {
		if last, _ := obj.get(m.name); last != nil || !slices.Contains(allowed, m.name) {
			present = append(present, m)
		}
	}
	return present, true
}

func (o *oracle) str(v any, field string) string {
	s, ok := v.(string)
	if !ok {
		o.fault(field)
	}
	return s
}

// boolean: true or false (null reads as false, as encoding/json reads it).
func (o *oracle) boolean(v any, field string) bool {
	b, ok := v.(bool)
	if !ok && v != nil {
		o.fault(field)
	}
	return b
}

// integer reads an integer in 0..2^64-1: a JSON number that denotes one
// exactly, in any spelling (1e3, 1.0), of at most 400 characters (docs:
// Values); with decimal, also a string of decimal digits with an optional
// sign.
func (o *oracle) integer(v any, field string, decimal bool) uint64 {
	var lit string
	switch v := v.(type) {
	case json.Number:
		lit = string(v)
	case string:
		if !decimal {
			o.fault(field)
			return 0
		}
		digits := strings.TrimLeft(v, "+-")
		if len(v)-len(digits) > 1 || digits == "" || strings.Trim(digits, "0123456789") != "" {
			o.fault(field)
			return 0
		}
		lit = v
	default:
		o.fault(field)
		return 0
	}
	n, ok := exactDecimal(lit)
	if !ok || len(lit) > 400 || n.Sign() < 0 || !n.IsUint64() {
		o.fault(field)
		return 0
	}
	return n.Uint64()
}

// exactDecimal is the integer a decimal literal (sign, digits, fraction,
// exponent) denotes, if it denotes one; a value beyond 2^70 is given as
// 2^70, with its sign.
func exactDecimal(lit string) (*big.Int, bool) {
	neg := strings.HasPrefix(lit, "-")
	lit = strings.TrimLeft(lit, "+-")
	mant, exp, hasExp := strings.Cut(strings.ToLower(lit), "e")
	whole, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	shift := -len(frac)
	if hasExp {
		e, err := strconv.ParseInt(exp, 10, 64)
		if err != nil { // an exponent past int64: far from every integer but 0
			if digits == "" {
				return new(big.Int), true
			}
			if strings.HasPrefix(exp, "-") {
				return nil, false
			}
			e = math.MaxInt32
		}
		shift += int(max(min(e, math.MaxInt32), math.MinInt32))
	}
	if digits == "" {
		return new(big.Int), true
	}
	if shift < 0 { // the last -shift digits must be zeros
		if -shift >= len(digits) || strings.Trim(digits[len(digits)+shift:], "0") != "" {
			return nil, false
		}
		digits, shift = digits[:len(digits)+shift], 0
	}
	n, _ := new(big.Int).SetString(digits, 10)
	if len(digits)+shift > 22 {
		n = new(big.Int).Lsh(big.NewInt(1), 70)
	} else {
		n.Mul(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(shift)), nil))
	}
	if neg {
		n.Neg(n)
	}
	return n, true
}

// specSummary renders what a decoded run means, its args as given.
func specSummary(s *runSpec, args []string) string {
	caps := s.caps
	caps.WASI = nil // printed by value below
	src := s.source
	src.Encoded = nil // the wire literal the decoded text or bytes came from
	return fmt.Sprintf("src=%+v function=%q default=%v args=%q limits=%+v caps=%+v wasi=%+v input=%q (nil %v) config=%v host=%q from %q",
		src, s.function, s.defaultFunction, args, s.limits, caps, s.caps.WASI, s.input, s.input == nil, s.config, s.hostFunctions, s.hostCall)
}

// decodedArgs renders the decoder's args as the oracle does.
func decodedArgs(t *testing.T, s *runSpec) []string {
	var out []string
	for i, a := range s.args {
		v, err := readPlain(a)
		if err != nil {
			t.Fatalf("arg %d is not a JSON value: %q", i, a)
		}
		out = append(out, canonical(v))
	}
	return out
}
