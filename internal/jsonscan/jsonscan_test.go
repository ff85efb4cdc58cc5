package jsonscan

import (
	"encoding/json"
	"os"
	"strings"
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

// FuzzValid: Valid agrees with json.Valid on every input.
func FuzzValid(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, ` {"a":[1,-2.5e+3,true,false,null,"x\u00e9\n"]} `, `"\ud800"`, "\"\x01\"",
		`01`, `-`, `1.`, `1e`, `.5`, `{"a" 1}`, `{"a":1,}`, `[1,]`, `tru`, `nul`, `"\x"`, `"\u12g4"`, "\"\xff\"",
		`{"a":{"b":[{"c":{}}]}}`, `[[[[[[]]]]]]`, `"abc`, `{"a":1}x`, "\t\n\r 1 \t", ``, ` `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := Valid(data), json.Valid(data); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid says %v", data, got, want)
		}
	})
}

func TestValidDepth(t *testing.T) {
	for _, n := range []int{maxDepth - 1, maxDepth, maxDepth + 1} {
		deep := []byte(strings.Repeat("[", n) + strings.Repeat("]", n))
		if got, want := Valid(deep), json.Valid(deep); got != want {
			t.Errorf("depth %d: Valid %v, json.Valid %v", n, got, want)
		}
		obj := []byte(strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n))
		if got, want := Valid(obj), json.Valid(obj); got != want {
			t.Errorf("object depth %d: Valid %v, json.Valid %v", n, got, want)
		}
	}
}

// BenchmarkValid: a run of a 2.4 KB WAT text, by Valid and by json.Valid.
func BenchmarkValid(b *testing.B) {
	wat, err := os.ReadFile("../../testdata/wat/well_behaved.wat")
	if err != nil {
		b.Fatal(err)
	}
	text, _ := json.Marshal(string(wat))
	msg := []byte(`{"jsonrpc":"2.0","id":7,"method":"run","params":{"module":{"wat":` + string(text) + `},"function":"add","args":[1,2]}}`)
	for name, valid := range map[string]func([]byte) bool{"jsonscan": Valid, "encoding-json": json.Valid} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(msg)))
			for b.Loop() {
				if !valid(msg) {
					b.Fatal("invalid")
				}
			}
		})
	}
}

func TestLeadingMembers(t *testing.T) {
	deep := strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth)
	cases := []struct {
		in, keys, stopped string
	}{
		{`{"id":1,"params":` + deep + `,"z":2}`, `"id"=1 `, `"params"`},
		{` { "a" : "x" , "b":[1] } `, `"a"="x" "b"=[1] `, ""},
		{`{"a":1,"b":tru}`, `"a"=1 `, `"b"`},
		{`{"a":1 "b":2}`, `"a"=1 `, ""},
		{`{"a`, ``, ""},
		{`[1]`, ``, ""},
		{``, ``, ""},
		{`{"a":`, ``, `"a"`},
	}
	for _, c := range cases {
		var keys strings.Builder
		stopped := LeadingMembers([]byte(c.in), func(k, v []byte) { keys.WriteString(string(k) + "=" + string(v) + " ") })
		if keys.String() != c.keys || string(stopped) != c.stopped {
			t.Errorf("%.40q: members %q, stopped at %q; want %q, %q", c.in, keys.String(), stopped, c.keys, c.stopped)
		}
	}
}

func TestTrimSpace(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""}, {" \t\r\n", ""}, {" {} \n", "{}"}, {"\t[1, 2]\r\n", "[1, 2]"},
		{"\v{}", "\v{}"}, {"{}\f", "{}\f"}, {"\u00a0{}\u0085", "\u00a0{}\u0085"}, {" \v ", "\v"},
	} {
		if got := string(TrimSpace([]byte(c.in))); got != c.want {
			t.Errorf("TrimSpace(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
