package sandboxd

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sandboxd/sandboxd/protocol"
)

// Snippets (docs/snippets.md, docs/protocol.md "Snippets"): code in
// JavaScript, Lua or Starlark evaluated by the sidecar's interpreter
// runtimes, one-shot (Eval) or in a session that keeps its state
// (NewSession). The value of a snippet is JSON, kept as it came
// (EvalResult.Value).

// Language names a snippet language.
type Language = protocol.Language

// The snippet languages.
const (
	LanguageJS       = protocol.LanguageJS       // JavaScript (ES2015+), goja
	LanguageLua      = protocol.LanguageLua      // Lua 5.1, gopher-lua
	LanguageStarlark = protocol.LanguageStarlark // Starlark, the Python dialect
)

// EvalParams are the params of a one-shot `eval`: Language, Code, and
// optionally Input (one JSON value, the snippet's global input) and
// Limits (by their wire names; unset ones take the language's defaults).
type EvalParams = protocol.EvalParams

// EvalResult is what `eval` answers: the snippet's value as JSON, what it
// consumed, its stdout and stderr.
type EvalResult = protocol.EvalResult

// SessionParams are the params of a session's `instantiate`: its
// Language and its Limits (the memory cap for its life; fuel, timeoutMs,
// logBytes and outputBytes each evaluation's defaults).
type SessionParams = protocol.SessionParams

// SessionResult is what a session's `instantiate` answers.
type SessionResult = protocol.SessionResult

// Eval calls `eval`: p.Code evaluated in a fresh interpreter of
// p.Language. h.Output receives what the snippet prints, as it prints it
// (concatenated per stream: the result's Stdout and Stderr). A snippet's
// own failure is a *ScriptError; a fence's, an *Error of its kind. If ctx
// ends first the evaluation is cancelled, as a run is.
func (c *Client) Eval(ctx context.Context, p EvalParams, h RunHandlers) (*EvalResult, error) {
	if c.closing.Load() {
		return nil, ErrClosed
	}
	var res EvalResult
	if err := c.call(ctx, protocol.MethodEval, p, &res, h, cancelGrace); err != nil {
		return nil, typedError(err)
	}
	return &res, nil
}

// Session is an interpreter in the sidecar that keeps its state
// (variables, functions) from one evaluation to the next: an instance of
// the sidecar's table, released by Close, evicted when idle, closed by a
// fence. Its methods are safe for concurrent use; its evaluations run one
// at a time, in the order the sidecar reads them.
type Session struct {
	c *Client
	// ID is the session's instance id.
	ID string
	// Language is the session's language.
	Language Language
	// Result is instantiate's answer: what starting the interpreter
	// consumed.
	Result *SessionResult
}

// NewSession calls `instantiate` with a language. If ctx ends first the
// start is cancelled and, as for Instantiate, a session whose answer
// comes late is released by the client. More sessions and instances than
// the sidecar's --max-instances is a *TooManyInstancesError.
func (c *Client) NewSession(ctx context.Context, p SessionParams) (*Session, error) {
	if c.closing.Load() {
		return nil, ErrClosed
	}
	var res SessionResult
	if err := c.call(ctx, protocol.MethodInstantiate, p, &res, RunHandlers{}, cancelGrace); err != nil {
		return nil, typedError(err)
	}
	return &Session{c: c, ID: res.Instance, Language: res.Language, Result: &res}, nil
}

// SessionEvalOptions are the optional parts of an evaluation in a session.
type SessionEvalOptions struct {
	// Input is one JSON value, the snippet's global input; nil: null.
	Input json.RawMessage
	// Limits may set fuel, timeoutMs, logBytes, outputBytes; unset ones
	// take the session's.
	Limits map[string]uint64
	// Output receives what the snippet prints, as RunHandlers.Output.
	Output func(seq int, stream string, data []byte)
}

// Eval evaluates code in the session. A script error is a *ScriptError
// and leaves the session as it was; a fence ends the evaluation with its
// kind and closes the session (InstanceClosed(err) is true), after which
// Eval fails with an *InstanceClosedError saying why.
func (s *Session) Eval(ctx context.Context, code string, o SessionEvalOptions) (*EvalResult, error) {
	return s.c.Eval(ctx, EvalParams{Instance: s.ID, Code: code, Input: o.Input, Limits: o.Limits}, RunHandlers{Output: o.Output})
}

// Close releases the session (`release`): an evaluation running is
// cancelled, those queued fail. Closing a session already closed also
// succeeds.
func (s *Session) Close(ctx context.Context) error {
	return typedError(s.c.Call(ctx, protocol.MethodRelease, protocol.ReleaseParams{Instance: s.ID}, nil))
}

// ScriptError is a snippet's own failure (kind script_error, code 13): a
// syntax error, an uncaught exception, Lua's error. A session stays open.
type ScriptError struct {
	Language Language
	Message  string // the language's one line
	Line     int    // 1-based; 0 when the language gives none
	Column   int
	Text     string // the language's own rendering, with its stack trace
	Err      *Error
}

func (e *ScriptError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("sandboxd: %s script error at line %d, column %d: %s", e.Language, e.Line, e.Column, e.Message)
	}
	return fmt.Sprintf("sandboxd: %s script error: %s", e.Language, e.Message)
}

func (e *ScriptError) Unwrap() error { return e.Err }

// scriptError is e as a *ScriptError.
func scriptError(e *Error) *ScriptError {
	var d struct {
		Language protocol.Language `json:"language"`
		Message  string            `json:"message"`
		Line     int               `json:"line"`
		Column   int               `json:"column"`
		Text     string            `json:"text"`
	}
	_ = json.Unmarshal(e.Data, &d)
	return &ScriptError{Language: d.Language, Message: d.Message, Line: d.Line, Column: d.Column, Text: d.Text, Err: e}
}
