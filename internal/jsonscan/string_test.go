package jsonscan

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzString: String reads every valid string literal as encoding/json
// does: escapes, surrogates (pairs, halves, reversed), invalid UTF-8.
func FuzzString(f *testing.F) {
	for _, s := range []string{`"plain"`, `"a\nb\t\"q\"\\\/"`, `"\u0041\u00e9\u4e16"`, `"\ud83d\ude00"`,
		`"\ud83d"`, `"\ud83d\u0041"`, `"\ude00\ud83d"`, `"\ud83dx"`, "\"caf\xc3\xa9\"", "\"bad \xff\xfe utf8\"",
		"\"\xed\xa0\x80\"", `""`, `"\\u0041"`, `"tail\\"`, `0`, ``, `"\u12`, `"\`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, lit []byte) {
		lit = bytes.TrimSpace(lit) // the walkers hand over values without the space around them
		_ = String(lit)            // any bytes: it finishes (the package's promise), meaning nothing
		var want string
		if json.Unmarshal(lit, &want) != nil || len(lit) == 0 || lit[0] != '"' {
			return // not a valid string literal
		}
		if got := String(lit); got != want {
			t.Fatalf("String(%q) = %q, encoding/json reads %q", lit, got, want)
		}
	})
}
