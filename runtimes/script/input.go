package script

import (
	"bytes"
	"errors"
	"fmt"
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
	r := reader{b: raw}
	v, err := r.value(0)
	if err == nil && r.peek() != end {
		err = errors.New("data after the JSON value")
	}
	if err != nil {
		return nil, fmt.Errorf("input: %w", err)
	}
	return v, nil
}
