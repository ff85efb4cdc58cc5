package sandbox

import (
	"bytes"
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"
	"golang.org/x/sync/singleflight"

	"github.com/sandboxd/sandboxd/sandbox/internal/wasmbin"
)

// Source names a module: exactly one field is set.
type Source struct {
	WAT  string // WebAssembly text
	Wasm []byte // binary (text is also accepted here and converted)
	Path string // a .wasm or .wat file on the sidecar's machine
	ID   string // "sha256:<hex>" of a module compiled earlier
}

// injectedPrefix starts the names of the exports the instrumentation adds;
// they are hidden from callers.
const injectedPrefix = "__sandboxd_"

// IDPrefix starts every module id.
const IDPrefix = "sha256:"

// Import describes one import of a module.
type Import struct {
	Module string `json:"module"`
	Name   string `json:"name"`
	Kind   string `json:"kind"` // func, memory, table, global, tag
	Type   string `json:"type"` // e.g. "(i32, i32) -> ()"
}

// Export describes one export. Params and Results are set for functions.
type Export struct {
	Name    string   `json:"name"`
	Kind    string   `json:"kind"`
	Params  []string `json:"params"`
	Results []string `json:"results"`
}

// Module is a compiled, instrumented module, shared by every run of it.
type Module struct {
	ID      string
	Size    int // wasm bytes, as given (before instrumentation)
	Imports []Import
	Exports []Export

	wt   *wasmtime.Module
	info *wasmbin.Info
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
	Cached  bool          // found in the in-memory cache
	Elapsed time.Duration // time spent converting, validating and compiling
}

