package script

import (
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of arrays and objects in an input and in a
// value: deeper is an error, not a deeper Go stack.
const MaxDepth = 1000

// Encoder writes one JSON value. The runtimes walk their values and call
// it; it keeps the rules every language shares: non-finite numbers are
// null, -0 is 0, strings are valid UTF-8 (invalid bytes become U+FFFD),
// and nesting past MaxDepth is an error.
type Encoder struct {
	buf      []byte
	nonEmpty []bool // per open container: an element was written
	afterKey bool   // the next value is a member's, after its key
}

var (
	errTooDeep = Errorf("the value cannot be converted to JSON: it is nested deeper than " + strconv.Itoa(MaxDepth) + " levels")
	errCycle   = Errorf("the value cannot be converted to JSON: it contains a cycle")
)

// NestingError is the error of a value that went past MaxDepth, given the
// containers on the path to where it stopped: a cycle if one of them is
// there twice, else the depth. (A cycle always ends at the depth bound,
// so the writers need no check at each level, which would cost the
// square of the depth.)
func NestingError[T comparable](path []T) *Error {
	seen := make(map[T]bool, len(path))
	for _, c := range path {
		if seen[c] {
			return errCycle
		}
		seen[c] = true
	}
	return errTooDeep
}

// shallow is how deep Cycle looks.
const shallow = 64

// Cycle is the cycle error if c, about to be written, is on the path of
// containers already being written, looked for only while the path is
// short: most cycles are (an object holding itself), and a deeper one
// still ends at MaxDepth, where NestingError names it.
func Cycle[T comparable](path []T, c T) *Error {
	if len(path) < shallow && slices.Contains(path, c) {
		return errCycle
	}
	return nil
}

// Bytes returns what was written.
func (e *Encoder) Bytes() []byte { return e.buf }

// Reset empties the encoder for another value, keeping its buffer.
func (e *Encoder) Reset() {
	e.buf, e.nonEmpty, e.afterKey = e.buf[:0], e.nonEmpty[:0], false
}

// comma separates a value from the one before it in its container.
func (e *Encoder) comma() {
	if e.afterKey {
		e.afterKey = false
		return
	}
	if n := len(e.nonEmpty); n > 0 {
		if e.nonEmpty[n-1] {
			e.buf = append(e.buf, ',')
		}
		e.nonEmpty[n-1] = true
	}
}

func (e *Encoder) open(c byte) *Error {
	if len(e.nonEmpty) >= MaxDepth {
		return errTooDeep
	}
	e.comma()
	e.buf = append(e.buf, c)
	e.nonEmpty = append(e.nonEmpty, false)
	return nil
}

func (e *Encoder) close(c byte) {
	e.nonEmpty = e.nonEmpty[:len(e.nonEmpty)-1]
	e.buf = append(e.buf, c)
}

// BeginArray opens an array; EndArray closes it.
func (e *Encoder) BeginArray() *Error { return e.open('[') }
func (e *Encoder) EndArray()          { e.close(']') }

// BeginObject opens an object; each member is Key then its value.
func (e *Encoder) BeginObject() *Error { return e.open('{') }
func (e *Encoder) EndObject()          { e.close('}') }

// Key writes a member's name; its value comes next.
func (e *Encoder) Key(k string) {
	e.comma()
	e.buf = appendString(e.buf, k)
	e.buf = append(e.buf, ':')
	e.afterKey = true
}

// Null, Bool, Number and String write one scalar.
func (e *Encoder) Null() {
	e.comma()
	e.buf = append(e.buf, "null"...)
}

func (e *Encoder) Bool(b bool) {
	e.comma()
	e.buf = strconv.AppendBool(e.buf, b)
}

// Number writes f as JavaScript would: integers up to 1e21 without an
// exponent, the shortest form that reads back as f otherwise; NaN and the
// infinities are null, -0 is 0.
func (e *Encoder) Number(f float64) {
	e.comma()
	e.buf = AppendNumber(e.buf, f)
}

// Integer writes an integer given as its decimal digits (with an optional
// leading minus), for languages whose integers are unbounded.
func (e *Encoder) Integer(digits string) {
	e.comma()
	e.buf = append(e.buf, digits...)
}

func (e *Encoder) String(s string) {
	e.comma()
	e.buf = appendString(e.buf, s)
}

// AppendNumber appends f in the form Encoder.Number writes.
func AppendNumber(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	if f == 0 {
		return append(b, '0')
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 { // the usual value: an integer, written as 'f' would, faster
		return strconv.AppendInt(b, int64(f), 10)
	}
	format := byte('f')
	if abs := math.Abs(f); abs < 1e-6 || abs >= 1e21 {
		format = 'e'
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' { // e-07 → e-7, as JavaScript writes it
		n := len(b) - start
		if n >= 4 && b[len(b)-4] == 'e' && b[len(b)-3] == '-' && b[len(b)-2] == '0' {
			b[len(b)-2] = b[len(b)-1]
			b = b[:len(b)-1]
		}
	}
	return b
}

const hex = "0123456789abcdef"

// appendString appends s as a JSON string: quotes, backslashes and
// control characters escaped, invalid UTF-8 as U+FFFD, nothing else.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, "\uFFFD"...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
