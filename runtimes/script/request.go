package script

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Session is an interpreter that keeps its state (globals, functions)
// from one evaluation to the next. Each runtime package's Session is one.
type Session interface {
	// EvalInput runs code with the global `input` set to input and
	// returns the snippet's value as JSON, or the script error.
	EvalInput(code string, input *Value) (json.RawMessage, *Error)
}

// Request is what a guest's `eval` reads: the snippet and its input
// (any JSON; absent is null), and the cap on the guest's memory.
type Request struct {
	Code  string          `json:"code"`
	Input json.RawMessage `json:"input,omitempty"`
	// MemoryBytes is the instance's memory cap (its linear memory), for
	// the guest's garbage collector (FitCollector); 0 when not given.
	MemoryBytes uint64 `json:"memoryBytes,omitempty"`
}

// Handle answers one plugin request with the JSON a guest's `eval`
// outputs: {"value": …} or {"error": {…}} for a script error. A request
// that is not a Request (not JSON, unknown fields, no code, an input
// nested too deep) is an error: the caller should have checked it, and
// the guest reports it as a plugin error, never as the snippet's.
func Handle(s Session, request []byte) ([]byte, error) {
	req, input, err := ParseRequest(request)
	if err != nil {
		return nil, err
	}
	if req.MemoryBytes > 0 {
		FitCollector(req.MemoryBytes)
	}
	value, serr := s.EvalInput(req.Code, input)
	return Response(value, serr), nil
}

// ParseRequest reads a Request and parses its input. A member named
// twice counts once, the last, as encoding/json would decode it; a null
// "code" is a missing one.
func ParseRequest(request []byte) (*Request, *Value, error) {
	r := reader{b: request}
	fail := func(err error) (*Request, *Value, error) { return nil, nil, errors.New("request: " + err.Error()) }
	if err := r.expect('{', "looking for the beginning of the request object"); err != nil {
		return fail(err)
	}
	var req Request
	input := &Value{Kind: Null}
	haveCode := false
	for first := true; ; first = false {
		if r.peek() == '}' && first {
			r.i++
			break
		}
		if c := r.peek(); c != '"' {
			if c == end {
				return fail(errEOF)
			}
			return fail(r.invalid("looking for the beginning of an object key"))
		}
		key, err := r.string()
		if err != nil {
			return fail(err)
		}
		if err := r.expect(':', "after an object key"); err != nil {
			return fail(err)
		}
		switch key {
		case "code":
			switch r.peek() {
			case '"':
				if req.Code, err = r.string(); err != nil {
					return fail(err)
				}
				haveCode = true
			case 'n':
				if err := r.literal("null"); err != nil {
					return fail(err)
				}
				req.Code, haveCode = "", false
			case end:
				return fail(errEOF)
			default:
				return fail(errors.New(`"code" is not a string`))
			}
		case "memoryBytes":
			if req.MemoryBytes, err = r.uint64(); err != nil {
				return fail(fmt.Errorf(`"memoryBytes": %w`, err))
			}
		case "input":
			start := r.i
			if input, err = r.value(0); err != nil {
				return nil, nil, fmt.Errorf("input: %w", err)
			}
			req.Input = json.RawMessage(bytes.TrimLeft(request[start:r.i], " \t\r\n"))
		default:
			return fail(fmt.Errorf("unknown field %q", key))
		}
		done, err := r.next('}', "after an object member")
		if err != nil {
			return fail(err)
		}
		if done {
			break
		}
	}
	if r.peek() != end {
		return fail(errors.New("data after the JSON object"))
	}
	if !haveCode {
		return fail(errors.New(`"code" is missing`))
	}
	return &req, input, nil
}

// Response is the JSON of a value (nil is null) or of a script error.
func Response(value json.RawMessage, serr *Error) []byte {
	if serr != nil {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false) // "<expr>", not "\u003cexpr\u003e"
		_ = enc.Encode(struct {
			Error *Error `json:"error"`
		}{serr})
		return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	}
	if value == nil {
		value = json.RawMessage("null")
	}
	out := make([]byte, 0, len(value)+10)
	out = append(out, `{"value":`...)
	out = append(out, value...)
	return append(out, '}')
}
