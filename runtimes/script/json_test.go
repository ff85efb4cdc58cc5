package script

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
)

// canonical renders v as JSON text with object members last-wins and
// sorted, numbers as written: what encoding/json's UseNumber decoding
// renders the same way (canonicalAny).
func canonical(v *Value) string {
	switch v.Kind {
	case Null:
		return "null"
	case Bool:
		return fmt.Sprint(v.Bool)
	case Number:
		return v.Number
	case String:
		b, _ := json.Marshal(v.String)
		return string(b)
	case Array:
		parts := make([]string, len(v.Items))
		for i, item := range v.Items {
			parts[i] = canonical(item)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	members := map[string]string{}
	for i, k := range v.Keys {
		members[k] = canonical(v.Items[i])
	}
	return sortedObject(members)
}

func canonicalAny(x any) string {
	switch x := x.(type) {
	case nil:
		return "null"
	case bool:
		return fmt.Sprint(x)
	case json.Number:
		return string(x)
	case string:
		b, _ := json.Marshal(x)
		return string(b)
	case []any:
		parts := make([]string, len(x))
		for i, item := range x {
			parts[i] = canonicalAny(item)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	members := map[string]string{}
	for k, item := range x.(map[string]any) {
		members[k] = canonicalAny(item)
	}
	return sortedObject(members)
}

func sortedObject(members map[string]string) string {
	keys := make([]string, 0, len(members))
	for k := range members {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		b.WriteString(members[k])
	}
	b.WriteByte('}')
	return b.String()
}

// checkLikeEncodingJSON fails unless ParseInput accepts exactly what
// encoding/json accepts, with the same value.
func checkLikeEncodingJSON(t *testing.T, text []byte) {
	t.Helper()
	got, err := ParseInput(text)
	if len(bytes.TrimSpace(text)) == 0 {
		if err != nil || got.Kind != Null {
			t.Fatalf("%q: %v, %v; want null", text, got, err)
		}
		return
	}
	d := json.NewDecoder(bytes.NewReader(text))
	d.UseNumber()
	var want any
	werr := d.Decode(&want)
	if werr == nil && d.More() || werr == nil && !json.Valid(text) {
		werr = fmt.Errorf("data after the value")
	}
	if werr != nil && strings.Contains(werr.Error(), "exceeded max depth") {
		return // encoding/json's own bound (10,000) is not ours
	}
	if (err == nil) != (werr == nil) {
		t.Fatalf("%q: ParseInput %v, encoding/json %v", text, err, werr)
	}
	if err == nil {
		if g, w := canonical(got), canonicalAny(want); g != w {
			t.Fatalf("%q:\n got %s\nwant %s", text, g, w)
		}
	}
}

func TestParseInputLikeEncodingJSON(t *testing.T) {
	for _, text := range []string{
		``, ` `, `0`, `-0`, `1.5e3`, `-1E-7`, `01`, `1.`, `.5`, `-`, `1e`, `1e+`, `+1`, `0x10`, `Infinity`, `NaN`,
		`true`, `false`, `null`, `tru`, `nul`, `True`, `"a"`, `"\u00e9\n\t\"\\\/\b\f\r"`, `"\ud83d\ude00"`, `"\ud83d"`,
		`"\ud83dx"`, `"\ude00\ud83d"`, `"\ud83d\u0041"`, `"\u12"`, `"\u12g4"`, `"\x"`, "\"a\x01\"", "\"\xff\xfe\"", "\"é\xc3\"",
		`"unterminated`, `[]`, `[1,]`, `[,1]`, `[1 2]`, `{}`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `{"a":1,"a":2}`, `{"b":[{"c":null}],"a":""}`,
		`[1]x`, `1 2`, "\x00", "1\x00", `{"a":1}}`, `[[[]]]`, ` [ 1 , { "k" : [ true ] } ] `, `"` + strings.Repeat("é", 100) + `"`,
	} {
		checkLikeEncodingJSON(t, []byte(text))
	}
}

func FuzzParseInput(f *testing.F) {
	for _, seed := range []string{`{"a":[1,"x",null,true]}`, `"\ud83d\ude00"`, `-1.5e-3`, `[{}]`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, text []byte) { checkLikeEncodingJSON(t, text) })
}

func TestParseRequestLikeEncodingJSON(t *testing.T) {
	for req, want := range map[string]string{
		`{"code":"1+1"}`: `1+1 null`,
		` { "input" : [1, {"a": "b"}] , "code" : "x\n" } `: "x\n [1,{\"a\":\"b\"}]",
		`{"code":"a","code":"b"}`:                          `b null`,
		`{"code":"a","code":null}`:                         `error: request: "code" is missing`,
		`{"code":"a","input":1,"input":2}`:                 `a 2`,
		`{}`:                                               `error: request: "code" is missing`,
		`{"code":"a",}`:                                    `error: request: invalid character`,
		`{"code":"a"`:                                      `error: request: unexpected EOF`,
		`[]`:                                               `error: request: invalid character`,
		``:                                                 `error: request: unexpected EOF`,
		`{"code":"a","input":}`:                            `error: input: invalid character`,
		`{"code":"a","input":[1,}`:                         `error: input: invalid character`,
		`{"code":"a","memoryBytes":33554432}`:              `a null`,
		`{"code":"a","memoryBytes":-1}`:                    `error: request: "memoryBytes": invalid character '-'`,
		`{"code":"a","memoryBytes":1.5}`:                   `error: request: "memoryBytes": not an unsigned integer`,
		`{"code":"a","memoryBytes":18446744073709551616}`: `error: request: "memoryBytes": larger than`,
	} {
		r, input, err := ParseRequest([]byte(req))
		got := ""
		if err != nil {
			got = "error: " + err.Error()
		} else {
			got = r.Code + " " + canonical(input)
		}
		if !strings.HasPrefix(got, want) {
			t.Errorf("%q:\n got %s\nwant %s", req, got, want)
		}
	}
}
