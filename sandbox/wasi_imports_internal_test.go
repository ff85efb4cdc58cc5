package sandbox

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// TestWasiFuncsLinkAgainstWasmtime: every function of wasiFuncs is one
// wasmtime's preview1 defines, with exactly that signature (a module
// importing it instantiates), and a wrong signature does not link.
func TestWasiFuncsLinkAgainstWasmtime(t *testing.T) {
	eng := wasmtime.NewEngine()
	linker := wasmtime.NewLinker(eng)
	defer linker.Close()
	if err := linker.DefineWasi(); err != nil {
		t.Fatal(err)
	}
	wat := func(name, sig string) string {
		params, results, _ := strings.Cut(strings.TrimPrefix(sig, "("), ") -> (")
		results = strings.TrimSuffix(results, ")")
		p := strings.ReplaceAll(params, ",", "")
		r := strings.ReplaceAll(results, ",", "")
		return fmt.Sprintf(`(module (import %q %q (func (param %s) (result %s))))`, WASIModule, name, p, r)
	}
	for _, name := range WASIFunctions() {
		for _, sig := range []string{wasiFuncs[name], "(i32, i32, i32, i32, i32, i32, i32, i32, i32, i32) -> (i64)"} {
			wasm, err := wasmtime.Wat2Wasm(wat(name, sig))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			mod, err := wasmtime.NewModule(eng, wasm)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			store := wasmtime.NewStore(eng)
			store.SetWasi(wasmtime.NewWasiConfig())
			_, err = linker.Instantiate(store, mod)
			store.Close()
			if sig == wasiFuncs[name] && err != nil {
				t.Errorf("%s %s does not link against wasmtime's preview1: %v", name, sig, firstLine(err.Error()))
			}
			if sig != wasiFuncs[name] && err == nil {
				t.Errorf("%s links with the wrong signature %s", name, sig)
			}
		}
	}
	if n := len(wasiFuncs); n != 46 {
		t.Errorf("%d preview1 functions, want the 46 of wasi_snapshot_preview1", n)
	}
}
