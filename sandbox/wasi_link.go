package sandbox

// Linking a WASI guest. Every WASI store of an engine is instantiated
// through linkers built once per engine: wasmtime's preview1 (defining it
// was 30-40 µs of every run's CPU when each run built its own linker),
// with our poll_oneoff and random_get and the fuel fence's shadows
// (wasi_fuel.go) defined over it. Those are the engine's functions, not a
// store's: each finds its store through its caller (storeFunc). A linker
// is only read once defined, from any number of stores at once
// (wasmtime_linker_instantiate and wasmtime_linker_get take it const).
// store.link (extism_link.go) takes a module's WASI imports from them.

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// engineWASI is what the WASI stores of an engine share, each part made
// on first use.
type engineWASI struct {
	shim    wasiShimModule                          // wasi_shim.go
	mu      sync.Mutex                              // held while a linker is built
	linkers [1 << 3]atomic.Pointer[wasmtime.Linker] // by the shadows they leave to wasmtime (cheapShadows)
}

// The shadows a run may leave to wasmtime (cheapShadows), as bits.
const (
	cheapArgs = 1 << iota
	cheapEnv
	cheapPrestat
)

// cheapShadows says which shadows the run leaves to wasmtime: those whose
// price is next to nothing for it (arguments and environment of under 16
// entries and 1 KiB, preopen names under 1 KiB), where the shadow would
// cost more than the work.
func (w *wasiRun) cheapShadows() int {
	var cheap int
	if w.argvEntries < 16 && copyFuel(w.argvBytes) == 0 {
		cheap |= cheapArgs
	}
	if w.envEntries < 16 && copyFuel(w.envBytes) == 0 {
		cheap |= cheapEnv
	}
	if copyFuel(w.longestPreopen) == 0 {
		cheap |= cheapPrestat
	}
	return cheap
}

// leftToWasmtime says whether the shadow of name is left to wasmtime for
// a run whose cheapShadows are cheap.
func leftToWasmtime(name string, cheap int) bool {
	switch {
	case strings.HasPrefix(name, "args_"):
		return cheap&cheapArgs != 0
	case strings.HasPrefix(name, "environ_"):
		return cheap&cheapEnv != 0
	case name == "fd_prestat_dir_name":
		return cheap&cheapPrestat != 0
	}
	return false
}

// wasiLinker is the engine's linker for runs whose cheapShadows are
// cheap, built on first use.
func (e *Engine) wasiLinker(cheap int) (*wasmtime.Linker, error) {
	slot := &e.wasi.linkers[cheap]
	if l := slot.Load(); l != nil {
		return l, nil
	}
	e.wasi.mu.Lock()
	defer e.wasi.mu.Unlock()
	if l := slot.Load(); l != nil {
		return l, nil
	}
	l, err := e.newWASILinker(cheap)
	if err != nil {
		return nil, fmt.Errorf("WASI linker: %s", cleanMessage(err.Error()))
	}
	slot.Store(l)
	return l, nil
}

// newWASILinker defines wasmtime's preview1, then our poll_oneoff and
// random_get and the shadows not left to wasmtime over it.
func (e *Engine) newWASILinker(cheap int) (*wasmtime.Linker, error) {
	shim, err := e.wasiShim() // the shadows' types
	if err != nil {
		return nil, err
	}
	l := wasmtime.NewLinker(e.wt)
	if err := l.DefineWasi(); err != nil {
		return nil, err
	}
	l.AllowShadowing(true)
	define := func(name string, fn func(*store, *wasmtime.Caller, []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap)) error {
		ty, err := wasiFuncType(name)
		if err != nil {
			return err
		}
		return l.FuncNew(WASIModule, name, ty, storeFunc(WASIModule+"::"+name, fn))
	}
	if err := define("poll_oneoff", (*store).pollOneoff); err != nil {
		return nil, err
	}
	if err := define("random_get", (*store).randomGet); err != nil {
		return nil, err
	}
	for i, sh := range wasiShadows {
		if sh.fuel == nil || leftToWasmtime(sh.name, cheap) {
			continue
		}
		err := l.FuncNew(WASIModule, sh.name, shim.types[i], storeFunc(WASIModule+"::"+sh.name,
			func(s *store, c *wasmtime.Caller, a []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
				return s.shadowed(i, c, a)
			}))
		if err != nil {
			return nil, err
		}
	}
	return l, nil
}
