package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox/internal/wasmbin"
)

// Source names a module: exactly one of WAT, Wasm, Path and ID is set.
// It is the protocol's type, so the sidecar hands its requests' sources
// over as they are. A zero CompileTimeout or CompileMemoryBytes takes
// Config.CompileTimeout or Config.CompileMemoryBytes.
type Source = protocol.Source

// injectedPrefix starts the names of the exports the instrumentation adds;
// they are hidden from callers.
const injectedPrefix = "__sandboxd_"

// IDPrefix starts every module id.
const IDPrefix = protocol.IDPrefix

// Import describes one import of a module (kind: func, memory, table,
// global, tag; type e.g. "(i32, i32) -> ()"). It is the protocol's type,
// so a module's lists reach the wire without a copy.
type Import = protocol.Import

// Export describes one export. Params and Results are set for functions.
type Export = protocol.Export

// Module is a compiled, instrumented module, shared by every run of it.
// Its fields are read-only.
type Module struct {
	ID      string
	Size    int // wasm bytes, as given (before instrumentation)
	Imports []Import
	Exports []Export
	// CompiledSize is the length of the module serialized by wasmtime:
	// its machine code and metadata, a fair measure of the memory it
	// holds while cached. The cache is bounded by it.
	CompiledSize int

	// snapshotSize is a pre-initialised module's wasm as compiled, its
	// snapshot applied: what MaxModuleBytes bounds (Size is its
	// source's). 0 for other modules.
	snapshotSize int

	wt     *wasmtime.Module
	info   *wasmbin.Info
	engine *Engine // the engine that compiled it; only that one can run it
}

// Export returns the export named name, if any.
func (m *Module) Export(name string) (Export, bool) {
	for _, e := range m.Exports {
		if e.Name == name {
			return e, true
		}
	}
	return Export{}, false
}

// CompileInfo says how Compile obtained a module.
type CompileInfo struct {
	Cached   bool          // found in the in-memory cache (or compiled by a concurrent caller)
	FromDisk bool          // loaded from the persistent cache (Config.CacheDir), not compiled
	Elapsed  time.Duration // time spent obtaining the module
}

// Compile returns the module for src, from the cache when its bytes were
// compiled before. New bytes are converted, validated, instrumented and
// compiled in a child process under src's compile limits (see
// compilechild_driver.go); concurrent compiles of the same bytes happen once,
// and that compile is abandoned only when every caller waiting for it
// has gone. Compile returns promptly when ctx is done. Errors are *Error
// of kind invalid_module, compile_limit_exceeded, cancelled, or host (an
// unusable path).
//
// A source with Encoded (WAT or Wasm as it came on the wire) is
// remembered by that literal too, once its module is had: Encoded must be
// the encoding of src's WAT or Wasm (the caller decoded one from the
// other), or a later Lookup of the literal finds this module.
func (e *Engine) Compile(ctx context.Context, src Source) (*Module, CompileInfo, error) {
	if src.Preinitialize {
		return e.compilePreinit(ctx, src) // preinit.go
	}
	m, info, err := e.compile(ctx, src)
	if err == nil && (src.WAT != "" || src.Wasm != nil) {
		if enc, ok := encodedBytes(src); ok {
			e.cache.put(m, e.cache.sourceHash(enc), enc)
		}
	}
	return m, info, err
}

func (e *Engine) compile(ctx context.Context, src Source) (*Module, CompileInfo, error) {
	start := time.Now()
	if err := ctx.Err(); err != nil {
		return nil, CompileInfo{}, cancelledError()
	}
	if countSources(src) != 1 {
		return nil, CompileInfo{}, newError(KindHost, "module: give exactly one of wat, wasm, path, id")
	}
	if src.ID != "" {
		m, ok := e.cache.get(src.ID)
		if !ok {
			e.cache.miss()
			return nil, CompileInfo{}, newError(KindInvalidModule, "module id %s is not in the cache (never compiled here, or evicted): send the module bytes again", shownID(src.ID))
		}
		return m, CompileInfo{Cached: true, Elapsed: time.Since(start)}, nil
	}
	mod, err := e.loadBytes(src)
	if err != nil {
		return nil, CompileInfo{}, err
	}
	// Bytes compiled before are known by their content: one fast hash and
	// a comparison (cache.go), nothing converted or compiled.
	h := e.cache.sourceHash(mod)
	if m, ok := e.cache.lookupSource(h, mod); ok {
		return m, CompileInfo{Cached: true, Elapsed: time.Since(start)}, nil
	}
	// Otherwise binary bytes are their own id; a text is known by the id
	// of the wasm it became, once it was compiled here.
	key, id := "", ""
	if mod.isWasmBinary() {
		id = ModuleID(mod.bin)
		key = id
		if m, ok := e.cache.get(id); ok { // kept, but these bytes were not among its sources
			e.cache.put(m, h, mod)
			return m, CompileInfo{Cached: true, Elapsed: time.Since(start)}, nil
		}
	} else {
		key = mod.textKey()
	}
	lim := e.compileLimits(src)
	r, shared, err := e.flight.do(ctx, flightKey(key, lim), func(ctx context.Context) (flightResult, error) {
		if m, ok := e.cache.peekSource(h, mod); ok { // compiled while we waited
			return flightResult{m: m, cached: true}, nil
		}
		if m, ok := e.cache.peek(id); ok && id != "" { // compiled from a text meanwhile
			e.cache.put(m, h, mod)
			return flightResult{m: m, cached: true}, nil
		}
		e.cache.miss() // once per compile, however many callers wait on it
		diskID, text := id, id == ""
		if text { // a text: its id, if this build compiled it before
			diskID = e.idOfText(ctx, key)
		}
		if diskID != "" {
			if m := e.loadFromDisk(ctx, diskID); m != nil {
				e.cache.put(m, h, mod)
				return flightResult{m: m, fromDisk: true}, nil
			}
		}
		m, compiled, err := e.compileNew(ctx, mod, src.Path, lim)
		if err != nil {
			return flightResult{}, err
		}
		e.saveToDisk(m, compiled)
		if text {
			e.saveAlias(key, m.ID)
		}
		e.cache.put(m, h, mod)
		return flightResult{m: m}, nil
	})
	if err != nil {
		return nil, CompileInfo{}, err
	}
	cached := shared || r.cached
	if cached { // served by another caller's compile: a hit for this one
		e.cache.hit()
	}
	return r.m, CompileInfo{Cached: cached, FromDisk: r.fromDisk && !shared, Elapsed: time.Since(start)}, nil
}

