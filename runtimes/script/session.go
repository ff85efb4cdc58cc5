package script

import (
	"encoding/json"
	"fmt"
)

// Eval parses input (JSON; nil is null) and runs code in s: what each
// Session's Eval does. An input that is not JSON is a script error here,
// with no position (Handle refuses it before any session sees it).
func Eval(s Session, code string, input json.RawMessage) (json.RawMessage, *Error) {
	v, err := ParseInput(input)
	if err != nil {
		return nil, Errorf(err.Error())
	}
	return s.EvalInput(code, v)
}

// Guard runs a session's evaluations, so that a Go panic inside an
// interpreter (a bug in it) ends the session instead of the guest: that
// evaluation returns a fatal error (Error.Fatal), and so does every later
// one. An evaluation that returns a fatal error itself (the runtime could
// not set it up) ends the session the same way. The zero Guard is ready;
// Interpreter names the language in the message.
type Guard struct {
	Interpreter string
	err         *Error
}

// Run calls eval unless an earlier evaluation ended the session.
func (g *Guard) Run(eval func() (json.RawMessage, *Error)) (value json.RawMessage, serr *Error) {
	if g.err != nil {
		return nil, g.err
	}
	defer func() {
		if x := recover(); x != nil {
			value, serr = nil, Fatalf(fmt.Sprintf("internal error in the %s interpreter: %v", g.Interpreter, x))
		}
		if serr != nil && serr.Fatal {
			g.err = serr
		}
	}()
	return eval()
}

// Warm evaluates a snippet that defines nothing (code, with a null
// input) in a new session, for the interpreter to build what it builds
// lazily at its first evaluation (a guest does it in _initialize, the
// interpreter's start, never charged to a snippet). What it leaves is
// the global input set to null, which every evaluation sets anew.
func Warm(s Session, code string) {
	_, _ = s.EvalInput(code, &Value{Kind: Null})
}
