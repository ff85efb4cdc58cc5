package lua

import (
	"encoding/json"
	"math"
	"sort"
	"strconv"

	lua "github.com/yuin/gopher-lua"

	"github.com/sandboxd/sandboxd/runtimes/script"
)

// fromInput builds the Lua value of a JSON input: null is nil (so a null
// in an array leaves a hole, and a null member is absent), numbers are
// Lua numbers (doubles), an array is a table 1..n marked as an array
// (its metatable), so that it stays an array when written back, even
// empty.
func (s *Session) fromInput(v *script.Value) lua.LValue {
	switch v.Kind {
	case script.Bool:
		return lua.LBool(v.Bool)
	case script.Number:
		return lua.LNumber(v.Float())
	case script.String:
		return lua.LString(v.String)
	case script.Array:
		t := s.L.CreateTable(len(v.Items), 0)
		for i, item := range v.Items {
			t.RawSetInt(i+1, s.fromInput(item))
		}
		t.Metatable = s.arrayMT
		return t
	case script.Object:
		t := s.L.CreateTable(0, len(v.Keys))
		for i, k := range v.Keys {
			t.RawSetString(k, s.fromInput(v.Items[i]))
		}
		return t
	}
	return lua.LNil
}

// toJSON writes the snippet's values: none is null, one is itself, more
// are an array.
func (s *Session) toJSON(results []lua.LValue) (json.RawMessage, *script.Error) {
	s.enc.Reset()
	w := writer{s: s}
	var err *script.Error
	switch len(results) {
	case 0:
		s.enc.Null()
	case 1:
		err = w.value(results[0])
	default:
		if err = s.enc.BeginArray(); err == nil {
			for _, v := range results {
				if err = w.value(v); err != nil {
					break
				}
			}
			s.enc.EndArray()
		}
	}
	if err != nil {
		return nil, err
	}
	return append(json.RawMessage(nil), s.enc.Bytes()...), nil
}

type writer struct {
	s    *Session
	path []*lua.LTable // the tables being written, for script.NestingError
}

// data says v has a JSON form; other values (functions, userdata,
// coroutines) are left out of objects and null elsewhere.
func data(v lua.LValue) bool {
	switch v.Type() {
	case lua.LTNil, lua.LTBool, lua.LTNumber, lua.LTString, lua.LTTable:
		return true
	}
	return false
}

func (w *writer) value(v lua.LValue) *script.Error {
	e := &w.s.enc
	switch x := v.(type) {
	case lua.LBool:
		e.Bool(bool(x))
	case lua.LNumber:
		e.Number(float64(x))
	case lua.LString:
		e.String(string(x))
	case *lua.LTable:
		return w.table(x)
	default:
		e.Null()
	}
	return nil
}

func (w *writer) table(t *lua.LTable) *script.Error {
	if err := script.Cycle(w.path, t); err != nil {
		return err
	}
	w.path = append(w.path, t)
	defer func() { w.path = w.path[:len(w.path)-1] }()

	var keys []lua.LValue
	maxIndex, count := 0, 0
	t.ForEach(func(k, v lua.LValue) {
		if n, ok := k.(lua.LNumber); ok && n >= 1 && float64(n) == math.Trunc(float64(n)) && n <= math.MaxInt32 {
			maxIndex = max(maxIndex, int(n))
			count++
		}
		keys = append(keys, k)
	})
	marked := t.Metatable == w.s.arrayMT
	if count == len(keys) && (marked && count > 0 || count > 0 && maxIndex == count) {
		return w.array(t, maxIndex)
	}
	if marked && len(keys) == 0 {
		return w.array(t, 0)
	}
	return w.object(t, keys)
}

// array writes t[1..n]; holes are null.
func (w *writer) array(t *lua.LTable, n int) *script.Error {
	e := &w.s.enc
	if err := e.BeginArray(); err != nil {
		return script.NestingError(w.path)
	}
	for i := 1; i <= n; i++ {
		if err := w.value(t.RawGetInt(i)); err != nil {
			return err
		}
	}
	e.EndArray()
	return nil
}

// object writes t's members in the order of their names: strings are
// names as they are, numbers and booleans are written as text.
func (w *writer) object(t *lua.LTable, keys []lua.LValue) *script.Error {
	e := &w.s.enc
	type member struct {
		name  string
		value lua.LValue
	}
	members := make([]member, 0, len(keys))
	for _, k := range keys {
		v := t.RawGet(k)
		if !data(v) {
			continue
		}
		var name string
		switch k := k.(type) {
		case lua.LString:
			name = string(k)
		case lua.LNumber:
			name = string(script.AppendNumber(nil, float64(k)))
		case lua.LBool:
			name = strconv.FormatBool(bool(k))
		default:
			return script.Errorf("the value cannot be converted to JSON: a table key is a " + k.Type().String())
		}
		members = append(members, member{name, v})
	}
	sort.SliceStable(members, func(i, j int) bool { return members[i].name < members[j].name })
	if err := e.BeginObject(); err != nil {
		return script.NestingError(w.path)
	}
	for _, m := range members {
		e.Key(m.name)
		if err := w.value(m.value); err != nil {
			return err
		}
	}
	e.EndObject()
	return nil
}
