package js

import (
	"io"
	"strings"

	"github.com/dop251/goja"

	"github.com/sandboxd/sandboxd/runtimes/script"
)

// installConsole defines the global console: log, info and debug write a
// line to stdout, warn and error to stderr.
func (s *Session) installConsole() {
	console := s.vm.NewObject()
	for _, m := range []struct {
		name string
		w    io.Writer
	}{{"log", s.stdout}, {"info", s.stdout}, {"debug", s.stdout}, {"warn", s.stderr}, {"error", s.stderr}} {
		_ = console.Set(m.name, func(call goja.FunctionCall) goja.Value {
			s.print(m.w, call.Arguments)
			return goja.Undefined()
		})
	}
	s.vm.Set("console", console)
}

// print writes the arguments separated by spaces, then a newline: strings
// as they are, functions as [Function: name], errors as String(error),
// other objects as JSON (String(value) if they have no JSON form), other
// values as String(value).
func (s *Session) print(w io.Writer, args []goja.Value) {
	var b strings.Builder
	for i, v := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(s.inspect(v))
	}
	b.WriteByte('\n')
	_, _ = io.WriteString(w, b.String())
}

func (s *Session) inspect(v goja.Value) string {
	obj, ok := v.(*goja.Object)
	if !ok {
		return v.String()
	}
	if _, ok := goja.AssertFunction(obj); ok {
		if name := obj.Get("name").String(); name != "" {
			return "[Function: " + name + "]"
		}
		return "[Function (anonymous)]"
	}
	if obj.ClassName() == "Error" {
		return obj.String()
	}
	var enc script.Encoder
	w := writer{vm: s.vm, enc: &enc}
	if err := w.value(w.resolve(obj, "")); err != nil {
		return obj.String()
	}
	return string(enc.Bytes())
}
