package sandbox

// Guards of callExport (capi.go): the C types it declares by hand have the
// pinned headers' layouts, the wasmtime-go types it reads and builds
// through unsafe have the fields it assumes, and values of every type
// cross it bit for bit.

import (
	"context"
	"math"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/limits"
)

// TestCallLayoutsMatchHeaders compares the pinned headers' layouts with
// capi.h's declarations.
func TestCallLayoutsMatchHeaders(t *testing.T) {
	got := headerFigures(t, "sizeof(wasmtime_func_t)", "sizeof(wasmtime_instance_t)", "sizeof(wasmtime_val_t)",
		"offsetof(wasmtime_val_t, of)", "sizeof(wasmtime_extern_t)", "offsetof(wasmtime_extern_t, of)",
		"offsetof(wasmtime_extern_t, of.func)")
	t.Logf("headers: func %d, instance %d, val %d (of at %d), extern %d (of at %d, func at %d)", got[0], got[1], got[2], got[3], got[4], got[5], got[6])
	switch {
	case got[0] != sizeofWasmtimeFunc:
		t.Errorf("wasmtime_func_t: %d bytes in the headers, %d in capi.h", got[0], sizeofWasmtimeFunc)
	case got[1] != sizeofWasmtimeInstance:
		t.Errorf("wasmtime_instance_t: %d bytes in the headers, %d in capi.h", got[1], sizeofWasmtimeInstance)
	case got[2] != sizeofWasmtimeVal || got[3] != offsetofValOf:
		t.Errorf("wasmtime_val_t: %d bytes (of at %d) in the headers, %d (of at %d) in capi.h: the arrays sbx_call passes would be misread",
			got[2], got[3], sizeofWasmtimeVal, offsetofValOf)
	case got[4] > sizeofWasmtimeExtern || got[5] != offsetofExternOf || got[6] != got[5]:
		t.Errorf("wasmtime_extern_t: %d bytes (of at %d, func at %d) in the headers; capi.h has %d (of at %d)",
			got[4], got[5], got[6], sizeofWasmtimeExtern, offsetofExternOf)
	}

	// The functions sbx_call declares match the headers' prototypes.
	capi, inc := capiC(t), wasmtimeIncludeDir(t)
	for _, fn := range []struct{ name, header string }{
		{"wasmtime_store_context", "store.h"},
		{"wasmtime_instance_export_get", "instance.h"},
		{"wasmtime_extern_delete", "extern.h"},
		{"wasmtime_func_call", "func.h"},
	} {
		want := cPrototype(t, readFile(t, filepath.Join(inc, "wasmtime", fn.header)), fn.name, nil)
		if got := cPrototype(t, capi, fn.name, nil); got != want {
			t.Errorf("capi.h declares\n\t%s\nbut the pinned header declares\n\t%s", got, want)
		}
	}
}

// TestCallGoLayouts: instancePtr reads a wasmtime.Instance as its
// wasmtime_instance_t, and wrapTrap and wrapError write the C pointer as
// the only field of wasmtime.Trap and wasmtime.Error.
func TestCallGoLayouts(t *testing.T) {
	in := reflect.TypeFor[wasmtime.Instance]()
	if in.NumField() != 1 || in.Field(0).Offset != 0 || in.Size() != sizeofWasmtimeInstance {
		t.Errorf("wasmtime.Instance: %d fields, %d bytes; instancePtr assumes one field of the %d-byte wasmtime_instance_t", in.NumField(), in.Size(), sizeofWasmtimeInstance)
	}
	fn := reflect.TypeFor[wasmtime.Func]()
	if fn.NumField() != 1 || fn.Field(0).Offset != 0 || fn.Size() != sizeofWasmtimeFunc {
		t.Errorf("wasmtime.Func: %d fields, %d bytes; exportedFunc assumes one field of the %d-byte wasmtime_func_t", fn.NumField(), fn.Size(), sizeofWasmtimeFunc)
	}
	for _, ty := range []reflect.Type{reflect.TypeFor[wasmtime.Trap](), reflect.TypeFor[wasmtime.Error]()} {
		if ty.NumField() != 1 || ty.Field(0).Name != "_ptr" || ty.Field(0).Type.Kind() != reflect.Pointer {
			t.Errorf("%s: want one field _ptr, a pointer (wrapTrap, wrapError)", ty)
		}
	}
}

