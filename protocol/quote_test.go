package protocol

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestQuote(t *testing.T) {
	for _, c := range []struct{ in, quote, escape string }{
		{"greet", `"greet"`, `greet`},
		{"", `""`, ``},
		{"inst-\u202e\x1b[31m\u2066", `"inst-\u202e\x1b[31m\u2066"`, `inst-\u202e\x1b[31m\u2066`},
		{"a\x00b\nc\xffd", `"a\x00b\nc\xffd"`, `a\x00b\nc\xffd`},
		{strings.Repeat("x", 64), `"` + strings.Repeat("x", 64) + `"`, strings.Repeat("x", 64)},
		{strings.Repeat("x", 65), `"` + strings.Repeat("x", 64) + `"…`, strings.Repeat("x", 64) + "…"},
		// é is two bytes: the cut does not split it.
		{strings.Repeat("x", 62) + "é", `"` + strings.Repeat("x", 62) + `é"`, strings.Repeat("x", 62) + "é"},
		{strings.Repeat("x", 63) + "é", `"` + strings.Repeat("x", 63) + `"…`, strings.Repeat("x", 63) + "…"},
	} {
		if got := Quote(c.in); got != c.quote {
			t.Errorf("Quote(%q) = %s, want %s", c.in, got, c.quote)
		}
		if got := Escape(c.in); got != c.escape {
			t.Errorf("Escape(%q) = %s, want %s", c.in, got, c.escape)
		}
	}
	long := strings.Repeat("\u202e", 100_000)
	if q := Quote(long); len(q) > 2*MaxQuotedBytes+8 {
		t.Errorf("Quote of 300 KB is %d bytes", len(q))
	}
	if b := Bounded(long); !utf8.ValidString(b) || len(b) > MaxQuotedBytes+len("…") {
		t.Errorf("Bounded = %q", b)
	}
}

func TestIncompleteUTF8Tail(t *testing.T) {
	for _, tc := range []struct {
		p    string
		tail int
	}{{"", 0}, {"a", 0}, {"\xc3", 1}, {"\xc3\xa9", 0}, {"\xe2\x82", 2}, {"\xf0\x9f\x98", 3}, {"\xf0\x9f\x98\x80", 0}, {"\xff", 0}, {"\x82", 0}} {
		if got := IncompleteUTF8Tail([]byte(tc.p)); got != tc.tail {
			t.Errorf("IncompleteUTF8Tail(%q) = %d, want %d", tc.p, got, tc.tail)
		}
	}
}
