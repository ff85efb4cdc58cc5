package mcpserver

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/internal/jsonscan"
	"github.com/sandboxd/sandboxd/protocol"
)

// Reading a tool call's arguments. They are JSON the SDK has decoded as
// far as a raw message; the reader checks them once (jsonscan.Valid) and
// then walks the text, member by member, decoding only what it keeps.
// Every problem is an *inputError naming the field by its path in the
// arguments ("limits.fuel", "files[\"/a\"]"). Objects with open keys
// (env, files, config) and arrays are counted before anything is
// decoded, so a message of millions of empty entries costs its own size,
// not a map of millions of keys. The tools' input schemas (schema.go) say
// the same in JSON Schema; TestSchemasAgreeWithTheReader holds the two
// together.

// inputError is a tool's argument the server refuses: the call's result
// is an error of kind invalid_params naming the field.
type inputError struct {
	Field   string // path in the arguments; "" for the arguments themselves
	Problem string
}

func (e *inputError) Error() string {
	if e.Field == "" {
		return "arguments: " + e.Problem
	}
	return e.Field + ": " + e.Problem
}

func inputErr(field, format string, args ...any) *inputError {
	return &inputError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// join is the path of a member of the object at path.
func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// object is a JSON object being read: its members by name, each taken
// once.
type object struct {
	path    string
	members map[string][]byte
}

// readObject reads raw as an object whose members are among known. A
// member not known, or given twice, is refused.
func readObject(path string, raw []byte, known []string) (*object, error) {
	if kindOf(raw) != "object" {
		return nil, inputErr(path, "must be an object, got %s", got(raw))
	}
	o := &object{path: path, members: map[string][]byte{}}
	var err error
	jsonscan.Members(raw, func(key, value []byte) {
		if err != nil {
			return
		}
		name := jsonscan.String(key)
		switch {
		case !slices.Contains(known, name):
			err = inputErr(join(path, protocol.Escape(name)), "unknown field; expected one of %s", strings.Join(known, ", "))
		case o.members[name] != nil:
			err = inputErr(join(path, name), "appears twice")
		default:
			o.members[name] = value
		}
	})
	if err != nil {
		return nil, err
	}
	return o, nil
}

// has says whether the member name is present (null counts as absent).
func (o *object) has(name string) bool {
	v, ok := o.members[name]
	return ok && string(v) != "null"
}

func (o *object) field(name string) string { return join(o.path, name) }

// string reads the member name as a string into dst, if present.
func (o *object) string(name string, dst *string) error {
	if !o.has(name) {
		return nil
	}
	v := o.members[name]
	if kindOf(v) != "string" {
		return inputErr(o.field(name), "must be a string, got %s", got(v))
	}
	*dst = jsonscan.String(v)
	return nil
}

// bool reads the member name as a boolean into dst, if present.
func (o *object) bool(name string, dst *bool) error {
	if !o.has(name) {
		return nil
	}
	switch v := string(o.members[name]); v {
	case "true", "false":
		*dst = v == "true"
		return nil
	}
	return inputErr(o.field(name), "must be true or false, got %s", got(o.members[name]))
}

// uint reads the member name as a whole number into dst, if present.
func (o *object) uint(name string, dst *uint64) error {
	if !o.has(name) {
		return nil
	}
	v := o.members[name]
	n, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil {
		if kindOf(v) != "number" {
			return inputErr(o.field(name), "must be a whole number, got %s", got(v))
		}
		return inputErr(o.field(name), "must be a whole number from 0 to %d, got %s", uint64(1<<64-1), clip(string(v)))
	}
	*dst = n
	return nil
}

// bytes reads the member name as bytes (a string, {"text": …} or
// {"base64": …}) into dst, if present.
func (o *object) bytes(name string, dst *[]byte) error {
	if !o.has(name) {
		return nil
	}
	b, problem := protocol.DecodeBytes(o.members[name])
	if problem != "" {
		return inputErr(o.field(name), "%s", problem)
	}
	*dst = b
	return nil
}

// strings reads the member name as an array of at most max strings.
func (o *object) strings(name string, max int, dst *[]string) error {
	if !o.has(name) {
		return nil
	}
	var out []string
	return o.array(name, max, func(field string, v []byte) error {
		if kindOf(v) != "string" {
			return inputErr(field, "must be a string, got %s", got(v))
		}
		out = append(out, jsonscan.String(v))
		*dst = out
		return nil
	})
}

// array calls fn with the path and raw value of each element of the
// member name, an array of at most max elements (counted first).
func (o *object) array(name string, max int, fn func(field string, v []byte) error) error {
	if !o.has(name) {
		return nil
	}
	raw, field := o.members[name], o.field(name)
	if kindOf(raw) != "array" {
		return inputErr(field, "must be an array, got %s", got(raw))
	}
	n := 0
	jsonscan.EachElement(raw, func([]byte) bool { n++; return n <= max })
	if n > max {
		return inputErr(field, "has more than %d elements", max)
	}
	i, err := 0, error(nil)
	jsonscan.EachElement(raw, func(v []byte) bool {
		err = fn(field+"["+strconv.Itoa(i)+"]", v)
		i++
		return err == nil
	})
	return err
}

// entries calls fn with the path, key and raw value of each member of the
// member name, an object of at most max keys (counted first) with no key
// twice.
func (o *object) entries(name string, max int, fn func(field, key string, v []byte) error) error {
	if !o.has(name) {
		return nil
	}
	raw, field := o.members[name], o.field(name)
	if kindOf(raw) != "object" {
		return inputErr(field, "must be an object, got %s", got(raw))
	}
	n := 0
	jsonscan.Members(raw, func(_, _ []byte) { n++ })
	if n > max {
		return inputErr(field, "has %d keys; at most %d", n, max)
	}
	seen := make(map[string]bool, n)
	var err error
	jsonscan.Members(raw, func(k, v []byte) {
		if err != nil {
			return
		}
		key := jsonscan.String(k)
		if seen[key] {
			err = inputErr(field+"["+protocol.Quote(key)+"]", "appears twice")
			return
		}
		seen[key] = true
		err = fn(field+"["+protocol.Quote(key)+"]", key, v)
	})
	return err
}

// stringMap reads the member name as an object of at most max string
// values.
func (o *object) stringMap(name string, max int, dst *map[string]string) error {
	if !o.has(name) {
		return nil
	}
	out := map[string]string{}
	*dst = out
	return o.entries(name, max, func(field, key string, v []byte) error {
		if kindOf(v) != "string" {
			return inputErr(field, "must be a string, got %s", got(v))
		}
		out[key] = jsonscan.String(v)
		return nil
	})
}

// kindOf names the JSON type of a valid value by its first byte.
func kindOf(v []byte) string {
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// got says what a value is, for a message: "an object", "a number".
func got(v []byte) string {
	switch k := kindOf(v); k {
	case "object", "array":
		return "an " + k
	case "null", "nothing":
		return k
	default:
		return "a " + k
	}
}

// clip shortens what a message quotes of the caller's input.
func clip(s string) string {
	if len(s) <= 40 {
		return s
	}
	return s[:40] + "…"
}
