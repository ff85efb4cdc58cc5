package protocol

import (
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
