package protocol

import (
	"strings"
	"testing"
)

func TestParseLanguage(t *testing.T) {
	for _, l := range Languages() {
		if got, err := ParseLanguage(string(l)); err != nil || got != l {
			t.Errorf("ParseLanguage(%q) = %q, %v", l, got, err)
		}
	}
	for name, want := range map[string]string{
		"javascript": `JavaScript is "js"`,
		"Python":     `Starlark, a dialect of Python, is "starlark"`,
		"JS":         "give one of js, lua, starlark",
		"":           `unknown language ""`,
		"\x1b[2J":    `"\x1b[2J"`,
	} {
		_, err := ParseLanguage(name)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLanguage(%q): %v, want an error containing %q", name, err, want)
		}
	}
}

func TestCheckEvalInput(t *testing.T) {
	nested := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, ok := range []string{"", "null", `{"a":[1,2,{"b":"]]]["}]}`, `"[[[[\"\\"`, nested(MaxEvalInputDepth),
		`{"x":` + nested(MaxEvalInputDepth-1) + `}`} {
		if err := CheckEvalInput([]byte(ok)); err != nil {
			t.Errorf("CheckEvalInput(%.40q): %v", ok, err)
		}
	}
	for in, want := range map[string]string{
		"{":                           "not one JSON value",
		"1 2":                         "not one JSON value",
		"nul":                         "not one JSON value",
		nested(MaxEvalInputDepth + 1): "nested deeper than 1000 levels",
		`{"x":` + nested(MaxEvalInputDepth) + `}`: "nested deeper than 1000 levels",
	} {
		if err := CheckEvalInput([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckEvalInput(%.40q): %v, want %q", in, err, want)
		}
	}
}
