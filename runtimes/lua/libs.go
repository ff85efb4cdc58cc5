package lua

import (
	"io"
	"strings"
	"time"

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
	math := L.GetGlobal(lua.MathLibName).(*lua.LTable)
	math.RawSetString("random", L.NewFunction(s.mathRandom))
	math.RawSetString("randomseed", L.NewFunction(s.mathRandomseed))

	full := L.GetGlobal(lua.OsLibName).(*lua.LTable)
	os := L.NewTable()
	for _, name := range []string{"time", "date", "difftime"} {
		os.RawSetString(name, full.RawGetString(name))
	}
	os.RawSetString("clock", L.NewFunction(s.osClock))
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

// osClock is os.clock: the seconds since the session's instance began
// (StartInstance; natively, New), on the monotonic clock. WASI gives a
// guest no CPU-time clock, so in a session the time between evaluations
// counts too. (gopher-lua's own counts from its package's init: in a
// pre-initialised guest that ran when the snapshot was made, a reading of
// another instance's monotonic clock, so it could be negative.)
func (s *Session) osClock(L *lua.LState) int {
	L.Push(lua.LNumber(time.Since(s.clockZero).Seconds()))
	return 1
}

// mathRandom is math.random on the session's own source (script.Random),
// with gopher-lua's semantics: no argument, a float in [0, 1); m, an
// integer in [1, m]; m and n, an integer in [m, n]; an empty interval is
// the caller's error.
func (s *Session) mathRandom(L *lua.LState) int {
	if L.GetTop() == 0 {
		L.Push(lua.LNumber(s.random.Float64()))
		return 1
	}
	lo, hi := int64(1), int64(L.CheckInt(1))
	if L.GetTop() >= 2 {
		lo, hi = hi, int64(L.CheckInt(2))
	}
	if hi < lo {
		L.ArgError(1, "interval is empty")
		return 0
	}
	L.Push(lua.LNumber(lo + s.random.Int64N(hi-lo+1)))
	return 1
}

// mathRandomseed is math.randomseed: the session's sequence becomes the
// seed's.
func (s *Session) mathRandomseed(L *lua.LState) int {
	s.random.Seed(L.CheckInt64(1))
	return 0
}
