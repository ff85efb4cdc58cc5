package script

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Kind is the JSON type of an input value.
type Kind uint8

// The JSON types.
const (
	Null Kind = iota
	Bool
	Number
	String
	Array
	Object
)

// Value is a JSON input, parsed once and kept in order: each runtime
// builds its own values from it (object members in their order, which
// encoding/json's maps would lose).
type Value struct {
	Kind Kind
	Bool bool
	// Number is the number's text as written (e.g. "12", "-0.5e3"), for
	// the runtime to read as its language reads numbers.
	Number string
	String string
	// Items are an array's elements or an object's member values; Keys
	// are the members' names, in the same order. A repeated name stays
	// repeated: the runtime's own assignment decides (the last one wins
	// in every language here).
	Items []*Value
	Keys  []string
}

// Float is the number read as a float64 (the nearest one; ±Inf past the
// range).
func (v *Value) Float() float64 {
	f, _ := strconv.ParseFloat(v.Number, 64)
	return f
}

// IsInteger says the number is written without a fraction or exponent.
func (v *Value) IsInteger() bool {
	return bytes.IndexAny([]byte(v.Number), ".eE") < 0
}

// ParseInput parses raw, a JSON text; empty or absent input (nil) is null.
// It refuses invalid JSON, trailing data and nesting past MaxDepth.
func ParseInput(raw []byte) (*Value, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return &Value{Kind: Null}, nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	v, err := parseValue(d, 0)
	if err == io.EOF { // inside the value: it was cut short
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, fmt.Errorf("input: %w", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("input: data after the JSON value")
	}
	return v, nil
}

func parseValue(d *json.Decoder, depth int) (*Value, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return &Value{Kind: Null}, nil
	case bool:
		return &Value{Kind: Bool, Bool: t}, nil
	case json.Number:
		return &Value{Kind: Number, Number: string(t)}, nil
	case string:
		return &Value{Kind: String, String: t}, nil
	case json.Delim:
		if depth >= MaxDepth {
			return nil, fmt.Errorf("nested deeper than %d levels", MaxDepth)
		}
		v := &Value{Kind: Array}
		if t == '{' {
			v.Kind = Object
		}
		for d.More() {
			if v.Kind == Object {
				k, err := d.Token()
				if err != nil {
					return nil, err
				}
				v.Keys = append(v.Keys, k.(string))
			}
			item, err := parseValue(d, depth+1)
			if err != nil {
				return nil, err
			}
			v.Items = append(v.Items, item)
		}
		if _, err := d.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		return v, nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}
