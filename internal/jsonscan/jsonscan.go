// Package jsonscan steps over JSON text that is known to be valid
// (checked once, e.g. by json.Valid): the members of an object and the
// elements of an array, as slices of the text, without decoding or
// copying them, and String decodes a string literal. encoding/json
// checks the syntax of its input again on every call; the sidecar screens
// a message once and then reads its params with these, and the Go client
// finds a response's id and result with them.
//
// On text that is not valid JSON the functions return something (never
// panic, always finish), but what they return means nothing.
package jsonscan

import (
	"bytes"
	"encoding/json"
)

// Members calls fn with the key (a JSON string literal, as written) and
// the raw value of each member of the JSON object obj, in order. obj must
// be valid JSON: the caller has checked it.
func Members(obj []byte, fn func(key, value []byte)) {
	i := skipSpace(obj, 0) + 1 // past '{'
	for {
		i = skipSpace(obj, i)
		if i >= len(obj) || obj[i] == '}' {
			return
		}
		if obj[i] == ',' {
			i++
			continue
		}
		k := ValueEnd(obj, i)
		key := obj[i:k]
		i = skipSpace(obj, skipSpace(obj, k)+1) // past ':'
		if i >= len(obj) {
			return // not valid JSON
		}
		v := ValueEnd(obj, i)
		fn(key, obj[i:v])
		i = v
	}
}

// stringEnd returns the index just past the string literal that starts
// at b[i] (a quote): the next quote preceded by an even number of
// backslashes. IndexByte makes a long string (a module's text or base64)
// cheap to step over.
func stringEnd(b []byte, i int) int {
	i++ // past the opening quote
	for {
		k := bytes.IndexByte(b[i:], '"')
		if k < 0 {
			return len(b)
		}
		q := i + k
		n := 0
		for p := q - 1; p >= i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		i = q + 1
	}
}

// TrimSpace returns b without the whitespace JSON allows around a value
// (space, tab, newline, carriage return) at either end. bytes.TrimSpace
// trims Unicode's, such as a vertical tab, which JSON does not allow:
// "\v{}" is not a JSON object.
func TrimSpace(b []byte) []byte {
	i, j := skipSpace(b, 0), len(b)
	for j > i && isSpace(b[j-1]) {
		j--
	}
	return b[i:j]
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// ValueEnd returns the index just past the valid JSON value at b[i].
func ValueEnd(b []byte, i int) int {
	depth := 0
	for j := i; j < len(b); j++ {
		c := b[j]
		switch {
		case c == '"':
			j = stringEnd(b, j) - 1 // at the closing quote
			if depth == 0 {
				return j + 1
			}
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth == 0 { // the end of the enclosing object: a scalar ended
				return j
			}
			depth--
			if depth == 0 {
				return j + 1
			}
		case depth == 0 && (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return j
		}
	}
	return len(b)
}

// Elements returns the elements of the valid JSON array arr, sharing its
// memory.
func Elements(arr []byte) []json.RawMessage {
	var out []json.RawMessage
	EachElement(arr, func(v []byte) bool {
		out = append(out, v)
		return true
	})
	return out
}

// EachElement calls fn with each element of the valid JSON array arr, in
// order, until fn returns false: an array can be counted, or refused past
// a bound, before anything is allocated for its elements.
func EachElement(arr []byte, fn func(v []byte) bool) {
	i := skipSpace(arr, 0) + 1 // past '['
	for {
		i = skipSpace(arr, i)
		if i >= len(arr) || arr[i] == ']' {
			return
		}
		if arr[i] == ',' {
			i++
			continue
		}
		end := ValueEnd(arr, i)
		if end == i { // not valid JSON: step on
			end++
		}
		if !fn(arr[i:end]) {
			return
		}
		i = end
	}
}
