package jsonscan

// maxDepth is encoding/json's nesting limit, which Valid keeps so that
// both accept the same texts.
const maxDepth = 10000

// Valid reports whether data is one JSON value, with white space around
// it allowed: exactly what json.Valid reports. It is several times faster
// on long strings (a module's WAT text or base64), which it steps over
// byte by byte instead of through encoding/json's state machine.
func Valid(data []byte) bool {
	i, ok := value(data, skipSpace(data, 0), 0)
	return ok && skipSpace(data, i) == len(data)
}

// value checks the value at b[i] and returns the index past it.
func value(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		return str(b, i)
	case c == '{':
		if depth >= maxDepth {
			return i, false
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == '}' {
			return i + 1, true
		}
		for {
			if i >= len(b) || b[i] != '"' {
				return i, false
			}
			var ok bool
			if i, ok = str(b, i); !ok {
				return i, false
			}
			i = skipSpace(b, i)
			if i >= len(b) || b[i] != ':' {
				return i, false
			}
			if i, ok = value(b, skipSpace(b, i+1), depth+1); !ok {
				return i, false
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return i, false
			}
			switch b[i] {
			case ',':
				i = skipSpace(b, i+1)
			case '}':
				return i + 1, true
			default:
				return i, false
			}
		}
	case c == '[':
		if depth >= maxDepth {
			return i, false
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1, true
		}
		for {
			var ok bool
			if i, ok = value(b, i, depth+1); !ok {
				return i, false
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return i, false
			}
			switch b[i] {
			case ',':
				i = skipSpace(b, i+1)
			case ']':
				return i + 1, true
			default:
				return i, false
			}
		}
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		return number(b, i)
	}
	return i, false
}

// plain marks the bytes a string may hold as they are: not a quote, a
// backslash or a control character.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str checks the string literal at b[i] (a quote).
func str(b []byte, i int) (int, bool) {
	i++
	for i < len(b) {
		for i < len(b) && plain[b[i]] {
			i++
		}
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			return i + 1, true
		case c == '\\':
			if i+1 >= len(b) {
				return i, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return i, false
				}
				i += 6
			default:
				return i, false
			}
		case c < 0x20:
			return i, false
		default:
			i++
		}
	}
	return i, false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func literal(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

// number checks -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at b[i].
func number(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return i, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return i, false
		}
		i = j
	}
	return i, true
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// MaxDepth is the nesting limit Valid enforces (encoding/json's): an
// object or array nested deeper than this is not valid.
const MaxDepth = maxDepth

// LeadingMembers calls fn with the key and value of each member of the
// object at the start of data, in order, as long as they are valid JSON
// (each value nested at most MaxDepth-1 levels, counting the object). It
// stops at the first member that is not, and returns that member's key
// (nil when what stopped it was not a member's value, or nothing did).
// It is for a message that is not valid: what can be read of it before
// the fault, e.g. a request's id before a member nested too deep.
func LeadingMembers(data []byte, fn func(key, value []byte)) (stoppedAt []byte) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return nil
	}
	i = skipSpace(data, i+1)
	for i < len(data) && data[i] == '"' {
		k, ok := str(data, i)
		if !ok {
			return nil
		}
		key := data[i:k]
		i = skipSpace(data, k)
		if i >= len(data) || data[i] != ':' {
			return nil
		}
		i = skipSpace(data, i+1)
		v, ok := value(data, i, 1)
		if !ok {
			return key
		}
		fn(key, data[i:v])
		i = skipSpace(data, v)
		if i >= len(data) || data[i] != ',' {
			return nil
		}
		i = skipSpace(data, i+1)
	}
	return nil
}
