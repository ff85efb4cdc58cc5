package protocol

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/limits"
)

// Snippets (docs/snippets.md): code in an interpreted language, run by
// one of sandboxd's interpreter runtimes (runtimes/, each an Extism plugin
// the engine runs like any other), one-shot or in a session that keeps
// its state. This file holds the languages, an evaluation's result on the
// wire, and the plain-data shapes the sidecar speaks to its engine in.

// MethodEval evaluates a snippet: one-shot in a fresh interpreter, or in
// a session (docs/protocol.md, "Snippets").
const MethodEval = "eval"

// Language names an interpreter runtime.
type Language string

// The languages. Each is exactly one name: "javascript" or "python" are
// not accepted (ParseLanguage says which name to use), so a request, a
// session and a result always spell a language the same way.
const (
	LanguageJS       Language = "js"       // JavaScript (ES2015+), goja
	LanguageLua      Language = "lua"      // Lua 5.1, gopher-lua
	LanguageStarlark Language = "starlark" // Starlark, the Python dialect, go.starlark.net
)

// Languages returns every language, in the order the docs list them.
func Languages() []Language {
	return []Language{LanguageJS, LanguageLua, LanguageStarlark}
}

// languageHints are names people try for a language, and what to say.
var languageHints = map[string]string{
	"javascript": `JavaScript is "js"`,
	"ecmascript": `JavaScript is "js"`,
	"node":       `JavaScript is "js"`,
	"python":     `Python is not available; Starlark, a dialect of Python, is "starlark"`,
	"py":         `Python is not available; Starlark, a dialect of Python, is "starlark"`,
	"star":       `Starlark is "starlark"`,
	"luajit":     `Lua (5.1) is "lua"`,
}

// ParseLanguage returns the language named name. Anything else is an
// error that lists the languages (and, for a name people try, says which
// one it meant).
func ParseLanguage(name string) (Language, error) {
	for _, l := range Languages() {
		if name == string(l) {
			return l, nil
		}
	}
	names := make([]string, 0, 3)
	for _, l := range Languages() {
		names = append(names, string(l))
	}
	msg := fmt.Sprintf("unknown language %s: give one of %s", Quote(name), strings.Join(names, ", "))
	if hint, ok := languageHints[strings.ToLower(name)]; ok {
		msg += " (" + hint + ")"
	}
	return "", fmt.Errorf("%s", msg)
}

// MaxEvalInputDepth is the deepest nesting of arrays and objects an
// evaluation's input may have: the runtimes build it into their own
// values recursively, and refuse more (runtimes/script.MaxDepth).
const MaxEvalInputDepth = 1000

