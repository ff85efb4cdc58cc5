package script

import (
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// reader reads JSON (RFC 8259) from a byte slice, strictly, accepting
// what encoding/json accepts: every evaluation's request goes through it,
// and encoding/json's reflection and token API cost a guest more than a
// small snippet's whole evaluation (a Lua `1+1` spent a tenth of its
// instructions decoding its request).
type reader struct {
	b []byte
	i int
}

// errEOF is a text that ends inside a value.
var errEOF = errors.New("unexpected EOF")

func (r *reader) space() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// end is what peek returns at the end of the text.
const end = -1

// peek is the next byte after white space, or end.
func (r *reader) peek() int {
	r.space()
	if r.i < len(r.b) {
		return int(r.b[r.i])
	}
	return end
}

// expect consumes c, after white space.
func (r *reader) expect(c byte, what string) error {
	switch r.peek() {
	case int(c):
		r.i++
		return nil
	case end:
		return errEOF
	}
	return r.invalid(what)
}

func (r *reader) invalid(what string) error {
	return fmt.Errorf("invalid character %q at offset %d %s", r.b[r.i], r.i, what)
}

// value reads one value at nesting depth (0 for the top level).
func (r *reader) value(depth int) (*Value, error) {
	switch c := r.peek(); c {
	case end:
		return nil, errEOF
	case '{', '[':
		if depth >= MaxDepth {
			return nil, fmt.Errorf("nested deeper than %d levels", MaxDepth)
		}
		r.i++
		if c == '{' {
			return r.object(depth)
		}
		return r.array(depth)
	case '"':
		s, err := r.string()
		return &Value{Kind: String, String: s}, err
	case 't':
		return &Value{Kind: Bool, Bool: true}, r.literal("true")
	case 'f':
		return &Value{Kind: Bool}, r.literal("false")
	case 'n':
		return &Value{Kind: Null}, r.literal("null")
	default:
		if c == '-' || '0' <= c && c <= '9' {
			n, err := r.number()
			return &Value{Kind: Number, Number: n}, err
		}
		return nil, r.invalid("looking for the beginning of a value")
	}
}

func (r *reader) object(depth int) (*Value, error) {
	v := &Value{Kind: Object}
	if r.peek() == '}' {
		r.i++
		return v, nil
	}
	for {
		if c := r.peek(); c != '"' {
			if c == end {
				return nil, errEOF
			}
			return nil, r.invalid("looking for the beginning of an object key")
		}
		k, err := r.string()
		if err != nil {
			return nil, err
		}
		if err := r.expect(':', "after an object key"); err != nil {
			return nil, err
		}
		item, err := r.value(depth + 1)
		if err != nil {
			return nil, err
		}
		v.Keys, v.Items = append(v.Keys, k), append(v.Items, item)
		if done, err := r.next('}', "after an object member"); done || err != nil {
			return v, err
		}
	}
}

func (r *reader) array(depth int) (*Value, error) {
	v := &Value{Kind: Array}
	if r.peek() == ']' {
		r.i++
		return v, nil
	}
	for {
		item, err := r.value(depth + 1)
		if err != nil {
			return nil, err
		}
		v.Items = append(v.Items, item)
		if done, err := r.next(']', "after an array element"); done || err != nil {
			return v, err
		}
	}
}

// next consumes the comma before another element (false) or the closing
// delimiter (true).
func (r *reader) next(closing byte, what string) (bool, error) {
	switch r.peek() {
	case ',':
		r.i++
		return false, nil
	case int(closing):
		r.i++
		return true, nil
	case end:
		return false, errEOF
	}
	return false, r.invalid(what)
}

func (r *reader) literal(word string) error {
	for k := 0; k < len(word); k++ {
		if r.i >= len(r.b) {
			return errEOF
		}
		if r.b[r.i] != word[k] {
			return r.invalid("in literal " + word)
		}
		r.i++
	}
	return nil
}

// number reads a number and returns its text as written.
func (r *reader) number() (string, error) {
	start := r.i
	if r.b[r.i] == '-' {
		r.i++
	}
	switch {
	case r.i >= len(r.b):
		return "", errEOF
	case r.b[r.i] == '0':
		r.i++
	case '1' <= r.b[r.i] && r.b[r.i] <= '9':
		r.digits()
	default:
		return "", r.invalid("in numeric literal")
	}
	if r.i < len(r.b) && r.b[r.i] == '.' {
		r.i++
		if err := r.someDigits(); err != nil {
			return "", err
		}
	}
	if r.i < len(r.b) && (r.b[r.i] == 'e' || r.b[r.i] == 'E') {
		r.i++
		if r.i < len(r.b) && (r.b[r.i] == '+' || r.b[r.i] == '-') {
			r.i++
		}
		if err := r.someDigits(); err != nil {
			return "", err
		}
	}
	return string(r.b[start:r.i]), nil
}

func (r *reader) digits() {
	for r.i < len(r.b) && '0' <= r.b[r.i] && r.b[r.i] <= '9' {
		r.i++
	}
}

// someDigits reads at least one digit.
func (r *reader) someDigits() error {
	if r.i >= len(r.b) {
		return errEOF
	}
	if r.b[r.i] < '0' || r.b[r.i] > '9' {
		return r.invalid("in numeric literal")
	}
	r.digits()
	return nil
}

// string reads a string, r.b[r.i] being its opening quote. As
// encoding/json does, invalid UTF-8 and unpaired surrogates become
// U+FFFD.
func (r *reader) string() (string, error) {
	r.i++
	start := r.i
	for r.i < len(r.b) { // the common case: nothing to unescape or replace
		c := r.b[r.i]
		if c == '"' {
			s := string(r.b[start:r.i])
			r.i++
			return s, nil
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
		r.i++
	}
	buf := append([]byte(nil), r.b[start:r.i]...)
	for r.i < len(r.b) {
		c := r.b[r.i]
		switch {
		case c == '"':
			r.i++
			return string(buf), nil
		case c < 0x20:
			return "", r.invalid("in string literal")
		case c == '\\':
			var err error
			if buf, err = r.escape(buf); err != nil {
				return "", err
			}
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			r.i++
		default:
			ru, size := utf8.DecodeRune(r.b[r.i:])
			buf = utf8.AppendRune(buf, ru) // RuneError for an invalid byte
			r.i += size
		}
	}
	return "", errEOF
}

// escape appends what the escape at r.b[r.i] (a backslash) stands for.
func (r *reader) escape(buf []byte) ([]byte, error) {
	r.i++
	if r.i >= len(r.b) {
		return nil, errEOF
	}
	c := r.b[r.i]
	r.i++
	switch c {
	case '"', '\\', '/':
		return append(buf, c), nil
	case 'b':
		return append(buf, '\b'), nil
	case 'f':
		return append(buf, '\f'), nil
	case 'n':
		return append(buf, '\n'), nil
	case 'r':
		return append(buf, '\r'), nil
	case 't':
		return append(buf, '\t'), nil
	case 'u':
		ru, err := r.hex4()
		if err != nil {
			return nil, err
		}
		if utf16.IsSurrogate(ru) {
			// A high surrogate followed by \u and a low one is one
			// character; anything else leaves it unpaired.
			if r.i+1 < len(r.b) && r.b[r.i] == '\\' && r.b[r.i+1] == 'u' {
				save := r.i
				r.i += 2
				lo, err := r.hex4()
				if err != nil {
					return nil, err
				}
				if pair := utf16.DecodeRune(ru, lo); pair != utf8.RuneError {
					return utf8.AppendRune(buf, pair), nil
				}
				r.i = save
			}
			ru = utf8.RuneError
		}
		return utf8.AppendRune(buf, ru), nil
	}
	r.i--
	return nil, r.invalid("in string escape code")
}

func (r *reader) hex4() (rune, error) {
	if r.i+4 > len(r.b) {
		r.i = len(r.b)
		return 0, errEOF
	}
	var n rune
	for _, c := range r.b[r.i : r.i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, fmt.Errorf("invalid \\u escape %q at offset %d", r.b[r.i:r.i+4], r.i)
		}
		n = n<<4 | rune(c)
	}
	r.i += 4
	return n, nil
}

// uint64 reads a number that must be an unsigned integer (digits only).
func (r *reader) uint64() (uint64, error) {
	if c := r.peek(); c < '0' || c > '9' {
		if c == end {
			return 0, errEOF
		}
		return 0, r.invalid("looking for an unsigned integer")
	}
	var n uint64
	for r.i < len(r.b) && '0' <= r.b[r.i] && r.b[r.i] <= '9' {
		d := uint64(r.b[r.i] - '0')
		if n > (1<<64-1-d)/10 {
			return 0, errors.New("larger than an unsigned 64-bit integer")
		}
		n = n*10 + d
		r.i++
	}
	if r.i < len(r.b) && (r.b[r.i] == '.' || r.b[r.i] == 'e' || r.b[r.i] == 'E') {
		return 0, errors.New("not an unsigned integer")
	}
	return n, nil
}
