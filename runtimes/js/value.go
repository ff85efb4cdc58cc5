package js

import (
	"encoding/json"
	"math/big"
	"strconv"

	"github.com/dop251/goja"

	"github.com/sandboxd/sandboxd/runtimes/script"
)

// fromInput builds the JavaScript value JSON.parse would: numbers are
// doubles, members are own data properties in their order (so a member
// named "__proto__" is a property, not the prototype).
func (s *Session) fromInput(v *script.Value) goja.Value {
	switch v.Kind {
	case script.Bool:
		return s.vm.ToValue(v.Bool)
	case script.Number:
		return s.vm.ToValue(v.Float())
	case script.String:
		return s.vm.ToValue(v.String)
	case script.Array:
		items := make([]any, len(v.Items))
		for i, item := range v.Items {
			items[i] = s.fromInput(item)
		}
		return s.vm.NewArray(items...)
	case script.Object:
		obj := s.vm.NewObject()
		for i, k := range v.Keys {
			_ = obj.DefineDataProperty(k, s.fromInput(v.Items[i]), goja.FLAG_TRUE, goja.FLAG_TRUE, goja.FLAG_TRUE)
		}
		return obj
	}
	return goja.Null()
}

// toJSON converts the snippet's value by JSON.stringify's rules (toJSON
// methods are called, boxed primitives unboxed; undefined, functions and
// symbols are null in arrays and left out of objects), with these
// differences: such a value at the top is null, a BigInt is written as its
// digits, and a cycle or nesting past script.MaxDepth is a script error.
func (s *Session) toJSON(v goja.Value) (json.RawMessage, *script.Error) {
	s.enc.Reset()
	w := writer{vm: s.vm, enc: &s.enc}
	var serr *script.Error
	if err := s.catch(func() { serr = w.value(w.resolve(v, "")) }); err != nil {
		return nil, s.scriptError(err)
	}
	if serr != nil {
		return nil, serr
	}
	return append(json.RawMessage(nil), s.enc.Bytes()...), nil
}

// catch runs f, which may run JavaScript (toJSON, getters), and returns
// what it threw, catchable or not (a stack overflow, an interrupt).
func (s *Session) catch(f func()) (err error) {
	defer func() {
		if x := recover(); x != nil {
			if e, ok := x.(error); ok && isUncatchable(e) {
				err = e
				return
			}
			panic(x)
		}
	}()
	if ex := s.vm.Try(f); ex != nil {
		return ex
	}
	return nil
}

// isUncatchable tells by its type (scriptError says why not errors.As)
// whether err is one that JavaScript cannot catch.
func isUncatchable(err error) bool {
	switch err.(type) {
	case *goja.StackOverflowError, *goja.InterruptedError:
		return true
	}
	return false
}

type writer struct {
	vm   *goja.Runtime
	enc  *script.Encoder
	path []*goja.Object // the objects being written, for script.NestingError
}

// resolve is what JSON.stringify writes for v, the member key of its
// holder: what its toJSON method returns, unboxed.
func (w *writer) resolve(v goja.Value, key string) goja.Value {
	if obj, ok := v.(*goja.Object); ok {
		if toJSON, ok := goja.AssertFunction(obj.Get("toJSON")); ok {
			r, err := toJSON(obj, w.vm.ToValue(key))
			if err != nil {
				panic(err) // for guard
			}
			v = r
		}
	}
	return unbox(v)
}

// skipped says a resolved v is left out of an object (and null
// elsewhere).
func skipped(v goja.Value) bool {
	if v == nil || goja.IsUndefined(v) {
		return true
	}
	if _, ok := v.(*goja.Symbol); ok {
		return true
	}
	_, fn := goja.AssertFunction(v)
	return fn
}

// value writes a resolved v.
func (w *writer) value(v goja.Value) *script.Error {
	e := w.enc
	if skipped(v) || goja.IsNull(v) {
		e.Null()
		return nil
	}
	obj, ok := v.(*goja.Object)
	if !ok {
		switch x := v.Export().(type) {
		case bool:
			e.Bool(x)
		case int64:
			e.Integer(strconv.FormatInt(x, 10))
		case float64:
			e.Number(x)
		case string:
			e.String(x)
		case *big.Int:
			e.Integer(x.String())
		default:
			e.Null()
		}
		return nil
	}
	if err := script.Cycle(w.path, obj); err != nil {
		return err
	}
	w.path = append(w.path, obj)
	defer func() { w.path = w.path[:len(w.path)-1] }()
	if obj.ClassName() == "Array" {
		return w.array(obj)
	}
	return w.object(obj)
}

func (w *writer) array(obj *goja.Object) *script.Error {
	e := w.enc
	if err := e.BeginArray(); err != nil {
		return script.NestingError(w.path)
	}
	n := obj.Get("length").ToInteger()
	for i := int64(0); i < n; i++ {
		k := strconv.FormatInt(i, 10)
		if err := w.value(w.resolve(obj.Get(k), k)); err != nil {
			return err
		}
	}
	e.EndArray()
	return nil
}

func (w *writer) object(obj *goja.Object) *script.Error {
	e := w.enc
	if err := e.BeginObject(); err != nil {
		return script.NestingError(w.path)
	}
	for _, k := range obj.Keys() {
		v := w.resolve(obj.Get(k), k)
		if skipped(v) {
			continue
		}
		e.Key(k)
		if err := w.value(v); err != nil {
			return err
		}
	}
	e.EndObject()
	return nil
}

// unbox turns new Number(1), new String("a"), new Boolean(true) and
// Object(1n) into their primitive values, as JSON.stringify does.
func unbox(v goja.Value) goja.Value {
	obj, ok := v.(*goja.Object)
	if !ok {
		return v
	}
	switch obj.ClassName() {
	case "Number", "String", "Boolean", "BigInt":
		if valueOf, ok := goja.AssertFunction(obj.Get("valueOf")); ok {
			if r, err := valueOf(obj); err == nil {
				return r
			}
		}
	}
	return v
}
