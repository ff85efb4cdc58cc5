package starlark

import (
	"encoding/json"
	"math/big"
	"strconv"

	"go.starlark.net/starlark"

	"github.com/sandboxd/sandboxd/runtimes/script"
)

// fromInput builds the Starlark value of a JSON input, as json.decode
// does: null is None, a number written without a fraction or exponent is
// an int (of any size), any other a float; arrays are lists, objects
// dicts in their order.
func fromInput(v *script.Value) starlark.Value {
	switch v.Kind {
	case script.Bool:
		return starlark.Bool(v.Bool)
	case script.Number:
		if v.IsInteger() {
			if n, ok := new(big.Int).SetString(v.Number, 10); ok {
				return starlark.MakeBigInt(n)
			}
		}
		return starlark.Float(v.Float())
	case script.String:
		return starlark.String(v.String)
	case script.Array:
		items := make([]starlark.Value, len(v.Items))
		for i, item := range v.Items {
			items[i] = fromInput(item)
		}
		return starlark.NewList(items)
	case script.Object:
		d := starlark.NewDict(len(v.Keys))
		for i, k := range v.Keys {
			_ = d.SetKey(starlark.String(k), fromInput(v.Items[i]))
		}
		return d
	}
	return starlark.None
}

// toJSON writes the snippet's value: lists, tuples, sets and ranges are
// arrays, dicts objects in their order (string keys as they are; int,
// float, bool and None keys as text, as Python's json.dumps writes them).
// Other values (functions, modules) are left out of dicts and null
// elsewhere.
func (s *Session) toJSON(v starlark.Value) (json.RawMessage, *script.Error) {
	s.enc.Reset()
	w := writer{enc: &s.enc}
	if err := w.value(v); err != nil {
		return nil, err
	}
	return append(json.RawMessage(nil), s.enc.Bytes()...), nil
}

type writer struct {
	enc  *script.Encoder
	path []any // the containers being written, for script.NestingError
}

// data says v has a JSON form.
func data(v starlark.Value) bool {
	switch v.(type) {
	case starlark.NoneType, starlark.Bool, starlark.Int, starlark.Float, starlark.String, starlark.Bytes,
		*starlark.Dict, *starlark.Set, starlark.Indexable:
		return true
	}
	return false
}

func (w *writer) value(v starlark.Value) *script.Error {
	e := w.enc
	switch x := v.(type) {
	case starlark.NoneType:
		e.Null()
	case starlark.Bool:
		e.Bool(bool(x))
	case starlark.Int:
		e.Integer(x.String())
	case starlark.Float:
		e.Number(float64(x))
	case starlark.String:
		e.String(string(x))
	case starlark.Bytes:
		e.String(string(x))
	case *starlark.Dict:
		return w.container(x, func() *script.Error { return w.dict(x) })
	case *starlark.Set:
		return w.container(x, func() *script.Error { return w.set(x) })
	case starlark.Indexable: // list, tuple, range
		return w.container(x, func() *script.Error { return w.indexable(x) })
	default:
		e.Null()
	}
	return nil
}

// container writes a list, tuple, range, set or dict. The path holds the
// mutable ones, which a cycle must go through, and for the others (a
// tuple is a slice: no map key) their depth, which nothing else equals.
func (w *writer) container(v starlark.Value, write func() *script.Error) *script.Error {
	var key any = len(w.path)
	switch v.(type) {
	case *starlark.List, *starlark.Dict, *starlark.Set:
		key = v
	}
	if err := script.Cycle(w.path, key); err != nil {
		return err
	}
	w.path = append(w.path, key)
	defer func() { w.path = w.path[:len(w.path)-1] }()
	return write()
}

func (w *writer) indexable(x starlark.Indexable) *script.Error {
	if err := w.enc.BeginArray(); err != nil {
		return script.NestingError(w.path)
	}
	for i := range x.Len() {
		if err := w.value(x.Index(i)); err != nil {
			return err
		}
	}
	w.enc.EndArray()
	return nil
}

func (w *writer) set(x *starlark.Set) *script.Error {
	if err := w.enc.BeginArray(); err != nil {
		return script.NestingError(w.path)
	}
	it := x.Iterate()
	defer it.Done()
	var item starlark.Value
	for it.Next(&item) {
		if err := w.value(item); err != nil {
			return err
		}
	}
	w.enc.EndArray()
	return nil
}

func (w *writer) dict(d *starlark.Dict) *script.Error {
	if err := w.enc.BeginObject(); err != nil {
		return script.NestingError(w.path)
	}
	for _, kv := range d.Items() {
		if !data(kv[1]) {
			continue
		}
		var name string
		switch k := kv[0].(type) {
		case starlark.String:
			name = string(k)
		case starlark.Int:
			name = k.String()
		case starlark.Float:
			name = string(script.AppendNumber(nil, float64(k)))
		case starlark.Bool:
			name = strconv.FormatBool(bool(k))
		case starlark.NoneType:
			name = "null"
		default:
			return script.Errorf("the value cannot be converted to JSON: a dict key is a " + k.Type())
		}
		w.enc.Key(name)
		if err := w.value(kv[1]); err != nil {
			return err
		}
	}
	w.enc.EndObject()
	return nil
}
