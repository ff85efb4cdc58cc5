package lua

import (
	"errors"
	"regexp"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"

	"github.com/sandboxd/sandboxd/runtimes/script"
)

// syntaxError describes what Load returned: a parse error (with a line
// and column) or a compile error (a line).
func syntaxError(err error) *script.Error {
	var api *lua.ApiError
	if errors.As(err, &api) && api.Cause != nil {
		err = api.Cause
	}
	text := strings.TrimSpace(err.Error())
	var perr *parse.Error
	if errors.As(err, &perr) {
		line, col := perr.Pos.Line, perr.Pos.Column
		msg := chunkName + ":" + strconv.Itoa(line) + ": " + perr.Message + " near '" + perr.Token + "'"
		if line == parse.EOF {
			line, col = 0, 0
			msg = chunkName + ": " + perr.Message + " at the end of the snippet"
		}
		return script.NewError(msg, line, col, text)
	}
	var cerr *lua.CompileError
	if errors.As(err, &cerr) {
		return script.NewError(chunkName+":"+strconv.Itoa(cerr.Line)+": "+cerr.Message, cerr.Line, 0, text)
	}
	return script.NewError(text, 0, 0, text)
}

// where finds "snippet:LINE:" in a message.
var where = regexp.MustCompile(`(?:^|\s)` + chunkName + `:(\d+):`)

// runtimeError describes what PCall returned: the error value (a string
// such as "snippet:3: attempt to call a nil value", or any value given to
// error) and the traceback.
func (s *Session) runtimeError(err error) *script.Error {
	var api *lua.ApiError
	if !errors.As(err, &api) {
		return script.Errorf(err.Error())
	}
	msg := s.describe(api.Object)
	line := 0
	if m := where.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
	}
	text := msg
	if api.StackTrace != "" {
		text += "\n" + api.StackTrace
	}
	return script.NewError(msg, line, 0, text)
}

// describe is an error value as the lua command shows it: strings and
// numbers as they are, values with __tostring through it, others named by
// their type.
func (s *Session) describe(v lua.LValue) string {
	switch v := v.(type) {
	case lua.LString, lua.LNumber:
		return v.String()
	}
	L := s.L
	if L.GetMetaField(v, "__tostring") != lua.LNil {
		base := L.GetTop()
		defer L.SetTop(base)
		L.Push(L.NewFunction(func(L *lua.LState) int {
			L.Push(L.ToStringMeta(L.Get(1)))
			return 1
		}))
		L.Push(v)
		if L.PCall(1, 1, nil) == nil {
			if str, ok := L.Get(-1).(lua.LString); ok {
				return string(str)
			}
		}
	}
	return "(error object is a " + v.Type().String() + " value)"
}
