package rpc

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/internal/jsonscan"
	"github.com/sandboxd/sandboxd/protocol"
)

// Decoding params that screening has already checked. Every message is
// checked for JSON syntax once, when it is screened (screen.go); the
// params of a run are then read by walking that valid text (jsonscan) instead of handing each level to encoding/json, which checks
// the syntax of its input again before decoding it: for a run of a 2 KB
// WAT text that was nine passes over the text instead of two. The
// functions here require valid JSON; decodeRun checks it for callers that
// have not.

// validObject is object for valid JSON: raw's members by key, values
// sharing raw's memory.
func validObject(raw json.RawMessage, field string, allowed ...string) (map[string]json.RawMessage, error) {
	return validMembers(raw, field, allowed, allowed)
}

// validMembers is validObject whose unknown-field error lists listed, the
// members a caller may give, instead of every member it takes (a call's
// limits: fixed limits are refused by the caller, saying so).
func validMembers(raw json.RawMessage, field string, allowed, listed []string) (map[string]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, paramErr(field, "must be an object, got %s", kindOfJSON(raw))
	}
	obj := make(map[string]json.RawMessage, 4)
	var bad error
	jsonscan.Members(raw, func(key, value []byte) {
		if bad != nil {
			return
		}
		k, ok := knownKey(key, allowed)
		if ok && isNull(value) {
			delete(obj, k) // null is absent (docs/protocol.md, Messages), and the last counts
			return
		}
		if !ok {
			if k == "" {
				bad = paramErr(field, "unknown field \"\" (allowed: %s)", strings.Join(listed, ", "))
			} else {
				bad = paramErr(join(field, protocol.Escape(k)), "unknown field (allowed: %s)", strings.Join(listed, ", "))
			}
			return
		}
		obj[k] = value
	})
	if bad != nil {
		return nil, bad
	}
	return obj, nil
}

// isNull says whether the JSON value v is null. A member given as null
// is taken as absent, whatever the member: the protocol has no member
// whose null means something else.
func isNull(v []byte) bool { return string(bytes.TrimSpace(v)) == "null" }

// knownKey decodes the key literal key and reports whether it is one of
// allowed (returning that string, so a known key costs no allocation).
func knownKey(key []byte, allowed []string) (string, bool) {
	if bytes.IndexByte(key, '\\') < 0 {
		body := key[1 : len(key)-1]
		for _, a := range allowed {
			if string(body) == a {
				return a, true
			}
		}
	}
	k := validString(key)
	return k, contains(allowed, k)
}

// validStringField is stringField for valid JSON.
func validStringField(raw json.RawMessage, field string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '"' {
		return "", paramErr(field, "must be a string, got %s", kindOfJSON(raw))
	}
	return validString(raw), nil
}

// validString decodes the valid JSON string literal lit as encoding/json
// does: escapes resolved, invalid UTF-8 and lone surrogates replaced by
// U+FFFD.
func validString(lit []byte) string {
	body := lit[1 : len(lit)-1]
	i := bytes.IndexByte(body, '\\')
	valid := utf8.Valid(body) // then no chunk between escapes needs checking
	if i < 0 && valid {
		return string(body) // nothing to unescape or replace: the common case
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
