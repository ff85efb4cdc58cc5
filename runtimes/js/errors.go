package js

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/dop251/goja"
	"github.com/dop251/goja/parser"

	"github.com/sandboxd/sandboxd/runtimes/script"
)

// scriptError describes what RunScript (or a conversion) returned.
//
// It tells the errors apart by their types, never with errors.As or
// Error(): (*goja.Exception).Unwrap asks whether the thrown value is a
// GoError (instanceof, then its "value" property) and Error() converts it
// to a string, and either runs the snippet's code (proxy traps, getters,
// toString) outside any catch, so what that code threw would reach the
// guard as an interpreter failure. A thrown value is described by thrown,
// which runs such code under catch.
func (s *Session) scriptError(err error) *script.Error {
	switch e := err.(type) {
	case parser.ErrorList:
		if len(e) > 0 {
			first := e[0]
			return script.NewError("SyntaxError: "+first.Message, first.Position.Line, first.Position.Column, "SyntaxError: "+e.Error())
		}
	case *goja.CompilerSyntaxError:
		line, col := compilePosition(e.CompilerError)
		return script.NewError("SyntaxError: "+e.Message, line, col, e.Error())
	case *goja.CompilerReferenceError:
		line, col := compilePosition(e.CompilerError)
		return script.NewError("ReferenceError: "+e.Message, line, col, e.Error())
	case *goja.StackOverflowError:
		const msg = "RangeError: Maximum call stack size exceeded"
		line, col := framePosition(e.Stack())
		return script.NewError(msg, line, col, msg+stackText(e.Stack()))
	case *goja.Exception:
		return s.thrown(e.Value(), e, "")
	}
	return script.Errorf(err.Error())
}

func compilePosition(e goja.CompilerError) (line, col int) {
	if e.File == nil {
		return 0, 0
	}
	p := e.File.Position(e.Offset)
	return p.Line, p.Column
}

// framePosition is where the innermost frame with a source position
// stood: in this snippet or one evaluated before it in the session.
func framePosition(stack []goja.StackFrame) (line, col int) {
	for i := range stack {
		if p := stack[i].Position(); p.Line > 0 {
			return p.Line, p.Column
		}
	}
	return 0, 0
}

// thrown describes a thrown (or rejected) value. ex, when there is one,
// gives the stack; a promise's rejection has only the value's own stack.
func (s *Session) thrown(v goja.Value, ex *goja.Exception, prefix string) *script.Error {
	msg := prefix + s.describe(v)
	var line, col int
	text := msg
	if ex != nil {
		line, col = framePosition(ex.Stack())
		text = msg + stackText(ex.Stack())
	} else if obj, ok := v.(*goja.Object); ok {
		var stack string
		if s.catch(func() {
			if st := obj.Get("stack"); st != nil && !goja.IsUndefined(st) {
				stack = st.String()
			}
		}) == nil && stack != "" {
			line, col = stackPosition(stack)
			text = prefix + strings.TrimRight(stack, "\n")
		}
	}
	return script.NewError(msg, line, col, text)
}

// stackText renders frames as goja does ("\n\tat f (snippet:1:5(3))"),
// the innermost first, as many as the text's bound can show.
// A run of the same frame (a recursion) is written once, with its count.
func stackText(stack []goja.StackFrame) string {
	var b bytes.Buffer
	var last []byte
	repeats := 0
	flush := func() {
		if repeats > 0 {
			fmt.Fprintf(&b, "\n\t[the frame above %d more times]", repeats)
			repeats = 0
		}
	}
	for i := range stack {
		if b.Len() > script.MaxTextBytes {
			break
		}
		var f bytes.Buffer
		stack[i].Write(&f)
		if bytes.Equal(f.Bytes(), last) {
			repeats++
			continue
		}
		flush()
		last = f.Bytes()
		b.WriteString("\n\tat ")
		b.Write(last)
	}
	flush()
	return b.String()
}

// describe is String(v), or a fallback if that throws.
func (s *Session) describe(v goja.Value) string {
	if v == nil {
		return "undefined"
	}
	var str string
	if err := s.catch(func() { str = v.String() }); err != nil {
		return "a value whose conversion to a string threw"
	}
	return str
}

var stackFrame = regexp.MustCompile(scriptName + `:(\d+):(\d+)`)

// stackPosition reads the first snippet position in an Error's stack.
func stackPosition(stack string) (line, col int) {
	m := stackFrame.FindStringSubmatch(stack)
	if m == nil {
		return 0, 0
	}
	line, _ = strconv.Atoi(m[1])
	col, _ = strconv.Atoi(m[2])
	return line, col
}
