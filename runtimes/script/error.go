// Package script holds what the interpreter runtimes share: the script
// error, the JSON form of inputs and values, and the plugin request that
// the guests answer. It knows no interpreter.
package script

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds of an error's texts, in bytes. A snippet controls what it throws,
// so nothing it says reaches the host unbounded.
const (
	MaxMessageBytes = 1 << 10
	MaxTextBytes    = 4 << 10
)

// Error is a script error: the snippet failed to parse, threw, or produced
// a value JSON cannot carry. Line and Column are 1-based; 0 when unknown.
type Error struct {
	// Message is one line: the error's kind and message, e.g.
	// "ReferenceError: x is not defined".
	Message string `json:"message"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	// Text is the language's own rendering of the error, with its stack
	// trace or traceback where it has one.
	Text string `json:"text"`
	// Fatal says the session cannot go on: not the snippet's error but
	// the runtime's (a Go panic inside the interpreter, or the runtime
	// unable to set up an evaluation), after which every evaluation in
	// the session fails the same way (Guard). The host closes the
	// session with the message as the reason.
	Fatal bool `json:"fatal,omitempty"`
}

func (e *Error) Error() string {
	if e.Line == 0 {
		return e.Message
	}
	return "line " + strconv.Itoa(e.Line) + ": " + e.Message
}

// NewError builds an Error whose texts are cut to their bounds and made
// valid UTF-8.
func NewError(message string, line, column int, text string) *Error {
	if line < 0 {
		line = 0
	}
	if column < 0 {
		column = 0
	}
	return &Error{
		Message: Bound(firstLine(message), MaxMessageBytes),
		Line:    line,
		Column:  column,
		Text:    Bound(text, MaxTextBytes),
	}
}

// Errorf is an error with no position whose text is its message.
func Errorf(message string) *Error { return NewError(message, 0, 0, message) }

// Fatalf is Errorf for an error after which the session cannot go on
// (Error.Fatal).
func Fatalf(message string) *Error {
	e := Errorf(message)
	e.Fatal = true
	return e
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return strings.TrimRight(s[:i], "\r")
	}
	return s
}

// ellipsis ends a text that was cut.
const ellipsis = "…"

// Bound returns s as valid UTF-8 (invalid bytes become U+FFFD) of at most
// max bytes; a longer s is cut on a character boundary and ends in "…".
func Bound(s string, max int) string {
	if len(s) > 4*max { // never scan more than we could keep
		s = s[:4*max]
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= max {
		return s
	}
	cut := max - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
