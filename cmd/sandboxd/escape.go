package main

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Guest text (log lines, and the import and export names that error
// messages quote) is untrusted: printed raw, it could move the cursor,
// retitle or clear the terminal, or end a line and print a fake
// "result:" line. The CLI's text output therefore escapes:
//
//   - C0 controls U+0000–U+001F (ESC, CR, LF, BS, ...) and DEL U+007F: \t,
//     \n, \r, or \xNN;
//   - C1 controls U+0080–U+009F (U+009B is CSI, U+0085 NEL): \u0085;
//   - line and paragraph separators U+2028, U+2029;
//   - bidirectional controls U+061C, U+200E, U+200F, U+202A–U+202E and
//     U+2066–U+2069 (the "Trojan Source" set, which reorders what is shown);
//   - bytes that are not UTF-8: \xNN;
//   - the backslash itself, as \\, so the escaped text reads back
//     unambiguously.
//
// Everything else, printable Unicode included, passes unchanged, and one
// guest line stays one terminal line.

// unsafeRune reports whether r must not reach a terminal raw.
func unsafeRune(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == 0x2028, r == 0x2029:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// escapeText returns s safe to print on a terminal (see above).
func escapeText(s string) string {
	clean := true
	for _, r := range s {
		if r == '\\' || r == utf8.RuneError || unsafeRune(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80 && unsafeRune(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// escapeJSON rewrites, inside encoded JSON, every rune that encoding/json
// leaves raw but a terminal would act on (DEL, C1 controls, bidirectional
// controls) as a \uXXXX escape. Such runes can only occur inside JSON
// strings, so the result decodes to the same value.
func escapeJSON(js []byte) []byte {
	if !bytes.ContainsFunc(js, unsafeRune) {
		return js
	}
	out := make([]byte, 0, len(js)+16)
	for len(js) > 0 {
		r, size := utf8.DecodeRune(js)
		if unsafeRune(r) {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, js[:size]...)
		}
		js = js[size:]
	}
	return out
}
