package sandbox

// Linking a WASI guest: wasmtime's preview1, with the functions that are
// ours (poll_oneoff, random_get) and the fuel fence's shadows
// (wasi_fuel.go) defined over it, and the granted host functions.

import (
	"strings"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// instantiate links the module with wasmtime's WASI, our poll_oneoff and
// random_get and the fuel fence's shadows (wasi_fuel.go) shadowing
// wasmtime's, and the granted host functions.
func (s *store) instantiateWASI() (*wasmtime.Instance, error) {
	linker := wasmtime.NewLinker(s.wt.Engine)
	defer linker.Close()
	if err := linker.DefineWasi(); err != nil {
		return nil, err
	}
	linker.AllowShadowing(true)
	i32 := wasmtime.NewValType(wasmtime.KindI32)
	poll := wasmtime.NewFuncType([]*wasmtime.ValType{i32, i32, i32, i32}, []*wasmtime.ValType{i32})
	if err := linker.FuncNew(WASIModule, "poll_oneoff", poll, s.guarded(WASIModule+"::poll_oneoff", s.pollOneoff)); err != nil {
		return nil, err
	}
	rnd := wasmtime.NewFuncType([]*wasmtime.ValType{i32, i32}, []*wasmtime.ValType{i32})
	if err := linker.FuncNew(WASIModule, "random_get", rnd, s.guarded(WASIModule+"::random_get", s.randomGet)); err != nil {
		return nil, err
	}
	if err := s.linkShadows(linker); err != nil {
		return nil, err
	}
	var host []Import
	for _, imp := range s.module.Imports {
		if imp.Module != WASIModule {
			host = append(host, imp)
		}
	}
	if len(host) > 0 {
		externs := s.hostImports(host)
		for i, imp := range host {
			if err := linker.Define(s.wt, imp.Module, imp.Name, externs[i]); err != nil {
				return nil, err
			}
		}
	}
	return linker.Instantiate(s.wt, s.module.wt)
}

// linkShadows defines, in linker over wasmtime's WASI, the shadows of the
// functions the module imports. Those whose price is next to nothing for
// this run (arguments and environment of under 16 entries and 1 KiB,
// preopen names under 1 KiB) are left to wasmtime: the shadow would cost
// more than the work.
func (s *store) linkShadows(linker *wasmtime.Linker) error {
	w := s.wasi
	shim, err := w.engine.wasiShim()
	if err != nil {
		return err
	}
	for _, imp := range s.module.Imports {
		i, ok := shadowIndex[imp.Name]
		if imp.Module != WASIModule || !ok || wasiShadows[i].fuel == nil {
			continue
		}
		switch {
		case strings.HasPrefix(imp.Name, "args_") && w.argvEntries < 16 && copyFuel(w.argvBytes) == 0,
			strings.HasPrefix(imp.Name, "environ_") && w.envEntries < 16 && copyFuel(w.envBytes) == 0,
			imp.Name == "fd_prestat_dir_name" && copyFuel(w.longestPreopen) == 0:
			continue
		}
		if err := linker.FuncNew(WASIModule, imp.Name, shim.types[i], s.guarded(WASIModule+"::"+imp.Name, func(c *wasmtime.Caller, a []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
			return s.shadowed(i, c, a)
		})); err != nil {
			return err
		}
	}
	return nil
}