// Cached returns the module src names if the engine has it already,
// without converting, hashing with sha256 or compiling: by id, or by the
// bytes of a text, binary or file that compiled to it here (a file is
// read, with Compile's checks). It counts neither a hit nor a miss. It is
// for a check that must not parse again a text the engine knows (the
// sidecar's WASI grant check before Compile); Compile remains the way to
// obtain a module.
func (e *Engine) Cached(src Source) (*Module, bool) {
	if src.Preinitialize {
		return e.cachedPreinit(src)
	}
	if countSources(src) != 1 {
		return nil, false
	}
	if src.ID != "" {
		return e.cache.peek(src.ID)
	}
	mod, err := e.loadBytes(src)
	if err != nil {
		return nil, false
	}
	return e.cache.peekSource(e.cache.sourceHash(mod), mod)
}

// Lookup is Compile served from the in-memory cache alone: the module src
// names when the engine has it (a hit, counted, and the module becomes the
// most recently used), found in one step, so that no eviction can come
// between finding and taking it. It reads no file (a path is never found
// here), converts, hashes with sha256 and compiles nothing, and never
// counts a miss: false means only Compile can tell. It is for callers that
// must not block, such as the sidecar's dispatcher.
//
// A source given only as Encoded (not decoded yet) is found by that alone;
// one given both ways is found by either, and a module found by its bytes
// becomes known by the literal too.
func (e *Engine) Lookup(src Source) (*Module, bool) {
	if src.Preinitialize { // known by PreinitID, never by its bytes
		if src.Wasm == nil || !isWasmBinary(src.Wasm) || len(src.Wasm) > e.cfg.MaxModuleBytes {
			return nil, false
		}
		return e.cache.get(PreinitID(src.Wasm))
	}
	enc, hasEnc := encodedBytes(src)
	n := countSources(src)
	if hasEnc {
		if m, ok := e.cache.lookupSource(e.cache.sourceHash(enc), enc); ok {
			return m, true
		}
		if n == 0 {
			return nil, false
		}
	}
	if n != 1 || src.Path != "" {
		return nil, false
	}
	if src.ID != "" {
		return e.cache.get(src.ID)
	}
	mod := moduleBytes{text: src.WAT, bin: src.Wasm}
	if mod.size() > e.cfg.MaxModuleBytes {
		return nil, false
	}
	m, ok := e.cache.lookupSource(e.cache.sourceHash(mod), mod)
	if ok && hasEnc {
		e.cache.put(m, e.cache.sourceHash(enc), enc)
	}
	return m, ok
}

// compileLimits are src's compile limits, the engine's where it sets none.
func (e *Engine) compileLimits(src Source) compileLimits {
	lim := compileLimits{timeout: src.CompileTimeout, memoryBytes: src.CompileMemoryBytes}
	if lim.timeout == 0 {
		lim.timeout = e.cfg.CompileTimeout
	}
	if lim.memoryBytes == 0 {
		lim.memoryBytes = e.cfg.CompileMemoryBytes
	}
	return lim
}

