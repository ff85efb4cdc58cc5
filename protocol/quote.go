package protocol

import (
	"strconv"
	"unicode/utf8"
)

// MaxQuotedBytes is the most of a name, id or string from the parent or a
// guest that an error message repeats: a function name of megabytes is
// not echoed back whole (the exact value, where it is useful, is in the
// error's data).
const MaxQuotedBytes = 64

// Quote is s as an error message shows it: in Go's quoted syntax, so that
// control characters (ESC), bidi and other format characters, and invalid
// UTF-8 are escaped (`\x1b`, `\u202e`) and cannot restyle or reorder the
// text a client puts in its exception; cut to its first MaxQuotedBytes
// bytes on a rune boundary, with "…" after the closing quote where it was
// cut.
func Quote(s string) string {
	return QuoteN(s, MaxQuotedBytes)
}

// QuoteN is Quote with n bytes of s at most instead of MaxQuotedBytes,
// for values a message shows longer (a file path).
func QuoteN(s string, n int) string {
	cut := CutUTF8(s, n)
	q := strconv.Quote(cut)
	if len(cut) < len(s) {
		q += "…"
	}
	return q
}

// Escape is Quote without the quotes, for ids and field names a message
// shows bare: plain text (an instance id, a field name) comes back as it
// is.
func Escape(s string) string {
	cut := CutUTF8(s, MaxQuotedBytes)
	q := strconv.Quote(cut)
	q = q[1 : len(q)-1]
	if len(cut) < len(s) {
		q += "…"
	}
	return q
}

// MaxMessageBytes bounds the message of every error the sidecar answers:
// a message longer (one that repeats a long value a check did not cut) is
// cut to it on a rune boundary, with "…" (BoundMessage).
const MaxMessageBytes = 4096

// BoundMessage is msg cut to MaxMessageBytes (CutUTF8) with "…" where it
// was cut.
func BoundMessage(msg string) string {
	return Cut(msg, MaxMessageBytes)
}

// Cut is s cut to at most n bytes on a rune boundary (CutUTF8), with "…"
// where it was cut; s itself when it fits.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return CutUTF8(s, n) + "…"
}

// CutUTF8 returns the longest prefix of s of at most n bytes that does
// not end inside a UTF-8 sequence.
func CutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// IncompleteUTF8Tail is how many bytes at the end of p begin a UTF-8
// sequence that more bytes could complete (0 to 3): cutting them off
// leaves p ending between characters, as a piece of a stream that goes
// on must.
func IncompleteUTF8Tail(p []byte) int {
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(p[i]) {
			if !utf8.FullRune(p[i:]) {
				return len(p) - i
			}
			return 0
		}
	}
	return 0
}

// Bounded is s cut to MaxQuotedBytes (CutUTF8) with "…" where it was cut,
// unescaped: for data fields, which JSON escapes.
func Bounded(s string) string {
	cut := CutUTF8(s, MaxQuotedBytes)
	if len(cut) < len(s) {
		return cut + "…"
	}
	return s
}
