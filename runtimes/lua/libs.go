package lua

import (
	"io"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// openLibs opens the libraries a snippet may use. gopher-lua's io, os,
// package and channel libraries reach files, processes, the environment
// and Go's scheduler; of them only what touches nothing is kept.
func (s *Session) openLibs() {
	L := s.L
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
		{lua.StringLibName, lua.OpenString},
		{lua.MathLibName, lua.OpenMath},
		{lua.CoroutineLibName, lua.OpenCoroutine},
		{lua.OsLibName, lua.OpenOs},
	} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	for _, name := range []string{"dofile", "loadfile", "_printregs", "module", "require"} {
		L.SetGlobal(name, lua.LNil)
	}
	L.SetGlobal("print", L.NewFunction(s.print))

	full := L.GetGlobal(lua.OsLibName).(*lua.LTable)
	os := L.NewTable()
	for _, name := range []string{"time", "clock", "date", "difftime"} {
		os.RawSetString(name, full.RawGetString(name))
	}
	L.SetGlobal(lua.OsLibName, os)

	io := L.NewTable()
	io.RawSetString("write", L.NewFunction(s.write))
	L.SetGlobal(lua.IoLibName, io)
}

// print is Lua's: its arguments through tostring, separated by tabs, then
// a newline.
func (s *Session) print(L *lua.LState) int {
	var b strings.Builder
	for i := 1; i <= L.GetTop(); i++ {
		if i > 1 {
			b.WriteByte('\t')
		}
		b.WriteString(L.ToStringMeta(L.Get(i)).String())
	}
	b.WriteByte('\n')
	_, _ = io.WriteString(s.stdout, b.String())
	return 0
}

// write is io.write: strings and numbers, as they are, nothing between.
func (s *Session) write(L *lua.LState) int {
	var b strings.Builder
	for i := 1; i <= L.GetTop(); i++ {
		switch v := L.Get(i).(type) {
		case lua.LString, lua.LNumber:
			b.WriteString(v.String())
		default:
			L.ArgError(i, "string expected, got "+v.Type().String())
		}
	}
	_, _ = io.WriteString(s.stdout, b.String())
	return 0
}