// TestCallExportValues: every value type, NaN payloads and -0 included,
// crosses callExport unchanged in both directions, and a trap comes back
// as the *wasmtime.Trap classify reads.
func TestCallExportValues(t *testing.T) {
	e, err := NewEngine(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	m, _, err := e.Compile(ctx, Source{WAT: `(module
	  (func (export "multi") (param i32 i64 f32 f64) (result f64 f32 i64 i32)
	    local.get 3 local.get 2 local.get 1 local.get 0)
	  (func (export "trap") (result i32) unreachable))`})
	if err != nil {
		t.Fatal(err)
	}
	args := []Value{ValueI32(-7), ValueI64(math.MinInt64 + 3), {Type: F32, Bits: 0x7fc00001}, {Type: F64, Bits: 0x8000000000000000}}
	res, err := e.Run(ctx, Request{Module: m, Function: "multi", Args: args, Limits: limits.Defaults()})
	if err != nil {
		t.Fatal(err)
	}
	want := []Value{args[3], args[2], args[1], args[0]}
	if !reflect.DeepEqual(res.Values, want) {
		t.Errorf("multi returned %v, want %v", res.Values, want)
	}
	_, err = e.Run(ctx, Request{Module: m, Function: "trap", Limits: limits.Defaults()})
	if se, ok := err.(*Error); !ok || se.Kind != KindTrap || se.TrapCode != "unreachable" {
		t.Errorf("trap: %v, want a trap with code unreachable", err)
	}
}

// TestCallExportHostPanic: a host function's panic comes out of
// callExport with its own value, as from wasmtime-go's Call, and leaves
// nothing behind in the store.
func TestCallExportHostPanic(t *testing.T) {
	eng := wasmtime.NewEngineWithConfig(wasmtimeConfig())
	wasm, err := wasmtime.Wat2Wasm(`(module (import "m" "boom" (func $boom))
	  (func (export "run") call $boom)
	  (func (export "ok") (result i32) i32.const 5))`)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := wasmtime.NewModule(eng, wasm)
	if err != nil {
		t.Fatal(err)
	}
	store := wasmtime.NewStore(eng)
	defer store.Close()
	if err := store.SetFuel(1 << 40); err != nil {
		t.Fatal(err)
	}
	store.SetEpochDeadline(1 << 40)
	boom := wasmtime.NewFunc(store, wasmtime.NewFuncType(nil, nil), func(*wasmtime.Caller, []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
		panic("the host's own words")
	})
	inst, err := wasmtime.NewInstance(store, mod, []wasmtime.AsExtern{boom})
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if p := recover(); p != "the host's own words" {
				t.Errorf("recovered %v, want the host function's panic value", p)
			}
		}()
		callExport(store, inst, "run", nil, 0)
		t.Error("callExport returned")
	}()
	// Nothing left behind: wasmtime-go's next call on the store is clean.
	if out, err := inst.GetFunc(store, "ok").Call(store); err != nil || out != int32(5) {
		t.Errorf("next call: %v, %v", out, err)
	}

	// A host function that only says the words is an error, not a panic.
	liar := wasmtime.NewFunc(store, wasmtime.NewFuncType(nil, nil), func(*wasmtime.Caller, []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
		return nil, wasmtime.NewTrap("go panicked")
	})
	inst2, err := wasmtime.NewInstance(store, mod, []wasmtime.AsExtern{liar})
	if err != nil {
		t.Fatal(err)
	}
	if _, err, ok := callExport(store, inst2, "run", nil, 0); !ok || err == nil {
		t.Errorf("a trap saying \"go panicked\": ok %v, err %v", ok, err)
	}
}
