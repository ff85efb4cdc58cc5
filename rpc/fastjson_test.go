package rpc

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/sandboxd/sandboxd/internal/jsonscan"
)

// The walkers of fastjson.go read what encoding/json reads, for every
// valid input: strings (escapes, surrogates, invalid UTF-8), objects
// (duplicate and escaped keys) and arrays.

func FuzzValidString(f *testing.F) {
	for _, s := range []string{`"plain"`, `"a\nb\t\"q\"\\\/"`, `"\u0041\u00e9\u4e16"`, `"\ud83d\ude00"`,
		`"\ud83d"`, `"\ud83d\u0041"`, `"\ude00\ud83d"`, `"\ud83dx"`, "\"caf\xc3\xa9\"", "\"bad \xff\xfe utf8\"",
		"\"\xed\xa0\x80\"", `""`, `"\\u0041"`, `"tail\\"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, lit []byte) {
		lit = bytes.TrimSpace(lit) // the walkers hand over values without the space around them
		var want string
		if json.Unmarshal(lit, &want) != nil || len(lit) == 0 || lit[0] != '"' {
			return // not a valid string literal
		}
		if got := validString(lit); got != want {
			t.Fatalf("validString(%q) = %q, encoding/json reads %q", lit, got, want)
		}
	})
}

func FuzzValidObject(f *testing.F) {
	for _, s := range []string{`{}`, `{"wat":"x"}`, `{"wat":"a","wat":"b"}`, `{"\u0077at":"x"}`, `{ "id" : "s" , "path":[1,{"a":"}"}] }`,
		`{"wat":{"nested":"{\"}"}}`, `{"id":null,"wat":true}`, `{"x":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want map[string]json.RawMessage
		if json.Unmarshal(data, &want) != nil || want == nil {
			return
		}
		for k, v := range want {
			if isNull(v) && contains([]string{"wat", "wasm", "id", "path"}, k) {
				delete(want, k) // a known member given null is absent
			}
		}
		got, err := validObject(data, "module", "wat", "wasm", "id", "path")
		for k := range want {
			switch k {
			case "wat", "wasm", "id", "path":
			default:
				if err == nil {
					t.Fatalf("validObject(%q) accepted the unknown field %q", data, k)
				}
				return
			}
		}
		if err != nil {
			t.Fatalf("validObject(%q): %v", data, err)
		}
		if len(got) != len(want) {
			t.Fatalf("validObject(%q) = %q, encoding/json reads %q", data, got, want)
		}
		for k, v := range want {
			if !sameJSON(t, got[k], v) {
				t.Fatalf("validObject(%q)[%q] = %s, encoding/json reads %s", data, k, got[k], v)
			}
		}
	})
}

func FuzzElements(f *testing.F) {
	for _, s := range []string{`[]`, `[1,2]`, ` [ "a,b" , {"c":[3,4]}, null, -1.5e3 ] `, `[[],[[]],"]"]`} {
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
			if !sameJSON(t, got[i], want[i]) {
				t.Fatalf("Elements(%q)[%d] = %s, encoding/json reads %s", data, i, got[i], want[i])
			}
		}
	})
}

func sameJSON(t *testing.T, a, b []byte) bool {
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%q is not a JSON value: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%q is not a JSON value: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}
