package sandbox

import (
	"bufio"
	"bytes"
	"container/list"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/sandbox/internal/wasmbin"
)

// moduleCache is an LRU of compiled modules bounded by count and by their
// summed compiled size (Module.CompiledSize). A WAT text is known by an
// alias, the hash of the text, which goes with its module's entry.
// Evicted modules stay valid for runs still holding them; the garbage
// collector frees them after.
type moduleCache struct {
	maxEntries int // 0: nothing is kept
	maxBytes   int64

	mu      sync.Mutex
	order   *list.List // front = most recent; values are *cacheEntry
	byID    map[string]*list.Element
	aliases map[string]string // text key → module id
	bytes   int64
	hits    uint64
	misses  uint64
}

type cacheEntry struct {
	m       *Module
	aliases []string
}

func newModuleCache(maxEntries int, maxBytes int64) *moduleCache {
	return &moduleCache{maxEntries: maxEntries, maxBytes: maxBytes, order: list.New(),
		byID: map[string]*list.Element{}, aliases: map[string]string{}}
}

// get looks a module up by id, counting a hit.
func (c *moduleCache) get(id string) (*Module, bool) {
	return c.lookup(id)
}

// lookup finds a module by id or text key, counting a hit.
func (c *moduleCache) lookup(key string) (*Module, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.find(key)
	if !ok {
		return nil, false
	}
	c.hits++
	c.order.MoveToFront(el)
	return el.Value.(*cacheEntry).m, true
}