// compileNew compiles bytes the engine has not seen, in a compile child,
// under one of the engine's compile slots. compiled is the module as
// wasmtime serialized it, for an artefact store; nil when the module was
// found in the cache meanwhile (another text of the same wasm).
func (e *Engine) compileNew(ctx context.Context, mod moduleBytes, path string, lim compileLimits) (m *Module, compiled []byte, err error) {
	cancelled := errCompileCancelled()
	select {
	case e.compileSlots <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, cancelled
	}
	if ctx.Err() != nil { // both were ready: no child for a compile nobody wants
		<-e.compileSlots
		return nil, nil, cancelled
	}
	r, err := e.compileInChildProcess(ctx, mod, path, lim)
	<-e.compileSlots
	if err != nil {
		return nil, nil, err
	}
	if m, ok := e.cache.peek(r.id); ok { // another text of the same wasm
		return m, nil, nil
	}
	wt, err := wasmtime.NewModuleDeserialize(e.wt, r.compiled)
	if err != nil {
		defer releaseWasmtimeError(err)
		return nil, nil, &Error{Kind: KindHost, Message: "loading the compiled module: " + engineMessage(err.Error())}
	}
	return e.newModule(r.id, r.wasmSize, len(r.compiled), wt, r.info), r.compiled, nil
}

// ModuleID is the content address of wasm bytes.
func ModuleID(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return IDPrefix + hex.EncodeToString(sum[:])
}

func countSources(src Source) int {
	n := 0
	for _, set := range []bool{src.WAT != "", src.Wasm != nil, src.Path != "", src.ID != ""} {
		if set {
			n++
		}
	}
	return n
}

// checkModule refuses a module this engine cannot run: none, or one that
// another Engine compiled. wasmtime keeps a module's functions and types
// in its engine's tables, so using it in a store of another engine aborts
// the process ("id from different slab"); this check runs before anything
// touches wasmtime.
func (e *Engine) checkModule(m *Module) *Error {
	switch {
	case m == nil:
		return newError(KindHost, "no module")
	case m.engine == nil || m.wt == nil:
		return newError(KindHost, "module %s was not compiled by an Engine (use Engine.Compile)", m.ID)
	case m.engine != e:
		return newError(KindHost, "module %s was compiled by another Engine; a module runs only on the engine that compiled it", m.ID)
	}
	return nil
}

func tooBig(n int64, max int) *Error {
	return newError(KindInvalidModule, "module is %d bytes; the maximum is %d", n, max)
}

// newModule describes a compiled module for callers.
func (e *Engine) newModule(id string, size, compiledSize int, wt *wasmtime.Module, info *wasmbin.Info) *Module {
	m := &Module{ID: id, Size: size, CompiledSize: compiledSize, wt: wt, info: info, engine: e}
	for _, imp := range wt.Imports() {
		name := ""
		if n := imp.Name(); n != nil {
			name = *n
		}
		kind, typ := describeExtern(imp.Type())
		m.Imports = append(m.Imports, Import{Module: imp.Module(), Name: name, Kind: kind, Type: typ})
	}
	for _, exp := range wt.Exports() {
		if strings.HasPrefix(exp.Name(), injectedPrefix) {
			continue
		}
		x := Export{Name: exp.Name(), Kind: "func", Params: []string{}, Results: []string{}}
		if ft := exp.Type().FuncType(); ft != nil {
			x.Params, x.Results = valTypeNames(ft.Params()), valTypeNames(ft.Results())
		} else {
			x.Kind, _ = describeExtern(exp.Type())
		}
		m.Exports = append(m.Exports, x)
	}
	return m
}

func describeExtern(t *wasmtime.ExternType) (kind, typ string) {
	switch {
	case t.FuncType() != nil:
		ft := t.FuncType()
		return "func", describeFuncType(valTypeNames(ft.Params()), valTypeNames(ft.Results()))
	case t.MemoryType() != nil:
		mt := t.MemoryType()
		s := fmt.Sprintf("memory %d", mt.Minimum())
		if ok, max := mt.Maximum(); ok {
			s += fmt.Sprintf(" %d", max)
		}
		return "memory", s
	case t.TableType() != nil:
		return "table", "table " + valTypeName(t.TableType().Element())
	case t.GlobalType() != nil:
		gt := t.GlobalType()
		s := "global " + valTypeName(gt.Content())
		if gt.Mutable() {
			s = "global mut " + valTypeName(gt.Content())
		}
		return "global", s
	}
	return "unknown", "unknown"
}

func valTypeNames(ts []*wasmtime.ValType) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = valTypeName(t)
	}
	return out
}

func valTypeName(t *wasmtime.ValType) string {
	switch t.Kind() {
	case wasmtime.KindI32:
		return "i32"
	case wasmtime.KindI64:
		return "i64"
	case wasmtime.KindF32:
		return "f32"
	case wasmtime.KindF64:
		return "f64"
	case wasmtime.KindExternref:
		return "externref"
	case wasmtime.KindFuncref:
		return "funcref"
	}
	return "v128"
}

// shownID is a module id as a message names it: whole when it has the
// shape of one (IDPrefix and 64 hex digits), else quoted and cut
// (protocol.Quote), as any other value the caller gave.
func shownID(id string) string {
	if protocol.IsModuleID(id) {
		return id
	}
	return protocol.Quote(id)
}
