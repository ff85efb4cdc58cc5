package script

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// Session is an interpreter that keeps its state (globals, functions)
// from one evaluation to the next. Each runtime package's Session is one.
type Session interface {
	// EvalInput runs code with the global `input` set to input and
	// returns the snippet's value as JSON, or the script error.
	EvalInput(code string, input *Value) (json.RawMessage, *Error)
}

// Request is what a guest's `eval` reads: the snippet and its input
// (any JSON; absent is null).
type Request struct {
	Code  string          `json:"code"`
	Input json.RawMessage `json:"input,omitempty"`
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
	value, serr := s.EvalInput(req.Code, input)
	return Response(value, serr), nil
}

// ParseRequest reads a Request and parses its input.
func ParseRequest(request []byte) (*Request, *Value, error) {
	d := json.NewDecoder(bytes.NewReader(request))
	d.DisallowUnknownFields()
	var req struct {
		Code  *string         `json:"code"`
		Input json.RawMessage `json:"input"`
	}
	if err := d.Decode(&req); err != nil {
		return nil, nil, errors.New("request: " + err.Error())
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, nil, errors.New("request: data after the JSON object")
	}
	if req.Code == nil {
		return nil, nil, errors.New(`request: "code" is missing`)
	}
	input, err := ParseInput(req.Input)
	if err != nil {
		return nil, nil, err
	}
	return &Request{Code: *req.Code, Input: req.Input}, input, nil
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
