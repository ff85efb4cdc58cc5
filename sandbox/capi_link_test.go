package sandbox

// Guards of instantiateLinked (capi.go): the wasmtime functions and types
// capi.h declares by hand for it match the pinned headers, and the
// wasmtime-go types it reads and builds through unsafe have the fields it
// assumes.

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// linkHeaderLayout returns, from the pinned headers, the sizes of
// wasmtime_extern_t, wasmtime_memory_t, wasmtime_global_t and
// wasmtime_table_t, the offset of an extern's memory and the extern kinds
// func, global, table and memory.
func linkHeaderLayout(t *testing.T) []uintptr {
	t.Helper()
	return headerFigures(t, "sizeof(wasmtime_extern_t)", "sizeof(wasmtime_memory_t)", "sizeof(wasmtime_global_t)",
		"sizeof(wasmtime_table_t)", "offsetof(wasmtime_extern_t, of.memory)",
		"WASMTIME_EXTERN_FUNC", "WASMTIME_EXTERN_GLOBAL", "WASMTIME_EXTERN_TABLE", "WASMTIME_EXTERN_MEMORY")
}

// TestLinkDeclarationsMatchHeaders: wasmtime_extern_t and
// wasmtime_memory_t have capi.h's sizes exactly (sbx_instantiate passes an
// array of externs), the extern kinds are capi.h's, and the functions it
// declares match the pinned prototypes.
func TestLinkDeclarationsMatchHeaders(t *testing.T) {
	inc := wasmtimeIncludeDir(t)
	got := linkHeaderLayout(t)
	if got[0] != sizeofWasmtimeExtern {
		t.Errorf("wasmtime_extern_t: %d bytes in the headers, %d in capi.h: sbx_instantiate's array would be misread", got[0], sizeofWasmtimeExtern)
	}
	if got[1] != sizeofWasmtimeMemory || got[4] != offsetofExternOf {
		t.Errorf("wasmtime_memory_t: %d bytes (in an extern at %d) in the headers, %d (at %d) in capi.h", got[1], got[4], sizeofWasmtimeMemory, offsetofExternOf)
	}
	if got[5] != 0 || got[6] != 1 || got[7] != 2 || got[8] != 3 {
		t.Errorf("extern kinds: func, global, table, memory are %v in the headers; capi.h has 0, 1, 2, 3", got[5:])
	}

	capi := capiC(t)
	for _, fn := range []struct{ name, header string }{
		{"wasmtime_linker_get", "linker.h"},
		{"wasmtime_linker_instantiate_pre", "linker.h"},
		{"wasmtime_instance_pre_delete", "instance.h"},
		{"wasmtime_instance_pre_instantiate", "instance.h"},
		{"wasmtime_instance_new", "instance.h"},
		{"wasmtime_caller_export_get", "func.h"},
	} {
		want := cPrototype(t, readFile(t, filepath.Join(inc, "wasmtime", fn.header)), fn.name, nil)
		if got := cPrototype(t, capi, fn.name, nil); got != want {
			t.Errorf("capi.h declares\n\t%s\nbut the pinned header declares\n\t%s", got, want)
		}
	}
}

// TestLinkGoLayouts: linkerPtr and modulePtr read the first word of a
// wasmtime.Linker and Module; instantiateLinked and exportOf write a
// wasmtime.Memory, Global and Table as their C struct (TestCallGoLayouts
// checks Func and Instance).
func TestLinkGoLayouts(t *testing.T) {
	headers := linkHeaderLayout(t)
	wantPtrField(t, reflect.TypeFor[wasmtime.Linker](), "wasmtime_linker", "linkerPtr")
	wantPtrField(t, reflect.TypeFor[wasmtime.Module](), "wasmtime_module", "modulePtr")
	for _, ty := range []struct {
		t    reflect.Type
		size uintptr // the C struct's, in the headers
	}{
		{reflect.TypeFor[wasmtime.Memory](), sizeofWasmtimeMemory},
		{reflect.TypeFor[wasmtime.Global](), headers[2]},
		{reflect.TypeFor[wasmtime.Table](), headers[3]},
	} {
		if ty.t.NumField() != 1 || ty.t.Field(0).Offset != 0 || ty.t.Size() != ty.size || ty.size > sizeofWasmtimeExtern-offsetofExternOf {
			t.Errorf("%s: %d fields, %d bytes; exportOf assumes one field of the %d-byte C struct, within an extern", ty.t, ty.t.NumField(), ty.t.Size(), ty.size)
		}
	}
	caller := reflect.TypeFor[wasmtime.Caller]()
	if caller.NumField() != 1 || caller.Field(0).Name != "ptr" || caller.Field(0).Type.Kind() != reflect.Pointer ||
		!strings.Contains(caller.Field(0).Type.Elem().Name(), "wasmtime_caller") {
		t.Errorf("wasmtime.Caller: want one field ptr, a *wasmtime_caller_t (callerMemory)")
	}
	eng := wasmtime.NewEngine()
	defer eng.Close()
	l := wasmtime.NewLinker(eng)
	if linkerPtr(l) == nil {
		t.Error("linkerPtr returned nil for a live linker")
	}
	m, err := wasmtime.NewModule(eng, []byte("\x00asm\x01\x00\x00\x00"))
	if err != nil {
		t.Fatal(err)
	}
	if modulePtr(m) == nil {
		t.Error("modulePtr returned nil for a live module")
	}
}
