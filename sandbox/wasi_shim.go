package sandbox

// The shim: how a shadow (wasi_fuel.go) that has been paid calls
// wasmtime's own preview1 function.

import (
	"fmt"
	"strings"
	"sync"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// forward calls wasmtime's own function i. A host function cannot call it
// directly (WASI functions find the guest's memory through their caller),
// so a shim module that imports the guest's memory, re-exports it as
// "memory" and calls each function on the host's behalf is instantiated in
// the run's store on first use (hence the one extra instance a WASI run may
// have). It is compiled once per engine.
func (s *store) forward(c *wasmtime.Caller, i int, a []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	w := s.wasi
	if w.shim == nil {
		mem := callerMemory(c, "memory")
		if mem == nil {
			return nil, wasmtime.NewTrap(wasiShadows[i].name + " needs the guest to export its memory as \"memory\"")
		}
		inst, err := s.instantiateShim(c, mem)
		if err != nil {
			return nil, wasmtime.NewTrap("sandboxd: WASI shim: " + cleanMessage(err.Error()))
		}
		w.shim = inst
	}
	res, trap := forwardWASI(c, w.shim, wasiShadows[i].name, a)
	if trap != nil {
		return nil, trap
	}
	return []wasmtime.Val{wasmtime.ValI32(res)}, nil
}

// instantiateShim instantiates the shim in the caller's store over mem,
// the guest's memory, and wasmtime's own functions.
func (s *store) instantiateShim(c *wasmtime.Caller, mem *wasmtime.Memory) (*wasmtime.Instance, error) {
	shim, err := s.wasi.engine.wasiShim()
	if err != nil {
		return nil, err
	}
	imports := make([]wasmtime.AsExtern, 0, 1+len(wasiShadows))
	imports = append(imports, mem)
	for _, sh := range wasiShadows {
		ext := shim.wasi.Get(c, WASIModule, sh.name)
		if ext == nil {
			return nil, fmt.Errorf("wasmtime defines no %s", sh.name)
		}
		imports = append(imports, ext)
	}
	return wasmtime.NewInstance(c, shim.mod, imports)
}

// wasiShimModule is the shim, compiled once per engine, and a linker
// holding only wasmtime's WASI, from which each run's store takes the
// functions the shim calls. A linker is only read once defined, from any
// number of stores at once (wasmtime_linker_get takes it const).
type wasiShimModule struct {
	once  sync.Once
	mod   *wasmtime.Module
	wasi  *wasmtime.Linker
	types []*wasmtime.FuncType // the shadows' types by index (shadowTypes)
	err   error
}

func (e *Engine) wasiShim() (*wasiShimModule, error) {
	s := &e.wasi.shim
	s.once.Do(func() {
		wat, err := wasiShimWAT()
		if err == nil {
			var wasm []byte
			if wasm, err = wasmtime.Wat2Wasm(wat); err == nil {
				s.mod, err = wasmtime.NewModule(e.wt, wasm)
			}
		}
		if err == nil {
			s.wasi = wasmtime.NewLinker(e.wt)
			err = s.wasi.DefineWasi()
		}
		if err == nil {
			s.types, err = shadowTypes()
		}
		if err != nil {
			s.err = fmt.Errorf("WASI shim: %s", cleanMessage(err.Error()))
		}
	})
	return s, s.err
}

// wasiShimWAT is the shim's text: for each shadow, an export of that name
// calling wasmtime's function of that name with its own arguments.
func wasiShimWAT() (string, error) {
	var imports, funcs strings.Builder
	for _, s := range wasiShadows {
		sig, ok := wasiFuncs[s.name]
		if !ok {
			return "", fmt.Errorf("%s is not a preview1 function", s.name)
		}
		params, results := watSignature(sig)
		fmt.Fprintf(&imports, "  (import %q %q (func $%s %s %s))\n", WASIModule, s.name, s.name, params, results)
		fmt.Fprintf(&funcs, "  (func (export %q) %s %s (call $%s", s.name, params, results, s.name)
		for i := range strings.Count(params, "i") {
			fmt.Fprintf(&funcs, " (local.get %d)", i)
		}
		funcs.WriteString("))\n")
	}
	return "(module\n  (import \"sandboxd\" \"memory\" (memory 0))\n" + imports.String() +
		"  (export \"memory\" (memory 0))\n" + funcs.String() + ")", nil
}

// shadowTypes are the shadows' function types by index. A wasmtime
// function type belongs to the first engine that uses it, hence once per
// engine.
func shadowTypes() ([]*wasmtime.FuncType, error) {
	types := make([]*wasmtime.FuncType, len(wasiShadows))
	for i, s := range wasiShadows {
		ty, err := wasiFuncType(s.name)
		if err != nil {
			return nil, err
		}
		types[i] = ty
	}
	return types, nil
}
