// Package starlark runs Starlark snippets with go.starlark.net, keeping
// one interpreter's globals from one evaluation to the next, as its REPL
// does.
//
// The value of a snippet is its last statement's when that is an
// expression (as the Python and Starlark REPLs print it), None otherwise.
// See runtimes/README.md for the value, input and error rules.
package starlark

import (
	"encoding/json"
	"io"

	starlarkjson "go.starlark.net/lib/json"
	starlarkmath "go.starlark.net/lib/math"
	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"github.com/sandboxd/sandboxd/runtimes/script"
)

// fileName names the snippet in messages: "snippet:1:5: …".
const fileName = "snippet"

// options are the dialect: the REPL's (set, while, if/for/while at the
// top level, globals rebound from one snippet to the next). Recursion
// stays off, as the Starlark spec has it: a function that calls itself is
// an error at once, so no recursion can be deep.
var options = &syntax.FileOptions{
	Set:             true,
	While:           true,
	TopLevelControl: true,
	GlobalReassign:  true,
}

// Session is one Starlark interpreter. Not safe for concurrent use.
type Session struct {
	thread  *starlark.Thread
	globals starlark.StringDict
	enc     script.Encoder
	guard   script.Guard
}

// New makes a session whose print writes to stdout; a nil writer
// discards. The modules json and math are predeclared.
func New(stdout io.Writer) *Session {
	if stdout == nil {
		stdout = io.Discard
	}
	thread := &starlark.Thread{
		Name: fileName,
		Print: func(_ *starlark.Thread, msg string) {
			_, _ = io.WriteString(stdout, msg+"\n")
		},
	}
	return &Session{thread: thread, guard: script.Guard{Interpreter: "Starlark"}, globals: starlark.StringDict{
		"json": starlarkjson.Module,
		"math": starlarkmath.Module,
	}}
}

// Eval runs code with the global `input` set to input (JSON; nil is
// null) and returns the snippet's value as JSON.
func (s *Session) Eval(code string, input json.RawMessage) (json.RawMessage, *script.Error) {
	return script.Eval(s, code, input)
}

// EvalInput is Eval with the input already parsed.
func (s *Session) EvalInput(code string, input *script.Value) (json.RawMessage, *script.Error) {
	return s.guard.Run(func() (json.RawMessage, *script.Error) { return s.eval(code, input) })
}

func (s *Session) eval(code string, input *script.Value) (json.RawMessage, *script.Error) {
	s.globals["input"] = fromInput(input)
	f, err := options.Parse(fileName, code, 0)
	if err != nil {
		return nil, scriptError(err)
	}
	// The last expression statement is evaluated apart, for its value;
	// the statements before it run as a REPL chunk on the globals.
	var last syntax.Expr
	if n := len(f.Stmts); n > 0 {
		if e, ok := f.Stmts[n-1].(*syntax.ExprStmt); ok {
			last = e.X
			f.Stmts = f.Stmts[:n-1]
		}
	}
	// A snippet that is one expression (the usual notebook cell) has no
	// chunk to run: compiling and calling an empty one cost about a
	// fifth of evaluating `1+1`.
	if len(f.Stmts) > 0 {
		if err := starlark.ExecREPLChunk(f, s.thread, s.globals); err != nil {
			return nil, scriptError(err)
		}
	}
	result := starlark.Value(starlark.None)
	if last != nil {
		if result, err = starlark.EvalExprOptions(options, s.thread, last, s.globals); err != nil {
			return nil, scriptError(err)
		}
	}
	return s.toJSON(result)
}
