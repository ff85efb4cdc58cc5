package rpc

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/sandboxd/sandboxd/internal/jsonscan"
)

// The reader of params.go reads what encoding/json reads, for every
// valid input: objects (duplicate and escaped keys) and arrays.

func FuzzShapeRead(f *testing.F) {
	for _, s := range []string{`{}`, `{"wat":"x"}`, `{"wat":"a","wat":"b"}`, `{"\u0077at":"x"}`, `{ "id" : "s" , "path":[1,{"a":"}"}] }`,
		`{"wat":{"nested":"{\"}"}}`, `{"id":null,"wat":true}`, `{"x":1}`, `{"wat":1e400}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want map[string]json.RawMessage
		if json.Unmarshal(data, &want) != nil || want == nil {
			return
		}
		for k, v := range want {
			if isNull(v) && slices.Contains(moduleShape.names, k) {
				delete(want, k) // a known member given null is absent
			}
		}
		var m members
		err := moduleShape.read(data, &m)
		got := map[string]json.RawMessage{}
		for i, name := range moduleShape.names {
			if m.values[i] != nil {
				got[name] = m.values[i]
			}
		}
		for k := range want {
			switch k {
			case "wat", "wasm", "id", "path":
			default:
				if err == nil {
					t.Fatalf("moduleShape.read(%q) accepted the unknown field %q", data, k)
				}
				return
			}
		}
		if err != nil {
			t.Fatalf("moduleShape.read(%q): %v", data, err)
		}
		if len(got) != len(want) {
			t.Fatalf("moduleShape.read(%q) = %q, encoding/json reads %q", data, got, want)
		}
		for k, v := range want {
			if !jsonEqual(got[k], v) {
				t.Fatalf("moduleShape.read(%q)[%q] = %s, encoding/json reads %s", data, k, got[k], v)
			}
		}
	})
}

func FuzzElements(f *testing.F) {
	for _, s := range []string{`[]`, `[1,2]`, ` [ "a,b" , {"c":[3,4]}, null, -1.5e3 ] `, `[[],[[]],"]"]`, `[1e400,-0.0e-999]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want []json.RawMessage
		if json.Unmarshal(data, &want) != nil || want == nil {
			return
		}
		got := jsonscan.Elements(data)
		if len(got) != len(want) {
			t.Fatalf("Elements(%q) = %q, encoding/json reads %q", data, got, want)
		}
		for i := range want {
			if !jsonEqual(got[i], want[i]) {
				t.Fatalf("Elements(%q)[%d] = %s, encoding/json reads %s", data, i, got[i], want[i])
			}
		}
	})
}
