package protocol

import (
	"bytes"
	"encoding/json"
	"testing"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/; `go test` runs them.

// FuzzDecodeArg: arbitrary JSON never panics DecodeArg; what it accepts
// has the parameter's type and survives EncodeValue + DecodeArg bit for bit.
func FuzzDecodeArg(f *testing.F) {
	f.Add([]byte(`42`), byte(0))
	f.Fuzz(func(t *testing.T, raw []byte, tyByte byte) {
		ty := ValueTypes()[int(tyByte)%len(ValueTypes())]
		v, err := DecodeArg(json.RawMessage(raw), ty)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if v.Type != ty {
			t.Fatalf("decoded type %s, want %s", v.Type, ty)
		}
		if (ty == I32 || ty == F32) && v.Bits>>32 != 0 {
			t.Fatalf("%s value with bits %#x", ty, v.Bits)
		}
		enc, err := json.Marshal(EncodeValue(v))
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		back, err := DecodeArg(enc, ty)
		if err != nil || back != v {
			t.Fatalf("%s %#x encodes as %s, which decodes to %#x, %v", ty, v.Bits, enc, back.Bits, err)
		}
	})
}

// FuzzCheckEvalInput: CheckEvalInput's byte scan agrees with
// encoding/json's reading of the same input: it accepts exactly the empty
// input and the single JSON values nested at most MaxEvalInputDepth deep.
func FuzzCheckEvalInput(f *testing.F) {
	for _, s := range []string{"", "null", `{"a":[1,"]]\"[["]}`, `[[[]]]`, `"\\"`, "1 2", "{", `[{"x":[{}]}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		err := CheckEvalInput(input)
		want := len(input) == 0 || (json.Valid(input) && jsonDepth(input) <= MaxEvalInputDepth)
		if (err == nil) != want {
			t.Fatalf("CheckEvalInput(%q) = %v; encoding/json reads it as valid %v, %d deep", input, err, json.Valid(input), jsonDepth(input))
		}
	})
}

// jsonDepth is the deepest nesting of arrays and objects in valid JSON, as
// encoding/json's tokens show it.
func jsonDepth(input []byte) int {
	dec := json.NewDecoder(bytes.NewReader(input))
	depth, deepest := 0, 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return deepest
		}
		switch tok {
		case json.Delim('['), json.Delim('{'):
			depth++
			deepest = max(deepest, depth)
		case json.Delim(']'), json.Delim('}'):
			depth--
		}
	}
}
