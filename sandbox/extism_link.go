package sandbox

// Linking a store's module, the engine's way. The host functions sandboxd
// defines (the host ABI, a plugin's extism:host/env functions, the
// kernel's sandboxd::grow) are defined once per engine in one linker:
// each finds its store through its caller (storeFunc), so a function
// defined once can serve any number of stores at once and never sees
// another store's state (TestLinkedHostFunctionsKeepStoresApart). The
// kernel is made ready to instantiate once per engine (an InstancePre of
// that linker). A store's instantiation is then one cgo call
// (instantiateLinked): the kernel, then the module with each import taken
// from the host linker, the WASI linker, the kernel's exports or, for the
// functions the parent serves (host_parent.go), a function made for the
// store. Before, a one-shot plugin run made a wasmtime function per host
// import and instantiated the kernel through wasmtime-go: most of the
// ~56 µs of CPU it cost over a warm call (docs/performance.md).

import (
	"fmt"
	"strings"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// newHostLinker defines every host function sandboxd implements in Go.
// Whether a store may import one is checkImports' business: the linker
// only resolves the imports that passed.
func (e *Engine) newHostLinker() (*wasmtime.Linker, error) {
	l := wasmtime.NewLinker(e.wt)
	types := map[string]*wasmtime.FuncType{} // by signature, shared
	for _, f := range extismABI {
		if !f.kernel && types[f.signature] == nil {
			types[f.signature] = signatureType(f.signature)
		}
	}
	define := func(module, name string, ty *wasmtime.FuncType, fn func(*store, *wasmtime.Caller, []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap)) error {
		return l.FuncNew(module, name, ty, storeFunc(module+"::"+name, fn))
	}
	for _, h := range hostABI {
		var fn func(*store, *wasmtime.Caller, []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap)
		switch h.name {
		case "log":
			fn = (*store).hostLog
		case "random":
			fn = (*store).hostRandom
		case "now_ns":
			fn = (*store).hostNow
		default:
			return nil, fmt.Errorf("no Go function for %s::%s", HostModule, h.name)
		}
		if err := define(HostModule, h.name, e.hostTypes.of(h.name), fn); err != nil {
			return nil, err
		}
	}
	for name, f := range extismABI {
		if f.kernel || f.refused != "" {
			continue
		}
		if err := define(ExtismEnvModule, name, types[f.signature], extismHostFunc(name)); err != nil {
			return nil, err
		}
	}
	i32 := wasmtime.NewValType(wasmtime.KindI32)
	growType := sharedFuncType([]*wasmtime.ValType{i32}, []*wasmtime.ValType{i32})
	if err := define("sandboxd", "grow", growType, func(s *store, c *wasmtime.Caller, a []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
		return s.plugin.grow(c, a)
	}); err != nil {
		return nil, err
	}
	return l, nil
}

// extismHostFunc is the Go function behind extism:host/env::name for the
// store that calls it.
func extismHostFunc(name string) func(*store, *wasmtime.Caller, []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	switch name {
	case "config_get":
		return func(s *store, c *wasmtime.Caller, a []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
			return s.plugin.configGet(c, a)
		}
	case "var_get":
		return func(s *store, c *wasmtime.Caller, a []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
			return s.plugin.varGet(c, a)
		}
	case "var_set":
		return func(s *store, c *wasmtime.Caller, a []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
			return s.plugin.varSet(c, a)
		}
	case "get_log_level":
		return func(*store, *wasmtime.Caller, []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
			return []wasmtime.Val{wasmtime.ValI32(0)}, nil // trace: every line is forwarded
		}
	}
	level := LogLevel(strings.TrimPrefix(name, "log_")) // log_<level>
	return func(s *store, c *wasmtime.Caller, a []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
		return s.plugin.logLine(c, level, a)
	}
}

// link instantiates the store's module (and, for a plugin, the kernel
// first) with every import resolved in one cgo call. checkImports has
// proved each import granted with the right signature.
func (s *store) link() (*wasmtime.Instance, error) {
	imports := s.module.Imports
	var wasi *wasmtime.Linker
	var err error
	if s.wasi != nil {
		if wasi, err = s.e.wasiLinker(s.wasi.cheapShadows()); err != nil {
			return nil, err
		}
	}
	if wasi != nil && s.plugin == nil && onlyWASI(imports) {
		return wasi.Instantiate(s.wt, s.module.wt) // a command's usual imports: the linker resolves them itself
	}
	var kernel *instancePre
	var host *wasmtime.Linker
	if s.plugin != nil {
		if kernel, err = s.e.kernel(); err != nil {
			return nil, &Error{Kind: KindHost, Message: err.Error(), err: err}
		}
	}
	if len(imports) > 0 {
		if host, err = s.e.hostLinker(); err != nil {
			return nil, &Error{Kind: KindHost, Message: err.Error(), err: err}
		}
	}
	spec := linkSpec{kernel: kernel, host: host, wasi: wasi, from: make([]importFrom, len(imports))}
	for i, imp := range imports {
		switch {
		case imp.Module == WASIModule && wasi != nil:
			spec.from[i] = fromWASI
		case imp.Module == ExtismEnvModule && s.plugin != nil:
			spec.from[i] = fromHost
			if extismABI[imp.Name].kernel {
				spec.from[i] = fromKernel
			}
		default:
			if f, ok := s.declared[[2]string{imp.Module, imp.Name}]; ok {
				if spec.given == nil {
					spec.given = make([]*wasmtime.Func, len(imports))
				}
				spec.from[i] = fromGiven
				spec.given[i] = wasmtime.NewFunc(s.wt, s.e.declTypes.of(f), s.guarded(f.String(), s.parentFunction(f)))
				continue
			}
			spec.from[i] = fromHost
		}
	}
	l, err := instantiateLinked(s.wt, s.module.wt, imports, spec)
	if err != nil {
		return nil, err
	}
	if s.plugin != nil {
		p := s.plugin
		p.kernel, p.mem = l.kernel, l.kernelMem
		p.kernelBytes = uint64(p.mem.DataSize(s.wt))
	}
	return l.instance, nil
}

// onlyWASI says whether every import is WASI's.
func onlyWASI(imports []Import) bool {
	for _, imp := range imports {
		if imp.Module != WASIModule {
			return false
		}
	}
	return true
}