// Compile returns the module for src, from the cache when its bytes were
// compiled before. Concurrent compiles of the same bytes happen once.
// Errors are *Error of kind invalid_module (or host for an unreadable path).
func (e *Engine) Compile(ctx context.Context, src Source) (*Module, CompileInfo, error) {
	start := time.Now()
	if err := ctx.Err(); err != nil {
		return nil, CompileInfo{}, cancelledError()
	}
	if src.ID != "" {
		if countSources(src) != 1 {
			return nil, CompileInfo{}, newError(KindHost, "module: give exactly one of wat, wasm, path, id")
		}
		m, ok := e.cache.get(src.ID)
		if !ok {
			e.cache.miss()
			return nil, CompileInfo{}, newError(KindInvalidModule, "module id %s is not in the cache (never compiled here, or evicted): send the module bytes again", src.ID)
		}
		return m, CompileInfo{Cached: true, Elapsed: time.Since(start)}, nil
	}
	wasm, err := e.loadBytes(src)
	if err != nil {
		return nil, CompileInfo{}, err
	}
	id := ModuleID(wasm)
	if m, ok := e.cache.get(id); ok {
		return m, CompileInfo{Cached: true, Elapsed: time.Since(start)}, nil
	}
	compiled := false // set only in the one caller that compiles
	v, err, _ := e.cache.flight.Do(id, func() (any, error) {
		if m, ok := e.cache.peek(id); ok { // compiled while we waited
			return m, nil
		}
		e.cache.miss() // once per compile, however many callers wait on it
		compiled = true
		m, err := e.compile(id, wasm)
		if err != nil {
			return nil, err
		}
		e.cache.put(m)
		return m, nil
	})
	if err != nil {
		return nil, CompileInfo{}, err
	}
	if !compiled { // served by another caller's compile: a hit for this one
		e.cache.hit()
	}
	return v.(*Module), CompileInfo{Cached: !compiled, Elapsed: time.Since(start)}, nil
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

var wasmMagic = []byte("\x00asm")

// loadBytes turns a source into wasm bytes, converting text first.
func (e *Engine) loadBytes(src Source) ([]byte, error) {
	if countSources(src) != 1 {
		return nil, newError(KindHost, "module: give exactly one of wat, wasm, path, id")
	}
	var raw []byte
	switch {
	case src.WAT != "":
		raw = []byte(src.WAT)
	case src.Wasm != nil:
		raw = src.Wasm
	case src.Path != "":
		var err error
		if raw, err = readModuleFile(src.Path, e.cfg.MaxModuleBytes, e.pathDirs); err != nil {
			return nil, err
		}
	}
	if len(raw) > e.cfg.MaxModuleBytes {
		return nil, tooBig(int64(len(raw)), e.cfg.MaxModuleBytes)
	}
	if bytes.HasPrefix(raw, wasmMagic) {
		return raw, nil
	}
	wasm, err := wasmtime.Wat2Wasm(string(raw))
	if err != nil {
		defer releaseWasmtimeError(err)
		if src.Path != "" { // never quote a file's content: it may be anything
			return nil, &Error{Kind: KindInvalidModule, Message: fmt.Sprintf("module file %q is neither a wasm binary nor valid WAT%s", src.Path, watLocation(err.Error()))}
		}
		return nil, &Error{Kind: KindInvalidModule, Message: "invalid WAT: " + cleanMessage(err.Error())}
	}
	if len(wasm) > e.cfg.MaxModuleBytes {
		return nil, tooBig(int64(len(wasm)), e.cfg.MaxModuleBytes)
	}
	return wasm, nil
}

func tooBig(n int64, max int) *Error {
	return newError(KindInvalidModule, "module is %d bytes; the maximum is %d", n, max)
}

// validate reports wasmtime's verdict on the original bytes as an
// invalid_module error, or nil.
func (e *Engine) validate(wasm []byte) *Error {
	err := wasmtime.ModuleValidate(e.wt, wasm)
	if err == nil {
		return nil
	}
	defer releaseWasmtimeError(err)
	return &Error{Kind: KindInvalidModule, Message: cleanMessage(err.Error())}
}

// compile validates, instruments and compiles wasm. The caller's bytes are
// always validated first, with the engine's feature set: the rewriter
// assumes a valid module, and an invalid one (a global index past the
// module's own count, say) could otherwise name what the rewrite injects.
// Validation is one pass, a few ms per MiB.
func (e *Engine) compile(id string, wasm []byte) (*Module, error) {
	if err := e.validate(wasm); err != nil {
		return nil, err
	}
	instrumented, info, ierr := wasmbin.Instrument(wasm)
	if ierr != nil {
		return nil, &Error{Kind: KindInvalidModule, Message: "unsupported module: " + ierr.Error(), err: ierr}
	}
	wt, err := wasmtime.NewModule(e.wt, instrumented)
	if err != nil {
		defer releaseWasmtimeError(err)
		return nil, &Error{Kind: KindInvalidModule, Message: cleanMessage(err.Error())}
	}
	m := &Module{ID: id, Size: len(wasm), wt: wt, info: info}
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
	return m, nil
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

// moduleCache is an LRU of compiled modules bounded by count and by summed
// wasm size. Evicted modules stay valid for runs still holding them; the
// garbage collector frees them after.
type moduleCache struct {
	maxEntries int
	maxBytes   int64
	flight     singleflight.Group

	mu     sync.Mutex
	order  *list.List // front = most recent; values are *Module
	byID   map[string]*list.Element
	bytes  int64
	hits   uint64
	misses uint64
}

func newModuleCache(maxEntries int, maxBytes int64) *moduleCache {
	return &moduleCache{maxEntries: maxEntries, maxBytes: maxBytes, order: list.New(), byID: map[string]*list.Element{}}
}

func (c *moduleCache) get(id string) (*Module, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byID[id]
	if !ok {
		return nil, false
	}
	c.hits++
	c.order.MoveToFront(el)
	return el.Value.(*Module), true
}

// miss counts a lookup that found nothing and led to a compile (or an
// unknown id).
func (c *moduleCache) miss() {
	c.mu.Lock()
	c.misses++
	c.mu.Unlock()
}

// hit counts a lookup served by a compile another caller did.
func (c *moduleCache) hit() {
	c.mu.Lock()
	c.hits++
	c.mu.Unlock()
}

// peek looks up id without touching the counters or the LRU order.
func (c *moduleCache) peek(id string) (*Module, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byID[id]
	if !ok {
		return nil, false
	}
	return el.Value.(*Module), true
}

func (c *moduleCache) put(m *Module) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byID[m.ID]; ok || c.maxEntries == 0 || int64(m.Size) > c.maxBytes {
		return
	}
	c.byID[m.ID] = c.order.PushFront(m)
	c.bytes += int64(m.Size)
	for c.order.Len() > c.maxEntries || c.bytes > c.maxBytes {
		old := c.order.Remove(c.order.Back()).(*Module)
		delete(c.byID, old.ID)
		c.bytes -= int64(old.Size)
	}
}

// CacheStats is a snapshot of the compile cache.
type CacheStats struct {
	Entries int    `json:"entries"`
	Bytes   int64  `json:"bytes"`
	Hits    uint64 `json:"hits"`
	Misses  uint64 `json:"misses"`
}

// CacheStats reports the compile cache's counters.
func (e *Engine) CacheStats() CacheStats {
	c := e.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Entries: c.order.Len(), Bytes: c.bytes, Hits: c.hits, Misses: c.misses}
}