// CheckEvalInput checks an evaluation's input before any runtime sees
// it: empty (no input, the snippet's input is null) or one JSON value,
// nested at most MaxEvalInputDepth levels.
func CheckEvalInput(input []byte) error {
	if len(input) == 0 {
		return nil
	}
	if !json.Valid(input) {
		return fmt.Errorf("input: not one JSON value")
	}
	depth, inString, escaped := 0, false, false
	for _, c := range input {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > MaxEvalInputDepth {
				return fmt.Errorf("input: nested deeper than %d levels", MaxEvalInputDepth)
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return nil
}

// The bounds of a script error's texts, in bytes (the runtimes cut them
// there, on a character boundary, and sandboxd again): the message is one
// line, the text the language's own rendering with its stack trace.
const (
	MaxScriptMessageBytes = 1 << 10
	MaxScriptTextBytes    = 4 << 10
)

// EvalResult is an evaluation's result on the wire (and what `sandboxd
// eval --json` prints): the snippet's value as JSON, what it consumed,
// and its stdout and stderr (each at most outputBytes).
type EvalResult struct {
	Language        Language        `json:"language"`
	Value           json.RawMessage `json:"value"`
	FuelConsumed    uint64          `json:"fuelConsumed"`
	PeakMemoryBytes uint64          `json:"peakMemoryBytes"`
	ElapsedMicros   int64           `json:"elapsedMicros"`
	QueuedMicros    int64           `json:"queuedMicros"`
	Stdout          Bytes           `json:"stdout"`
	Stderr          Bytes           `json:"stderr"`
	OutputTruncated bool            `json:"outputTruncated"`
}

// EvalResultOf is the wire form of an evaluation's outcome.
func EvalResultOf(lang Language, o *EvalOutcome) EvalResult {
	r := EvalResult{Language: lang, Value: o.Value, FuelConsumed: o.FuelConsumed, PeakMemoryBytes: o.PeakMemoryBytes,
		ElapsedMicros: o.Elapsed.Microseconds(), QueuedMicros: o.Queued.Microseconds(),
		Stdout: Bytes{}, Stderr: Bytes{}}
	if o.Output != nil {
		r.Stdout, r.Stderr, r.OutputTruncated = o.Output.Stdout, o.Output.Stderr, o.Output.Truncated
	}
	return r
}

// EvalParams are the params of `eval` as a client sends them
// (docs/protocol.md, "Snippets"): Language for a one-shot evaluation, or
// Instance for one in a session; Input any JSON value (nil: none, the
// snippet's input is null); Limits by their wire names (in a session only
// fuel, timeoutMs, logBytes and outputBytes).
type EvalParams struct {
	Language Language          `json:"language,omitempty"`
	Instance string            `json:"instance,omitempty"`
	Code     string            `json:"code"`
	Input    json.RawMessage   `json:"input,omitempty"`
	Limits   map[string]uint64 `json:"limits,omitempty"`
}

// SessionParams are the params of `instantiate` that make a session.
type SessionParams struct {
	Language Language          `json:"language"`
	Limits   map[string]uint64 `json:"limits,omitempty"` // the run limits; fuel, timeoutMs, logBytes, outputBytes each evaluation's defaults
}

// SessionResult is the result of `instantiate` with a language: the new
// session's instance id, and what starting its interpreter consumed.
type SessionResult struct {
	Instance        string   `json:"instance"`
	Language        Language `json:"language"`
	FuelConsumed    uint64   `json:"fuelConsumed"`
	PeakMemoryBytes uint64   `json:"peakMemoryBytes"`
	ElapsedMicros   int64    `json:"elapsedMicros"`
	QueuedMicros    int64    `json:"queuedMicros"`
}

// Snippet is what every evaluation has, one-shot or in a session: the
// code, its input and where its output goes.
type Snippet struct {
	Code string
	// Input is any JSON value, the snippet's global `input`; nil: none
	// (input is null). CheckEvalInput says what is accepted.
	Input json.RawMessage
	// Output receives the snippet's stdout and stderr in pieces as it
	// writes them (console.log, print), before the evaluation returns.
	// Calls never overlap and must not block.
	Output func(stream string, data []byte)
}

// Eval is one evaluation in a fresh interpreter: nothing of an earlier
// evaluation is visible.
type Eval struct {
	Language Language
	Snippet
	// Limits fence the evaluation. A zero field takes the language's
	// default (docs/snippets.md, "Limits"); a field set is the caller's
	// and must lie within the maximums.
	Limits limits.Limits
}

// SessionRequest makes a session: an interpreter that keeps its state
// (variables, functions) from one evaluation to the next.
type SessionRequest struct {
	Language Language
	// Limits, as Eval's (a zero field takes the language's default): the
	// memory cap and the other store limits hold for the session's life;
	// fuel, timeoutMs, logBytes and outputBytes are each evaluation's
	// defaults.
	Limits limits.Limits
}

// SessionEval is one evaluation in a session.
type SessionEval struct {
	Snippet
	Limits CallLimits // a zero field takes the session's
}

// EvalOutcome is what an evaluation that returned a value produces.
type EvalOutcome struct {
	Value   json.RawMessage // the snippet's value, one JSON value
	Usage                   // of the evaluation alone: never the interpreter's start
	Elapsed time.Duration   // the evaluation
	Queued  time.Duration   // in a session: waited for the evaluations before it
	Output  *Output         // the snippet's stdout and stderr, each at most outputBytes
}

// SessionInfo describes a new session.
type SessionInfo struct {
	ID       string // the session's instance id
	Language Language
	Usage    // what starting the interpreter consumed
	Elapsed  time.Duration
}
