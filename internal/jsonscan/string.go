package jsonscan

import (
	"bytes"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// String decodes the valid JSON string literal lit (quotes included) as
// encoding/json does: escapes resolved, invalid UTF-8 and lone surrogates
// replaced by U+FFFD. A literal with nothing to unescape or replace (the
// common case: a module's text or base64) is copied once, into the string.
func String(lit []byte) string {
	if len(lit) < 2 { // not a literal: the package's promise is to finish, not to mean anything
		return ""
	}
	body := lit[1 : len(lit)-1]
	i := bytes.IndexByte(body, '\\')
	valid := utf8.Valid(body) // then no chunk between escapes needs checking
	if i < 0 && valid {
		return string(body)
	}
	if i < 0 {
		i = len(body)
	}
	var out strings.Builder // its String does not copy
	out.Grow(len(body))
	appendRaw := func(chunk []byte) {
		if valid {
			out.Write(chunk)
			return
		}
		appendReplacingInvalid(&out, chunk)
	}
	appendRaw(body[:i])
	for i < len(body) {
		if body[i] != '\\' {
			j := bytes.IndexByte(body[i:], '\\')
			if j < 0 {
				j = len(body) - i
			}
			appendRaw(body[i : i+j])
			i += j
			continue
		}
		i++ // past the backslash
		if i == len(body) {
			break // a trailing backslash: not valid JSON
		}
		switch c := body[i]; c {
		case 'b':
			out.WriteByte('\b')
		case 'f':
			out.WriteByte('\f')
		case 'n':
			out.WriteByte('\n')
		case 'r':
			out.WriteByte('\r')
		case 't':
			out.WriteByte('\t')
		case 'u':
			if i+5 > len(body) {
				return out.String() // a cut \u escape: not valid JSON
			}
			r := hex4(body[i+1 : i+5])
			i += 5
			if utf16.IsSurrogate(r) {
				// A pair is one rune; anything else is replaced, and a
				// following escape is read on its own (as encoding/json).
				if i+6 <= len(body) && body[i] == '\\' && body[i+1] == 'u' {
					if dec := utf16.DecodeRune(r, hex4(body[i+2:i+6])); dec != utf8.RuneError {
						out.WriteRune(dec)
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			out.WriteRune(r)
			continue
		default: // '"', '\\', '/'
			out.WriteByte(c)
		}
		i++
	}
	return out.String()
}

// appendReplacingInvalid writes b with each byte of invalid UTF-8
// replaced by U+FFFD.
func appendReplacingInvalid(out *strings.Builder, b []byte) {
	for len(b) > 0 {
		if b[0] < utf8.RuneSelf {
			out.WriteByte(b[0])
			b = b[1:]
			continue
		}
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			out.WriteRune(utf8.RuneError)
		} else {
			out.Write(b[:size])
		}
		b = b[size:]
	}
}

// hex4 reads four hex digits (valid JSON has them after \u).
func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r<<4 | rune(c)
	}
	return r
}
