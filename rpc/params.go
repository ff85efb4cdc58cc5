package rpc

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/internal/jsonscan"
	"github.com/sandboxd/sandboxd/protocol"
)

// Reading params. Every message is checked for JSON syntax once, when it
// is screened (screen.go); its params are then read by walking that valid
// text (jsonscan) through the shapes of wire.go, instead of handing each
// level to encoding/json, which checks the syntax of its input again
// before decoding it (for a run of a 2 KB WAT text that was nine passes
// over the text instead of two). So every function here requires valid
// JSON; values are read as encoding/json reads them (jsonscan.String for
// strings), which the differential fuzzer checks.

// maxMembers is the most members a shape has.
const maxMembers = 12

// members are an object's members by their index in its shape: each value
// as its JSON text, sharing the message's memory; nil when absent or null
// (null is absent: docs/protocol.md, Messages; the protocol has no member
// whose null means something else).
type members struct {
	values [maxMembers]json.RawMessage
	given  uint32 // bit i: member i was given, null or not
}

// has reports whether member i was given, null or not.
func (m *members) has(i int) bool { return m.given&(1<<i) != 0 }

// read reads the valid JSON raw as an object of the shape.
func (sh *shape) read(raw json.RawMessage, m *members) error {
	return sh.readAt(raw, sh.path, m)
}

// readAt is read for an object whose field path is path (an element of
// an array: capabilities.wasi.dirs[2]). Of a member given twice the last
// counts. A member the shape does not take is refused, the first of them
// named; the members are still all read (compile's limits name a run
// limit before an unknown one).
func (sh *shape) readAt(raw json.RawMessage, path string, m *members) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return paramErr(path, "must be an object, got %s", kindOfJSON(raw))
	}
	var unknown error
	jsonscan.Members(raw, func(key, value []byte) {
		i, name := sh.member(key)
		if i < 0 {
			if unknown == nil {
				unknown = sh.unknown(path, name)
			}
			return
		}
		m.given |= 1 << i
		if isNull(value) {
			m.values[i] = nil
		} else {
			m.values[i] = value
		}
	})
	return unknown
}

// member finds the key literal key among the shape's names: its index,
// or -1 and the decoded name. A plain key costs no allocation.
func (sh *shape) member(key []byte) (int, string) {
	if bytes.IndexByte(key, '\\') < 0 {
		body := key[1 : len(key)-1]
		for i, n := range sh.names {
			if string(body) == n {
				return i, n
			}
		}
	}
	name := jsonscan.String(key)
	for i, n := range sh.names {
		if name == n {
			return i, n
		}
	}
	return -1, name
}

func (sh *shape) unknown(path, name string) error {
	if name == "" {
		return paramErr(path, "unknown field \"\" (allowed: %s)", sh.allowed)
	}
	return paramErr(join(path, protocol.Escape(name)), "unknown field (allowed: %s)", sh.allowed)
}

// entry is a member of an object of any keys (env, files, config).
type entry struct {
	key   string
	value json.RawMessage
}

// entries reads the valid JSON raw as an object of any keys: each key
// once, in the order of its first appearance, with its last value.
func entries(raw json.RawMessage, field string) ([]entry, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, paramErr(field, "must be an object, got %s", kindOfJSON(raw))
	}
	var out []entry
	var index map[string]int // in out, by key
	jsonscan.Members(raw, func(key, value []byte) {
		k := jsonscan.String(key)
		if i, ok := index[k]; ok {
			out[i].value = value
			return
		}
		if index == nil {
			index = map[string]int{}
		}
		index[k] = len(out)
		out = append(out, entry{k, value})
	})
	return out, nil
}

// elements reads the valid JSON raw as an array.
func elements(raw json.RawMessage, field string) ([]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, paramErr(field, "must be an array, got %s", kindOfJSON(raw))
	}
	return jsonscan.Elements(raw), nil
}

func join(parent, child string) string {
	if parent == "params" || parent == "" {
		return child
	}
	return parent + "." + child
}

// isNull says whether the JSON value v is null.
func isNull(v []byte) bool { return string(bytes.TrimSpace(v)) == "null" }

func kindOfJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// stringField reads a string.
func stringField(raw json.RawMessage, field string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '"' {
		return "", paramErr(field, "must be a string, got %s", kindOfJSON(raw))
	}
	return jsonscan.String(raw), nil
}

