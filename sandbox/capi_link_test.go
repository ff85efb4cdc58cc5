package sandbox

// Guards of instantiateLinked (capi.go): the wasmtime functions and types
// capi.h declares by hand for it match the pinned headers, and the
// wasmtime-go types it reads and builds through unsafe have the fields it
// assumes.

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// TestLinkDeclarationsMatchHeaders compiles a C program against the pinned
// headers: wasmtime_extern_t and wasmtime_memory_t have capi.h's sizes
// exactly (sbx_instantiate passes an array of externs), the extern kinds
// are capi.h's, and the functions it declares match the prototypes.
func TestLinkDeclarationsMatchHeaders(t *testing.T) {
	inc := wasmtimeIncludeDir(t)
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler:", err)
	}
	dir := t.TempDir()
	prog := `#include <stdio.h>
#include <stddef.h>
#include <wasmtime.h>
int main(void) {
	printf("%zu %zu %zu %d %d\n", sizeof(wasmtime_extern_t), sizeof(wasmtime_memory_t), offsetof(wasmtime_extern_t, of.memory),
		WASMTIME_EXTERN_FUNC, WASMTIME_EXTERN_MEMORY);
	return 0;
}
`
	if err := os.WriteFile(filepath.Join(dir, "layout.c"), []byte(prog), 0o600); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "layout")
	if out, err := exec.Command(cc, "-I", inc, "-o", exe, filepath.Join(dir, "layout.c")).CombinedOutput(); err != nil {
		t.Fatalf("compiling against the headers: %v\n%s", err, out)
	}
	out, err := exec.Command(exe).Output()
	if err != nil {
		t.Fatal(err)
	}
	var got []uintptr
	for _, f := range strings.Fields(string(out)) {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			t.Fatalf("layout program printed %q", out)
		}
		got = append(got, uintptr(n))
	}
	if len(got) != 5 {
		t.Fatalf("layout program printed %q", out)
	}
	if got[0] != sizeofWasmtimeExtern {
		t.Errorf("wasmtime_extern_t: %d bytes in the headers, %d in capi.h: sbx_instantiate's array would be misread", got[0], sizeofWasmtimeExtern)
	}
	if got[1] != sizeofWasmtimeMemory || got[2] != offsetofExternOf {
		t.Errorf("wasmtime_memory_t: %d bytes (in an extern at %d) in the headers, %d (at %d) in capi.h", got[1], got[2], sizeofWasmtimeMemory, offsetofExternOf)
	}
	if got[3] != 0 || got[4] != 3 {
		t.Errorf("extern kinds: func %d, memory %d in the headers; capi.h has 0 and 3", got[3], got[4])
	}

	capi := capiC(t)
	for _, fn := range []struct{ name, header string }{
		{"wasmtime_linker_get", "linker.h"},
		{"wasmtime_linker_instantiate_pre", "linker.h"},
		{"wasmtime_instance_pre_delete", "instance.h"},
		{"wasmtime_instance_pre_instantiate", "instance.h"},
		{"wasmtime_instance_new", "instance.h"},
	} {
		want := cPrototype(t, readFile(t, filepath.Join(inc, "wasmtime", fn.header)), fn.name, nil)
		if got := cPrototype(t, capi, fn.name, nil); got != want {
			t.Errorf("capi.h declares\n\t%s\nbut the pinned header declares\n\t%s", got, want)
		}
	}
}

// TestLinkGoLayouts: linkerPtr and modulePtr read the first word of a
// wasmtime.Linker and Module; instantiateLinked writes a wasmtime.Memory
// as its wasmtime_memory_t and reads a wasmtime.Func as its
// wasmtime_func_t (TestCallGoLayouts checks Func and Instance).
func TestLinkGoLayouts(t *testing.T) {
	wantPtrField(t, reflect.TypeFor[wasmtime.Linker](), "wasmtime_linker", "linkerPtr")
	wantPtrField(t, reflect.TypeFor[wasmtime.Module](), "wasmtime_module", "modulePtr")
	mem := reflect.TypeFor[wasmtime.Memory]()
	if mem.NumField() != 1 || mem.Field(0).Offset != 0 || mem.Size() != sizeofWasmtimeMemory {
		t.Errorf("wasmtime.Memory: %d fields, %d bytes; instantiateLinked assumes one field of the %d-byte wasmtime_memory_t", mem.NumField(), mem.Size(), sizeofWasmtimeMemory)
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
