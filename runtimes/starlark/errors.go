package starlark

import (
	"errors"
	"strings"

	"go.starlark.net/resolve"
	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"github.com/sandboxd/sandboxd/runtimes/script"
)

// scriptError describes a syntax error, a resolver error (an undefined
// name…) or an evaluation error, with the position of the innermost
// frame in snippet code and the traceback as the text.
func scriptError(err error) *script.Error {
	var serr syntax.Error
	var rerr resolve.ErrorList
	var eerr *starlark.EvalError
	switch {
	case errors.As(err, &serr):
		return positioned(serr.Pos, serr.Msg, serr.Error())
	case errors.As(err, &rerr) && len(rerr) > 0:
		var text strings.Builder
		for i, e := range rerr {
			if i > 0 {
				text.WriteByte('\n')
			}
			text.WriteString(e.Error())
		}
		return positioned(rerr[0].Pos, rerr[0].Msg, text.String())
	case errors.As(err, &eerr):
		text := eerr.Backtrace()
		msg := text[strings.LastIndexByte(text, '\n')+1:] // "Error: …" or "Error in f: …"
		for i := len(eerr.CallStack) - 1; i >= 0; i-- {
			if pos := eerr.CallStack[i].Pos; pos.Filename() == fileName {
				return script.NewError(msg, int(pos.Line), int(pos.Col), text)
			}
		}
		return script.NewError(msg, 0, 0, text)
	}
	return script.Errorf(err.Error())
}

func positioned(pos syntax.Position, msg, text string) *script.Error {
	return script.NewError(pos.String()+": "+msg, int(pos.Line), int(pos.Col), text)
}