// nonEmptyString reads a string that must not be empty.
func nonEmptyString(raw json.RawMessage, field string) (string, error) {
	s, err := stringField(raw, field)
	if err == nil && s == "" {
		err = paramErr(field, "must not be empty")
	}
	return s, err
}

// boolField reads true or false (null reads as false, as encoding/json
// reads it).
func boolField(raw json.RawMessage, field string) (bool, error) {
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, nil
	case "false", "null":
		return false, nil
	}
	return false, paramErr(field, "must be true or false, got %s", kindOfJSON(bytes.TrimSpace(raw)))
}

// uintField reads a JSON integer >= 0 (or, if allowString, a decimal
// string: digits, with an optional sign) that fits in 64 bits. positive
// only words the message for a negative value: the caller checks for zero.
func uintField(raw json.RawMessage, field string, allowString, positive bool) (uint64, error) {
	raw = bytes.TrimSpace(raw)
	lit := string(raw)
	if allowString && len(raw) > 0 && raw[0] == '"' {
		if lit = jsonscan.String(raw); !decimalDigits(lit) {
			// Not any float text: big.ParseFloat, below, also reads
			// "1p3" (8) and ".5e1".
			return 0, paramErr(field, "must be an integer, got the string %s", protocol.Quote(lit))
		}
	} else if len(raw) == 0 || !(raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')) {
		return 0, paramErr(field, "must be an integer, got %s", kindOfJSON(raw))
	}
	if len(lit) > 400 {
		return 0, paramErr(field, "must be an integer that fits in 64 bits")
	}
	if len(lit) > 0 && len(lit) < 20 && (len(lit) == 1 || lit[0] != '0') && strings.Trim(lit, "0123456789") == "" {
		if n, err := strconv.ParseUint(lit, 10, 64); err == nil { // plain digits: the usual case
			return n, nil
		}
	}
	n, ok := protocol.ExactInteger(lit)
	if !ok {
		return 0, paramErr(field, "must be an integer, got %s", lit)
	}
	if n.Sign() < 0 {
		if positive {
			return 0, paramErr(field, "must be > 0, got %s", lit)
		}
		return 0, paramErr(field, "must be >= 0, got %s", lit)
	}
	if !n.IsUint64() {
		return 0, paramErr(field, "must be at most %d", uint64(math.MaxUint64))
	}
	return n.Uint64(), nil
}

// decimalDigits reports whether s is digits with an optional sign.
func decimalDigits(s string) bool {
	digits := strings.TrimLeft(s, "+-")
	return digits != "" && len(s)-len(digits) <= 1 && strings.Trim(digits, "0123456789") == ""
}

// base64Field decodes a base64 string, straight from the message when it
// has no escapes (a module of tens of MiB is copied once, into its bytes).
func base64Field(raw json.RawMessage, field string) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '"' {
		return nil, paramErr(field, "must be a string, got %s", kindOfJSON(raw))
	}
	text := raw[1 : len(raw)-1]
	if bytes.IndexByte(text, '\\') >= 0 {
		text = []byte(jsonscan.String(raw))
	}
	if len(text) == 0 {
		return nil, paramErr(field, "must not be empty")
	}
	b := make([]byte, base64.StdEncoding.DecodedLen(len(text)))
	n, err := base64.StdEncoding.Decode(b, text)
	if err != nil {
		return nil, paramErr(field, "not valid base64: %v", err)
	}
	return b[:n], nil
}

// bytesField reads bytes as input and WASI's stdin and files take them: a
// string, {"text": string} or {"base64": string}.
func bytesField(raw json.RawMessage, field string) ([]byte, error) {
	b, problem := protocol.DecodeBytes(raw)
	if problem != "" {
		return nil, paramErr(field, "%s", problem)
	}
	return b, nil
}

// countElements counts the top-level elements of the JSON array (or
// members of the object) raw, stopping past limit: it returns the count
// so far and false then. It allocates nothing, so a bound is enforced
// before anything is decoded.
func countElements(raw []byte, limit int) (int, bool) {
	n, depth, inString, escaped, empty := 0, 0, false, false, true
	for _, c := range raw {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			if depth == 1 {
				continue
			}
		case c == ']' || c == '}':
			depth--
		case c == ',' && depth == 1:
			n++
			if n >= limit {
				return n + 1, false
			}
			continue
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			continue
		}
		if depth >= 1 {
			empty = false
		}
	}
	if empty {
		return 0, true
	}
	return n + 1, true
}