func (c *moduleCache) find(key string) (*list.Element, bool) {
	if id, ok := c.aliases[key]; ok {
		key = id
	}
	el, ok := c.byID[key]
	return el, ok
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

// peek looks up an id or text key without touching the counters or the
// LRU order.
func (c *moduleCache) peek(key string) (*Module, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.find(key)
	if !ok {
		return nil, false
	}
	return el.Value.(*cacheEntry).m, true
}

// put keeps m (and the text key alias, if any), evicting the least
// recently used modules past either bound.
func (c *moduleCache) put(m *Module, alias string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byID[m.ID]; ok {
		if alias != "" {
			if _, known := c.aliases[alias]; !known {
				ent := el.Value.(*cacheEntry)
				ent.aliases = append(ent.aliases, alias)
				c.aliases[alias] = m.ID
			}
		}
		return
	}
	if c.maxEntries == 0 || int64(m.CompiledSize) > c.maxBytes {
		return
	}
	ent := &cacheEntry{m: m}
	if alias != "" {
		ent.aliases = []string{alias}
		c.aliases[alias] = m.ID
	}
	c.byID[m.ID] = c.order.PushFront(ent)
	c.bytes += int64(m.CompiledSize)
	for c.order.Len() > c.maxEntries || c.bytes > c.maxBytes {
		old := c.order.Remove(c.order.Back()).(*cacheEntry)
		delete(c.byID, old.m.ID)
		for _, a := range old.aliases {
			delete(c.aliases, a)
		}
		c.bytes -= int64(old.m.CompiledSize)
	}
}

// CacheStats is a snapshot of the compile cache.
type CacheStats struct {
	Entries int    `json:"entries"`
	Bytes   int64  `json:"bytes"` // summed CompiledSize of the modules kept
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

// ---------------------------------------------------------------------------
// One compile for many callers

// compileFlight runs at most one compile per key at a time. Unlike
// singleflight, the compile has its own context, cancelled when the last
// caller waiting for it has gone: one caller's cancel does not fail the
// others, and a compile nobody wants stops at once.
type compileFlight struct {
	base context.Context // cancelled by Engine.Close
	wg   sync.WaitGroup  // the compile goroutines, waited for by Close

	mu    sync.Mutex
	calls map[string]*flightCall
}

type flightResult struct {
	m        *Module
	cached   bool // found in the cache after all
	fromDisk bool
}

type flightCall struct {
	done    chan struct{}
	res     flightResult
	err     error
	waiters int
	cancel  context.CancelFunc
}

// do returns the result of the compile of key, starting fn for it if none
// is in flight. shared says the result came from a compile another caller
// started.
func (f *compileFlight) do(ctx context.Context, key string, fn func(context.Context) (flightResult, error)) (res flightResult, shared bool, err error) {
	f.mu.Lock()
	c, shared := f.calls[key]
	if !shared {
		cctx, cancel := context.WithCancel(f.base)
		c = &flightCall{done: make(chan struct{}), cancel: cancel}
		f.calls[key] = c
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			c.res, c.err = fn(cctx)
			f.mu.Lock()
			if f.calls[key] == c {
				delete(f.calls, key)
			}
			f.mu.Unlock()
			cancel()
			close(c.done)
		}()
	}
	c.waiters++
	f.mu.Unlock()
	select {
	case <-c.done:
		return c.res, shared, c.err
	case <-ctx.Done():
		f.mu.Lock()
		if c.waiters--; c.waiters == 0 {
			c.cancel()
			if f.calls[key] == c { // a new caller starts afresh
				delete(f.calls, key)
			}
		}
		f.mu.Unlock()
		return flightResult{}, shared, &Error{Kind: KindCancelled, Message: "compile cancelled by the caller", err: errCancelled}
	}
}

// ---------------------------------------------------------------------------
// The persistent cache

// artefactStore keeps compiled modules on disk (Config.CacheDir), one file
// per module id, in a directory named after the build of this program:
// the rewrite and wasmtime's code generation are part of the artefact,
// so another build must not read it. Deserializing trusts the bytes
// (they are machine code), so the directory must be writable only by the
// operator; a checksum guards against torn or corrupted files, and a
// file that fails to load is compiled again and replaced.
type artefactStore struct {
	dir string
}

// storedArtefact heads one file: artefactMagic, then a frame (see
// compilechild.go) whose payload is the compiled module.
type storedArtefact struct {
	Payload  int
	ID       string
	WasmSize int
	Info     *wasmbin.Info
	Sum      string // sha256 of the payload, hex
}

const artefactMagic = "sandboxd compiled module v1\n"

func openArtefactStore(dir string) (*artefactStore, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	build, err := buildFingerprint()
	if err != nil {
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	sub := filepath.Join(abs, "modules-"+build)
	if err := os.MkdirAll(sub, 0o700); err != nil {
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	return &artefactStore{dir: sub}, nil
}

// buildFingerprint names this build of the program: the build IDs the Go
// toolchain and the linker write into the executable (a hash of the
// build's inputs and output), or, in a binary without them, a hash of the
// whole file (tens of milliseconds, once per engine).
func buildFingerprint() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	if f, err := elf.Open(exe); err == nil {
		found := false
		for _, name := range []string{".note.go.buildid", ".note.gnu.build-id"} {
			if sec := f.Section(name); sec != nil {
				if b, err := sec.Data(); err == nil && len(b) > 0 {
					h.Write(b)
					found = true
				}
			}
		}
		f.Close()
		if found {
			return hex.EncodeToString(h.Sum(nil))[:16], nil
		}
	}
	f, err := os.Open(exe)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func (s *artefactStore) path(id string) string {
	return filepath.Join(s.dir, strings.TrimPrefix(id, IDPrefix)+".cwasm")
}

// aliasPath names the file that maps a text key ("wat:<hex>") to the id of
// the wasm the text became.
func (s *artefactStore) aliasPath(key string) string {
	return filepath.Join(s.dir, strings.Replace(key, ":", "-", 1)+".id")
}

// idOfText returns the id a text compiled to, from the persistent cache.
func (e *Engine) idOfText(key string) string {
	if e.store == nil {
		return ""
	}
	b, err := os.ReadFile(e.store.aliasPath(key))
	if id := string(b); err == nil && strings.HasPrefix(id, IDPrefix) && len(id) == len(IDPrefix)+64 {
		return id
	}
	return ""
}

// saveAlias records the id a text compiled to.
func (e *Engine) saveAlias(key, id string) {
	if e.store != nil {
		e.writeAtomically(e.store.aliasPath(key), []byte(id))
	}
}

// writeAtomically writes a file of the persistent cache through a
// temporary file renamed into place. A failure only costs a compile later.
func (e *Engine) writeAtomically(path string, b []byte) {
	tmp, err := os.CreateTemp(e.store.dir, ".tmp-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), path) != nil {
		os.Remove(tmp.Name())
	}
}

// loadFromDisk returns the module id from the persistent cache, or nil.
func (e *Engine) loadFromDisk(id string) *Module {
	if e.store == nil {
		return nil
	}
	f, err := os.Open(e.store.path(id))
	if err != nil {
		return nil
	}
	defer f.Close()
	r := bufio.NewReader(f)
	magic := make([]byte, len(artefactMagic))
	var a storedArtefact
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != artefactMagic || readFrameHeader(r, &a) != nil || a.ID != id || a.Info == nil {
		return nil
	}
	compiled, err := readPayload(r, a.Payload, math.MaxInt32)
	if sum := sha256.Sum256(compiled); err != nil || hex.EncodeToString(sum[:]) != a.Sum {
		return nil
	}
	wt, err := wasmtime.NewModuleDeserialize(e.wt, compiled)
	if err != nil {
		releaseWasmtimeError(err)
		return nil
	}
	return e.newModule(id, a.WasmSize, len(compiled), wt, a.Info)
}

// saveToDisk writes m's artefact to the persistent cache, atomically
// (a temporary file renamed into place). A failure only costs a compile
// later.
func (e *Engine) saveToDisk(m *Module, compiled []byte) {
	if e.store == nil {
		return
	}
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	w.WriteString(artefactMagic)
	sum := sha256.Sum256(compiled)
	if writeFrame(w, storedArtefact{Payload: len(compiled), ID: m.ID, WasmSize: m.Size, Info: m.info, Sum: hex.EncodeToString(sum[:])}, moduleBytes{bin: compiled}) != nil {
		return
	}
	e.writeAtomically(e.store.path(m.ID), buf.Bytes())
}
