package sandbox

import (
	"container/list"
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
)

// moduleCache is an LRU of compiled modules bounded by count and by the
// bytes it holds: each module's compiled size (Module.CompiledSize) plus
// the sources it is known by. A source is a text or binary that compiled
// to the module; a later Compile of the same bytes finds the module
// through it with one fast hash of the bytes and one comparison, without
// converting, validating, hashing them with sha256 or starting a compile
// child. Sources go with their module's entry: evicting the module drops
// them. Evicted modules stay valid for runs still holding them; the
// garbage collector frees them after.
type moduleCache struct {
	maxEntries int // 0: nothing is kept
	maxBytes   int64
	seed       maphash.Seed // per cache: a parent cannot aim collisions at it

	mu      sync.Mutex
	order   *list.List // front = most recent; values are *cacheEntry
	byID    map[string]*list.Element
	sources map[uint64][]*knownSource // by sourceHash of the bytes
	bytes   int64
	hits    uint64
	misses  uint64
}

type cacheEntry struct {
	m       *Module
	sources []*knownSource // oldest first, at most maxSourcesPerModule
}

func (ent *cacheEntry) sourceBytes() int64 {
	var n int64
	for _, s := range ent.sources {
		n += int64(len(s.content))
	}
	return n
}

// knownSource is a copy of bytes that compiled to el's module. The copy is
// what a hit is compared with, so a hash collision can only cost a miss,
// never run another module, and a caller that reuses its buffer after
// Compile cannot change what the cache recognises.
type knownSource struct {
	hash    uint64
	encoded byte // moduleBytes.encoded: 0 for a module's bytes
	content string
	el      *list.Element
}

// maxSourcesPerModule bounds the sources one module is known by: a parent
// sending one module in endless formattings (each text compiles to the
// same wasm) keeps only the latest few, not a growing list.
const maxSourcesPerModule = 4

func newModuleCache(maxEntries int, maxBytes int64) *moduleCache {
	return &moduleCache{maxEntries: maxEntries, maxBytes: maxBytes, seed: maphash.MakeSeed(), order: list.New(),
		byID: map[string]*list.Element{}, sources: map[uint64][]*knownSource{}}
}

// sourceHash is the key of a source's bytes: text and binary alike, since
// what a module's bytes compile to depends on the bytes alone.
//
// A wire literal (b.encoded) hashes with its kind in front; its entries
// are told apart from bytes by the kind as well (findSourceLocked), so
// equal hashes and even equal content never cross kinds.
func (c *moduleCache) sourceHash(b moduleBytes) uint64 {
	if b.encoded != 0 {
		var h maphash.Hash
		h.SetSeed(c.seed)
		h.WriteByte(b.encoded)
		h.Write(b.bin)
		return h.Sum64()
	}
	if b.text != "" {
		return maphash.String(c.seed, b.text)
	}
	return maphash.Bytes(c.seed, b.bin)
}

// get looks a module up by id, counting a hit.
func (c *moduleCache) get(id string) (*Module, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byID[id]
	return c.hitLocked(el, ok)
}

// lookupSource finds the module b compiled to, counting a hit; h is
// sourceHash(b).
func (c *moduleCache) lookupSource(h uint64, b moduleBytes) (*Module, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.findSourceLocked(h, b)
	return c.hitLocked(el, ok)
}

// peekSource is lookupSource without touching the counters or the LRU
// order.
func (c *moduleCache) peekSource(h uint64, b moduleBytes) (*Module, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.findSourceLocked(h, b); ok {
		return el.Value.(*cacheEntry).m, true
	}
	return nil, false
}

func (c *moduleCache) findSourceLocked(h uint64, b moduleBytes) (*list.Element, bool) {
	for _, s := range c.sources[h] {
		if s.encoded == b.encoded && b.equal(s.content) {
			return s.el, true
		}
	}
	return nil, false
}

func (c *moduleCache) hitLocked(el *list.Element, ok bool) (*Module, bool) {
	if !ok {
		return nil, false
	}
	c.hits++
	c.order.MoveToFront(el)
	return el.Value.(*cacheEntry).m, true
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

// peek looks up an id without touching the counters or the LRU order.
func (c *moduleCache) peek(id string) (*Module, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byID[id]; ok {
		return el.Value.(*cacheEntry).m, true
	}
	return nil, false
}

// put keeps m, known also by the source b whose sourceHash is h (b may be
// empty: a module loaded by id), evicting the least recently used
// modules past either bound. A module already kept just gains the
// source.
func (c *moduleCache) put(m *Module, h uint64, b moduleBytes) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byID[m.ID]
	if !ok {
		if c.maxEntries == 0 || int64(m.CompiledSize) > c.maxBytes {
			return
		}
		el = c.order.PushFront(&cacheEntry{m: m})
		c.byID[m.ID] = el
		c.bytes += int64(m.CompiledSize)
	}
	ent := el.Value.(*cacheEntry)
	if size := int64(b.size()); size > 0 && int64(m.CompiledSize)+size <= c.maxBytes {
		if _, known := c.findSourceLocked(h, b); !known {
			// The entry alone must fit: older sources make room.
			for len(ent.sources) == maxSourcesPerModule ||
				len(ent.sources) > 0 && int64(m.CompiledSize)+ent.sourceBytes()+size > c.maxBytes {
				c.dropSourceLocked(ent, ent.sources[0])
			}
			s := &knownSource{hash: h, encoded: b.encoded, content: b.clone(), el: el}
			ent.sources = append(ent.sources, s)
			c.sources[h] = append(c.sources[h], s)
			c.bytes += size
		}
	}
	for c.order.Len() > c.maxEntries || c.bytes > c.maxBytes {
		back := c.order.Back()
		if back == el && c.order.Len() == 1 {
			break // m alone fits (checked above)
		}
		if back == el { // keep the module just put; evict the one before
			back = back.Prev()
		}
		old := c.order.Remove(back).(*cacheEntry)
		delete(c.byID, old.m.ID)
		for len(old.sources) > 0 {
			c.dropSourceLocked(old, old.sources[0])
		}
		c.bytes -= int64(old.m.CompiledSize)
	}
}

// dropSourceLocked forgets one source of ent.
func (c *moduleCache) dropSourceLocked(ent *cacheEntry, s *knownSource) {
	ent.sources = slices.DeleteFunc(ent.sources, func(x *knownSource) bool { return x == s })
	list := slices.DeleteFunc(c.sources[s.hash], func(x *knownSource) bool { return x == s })
	if len(list) == 0 {
		delete(c.sources, s.hash)
	} else {
		c.sources[s.hash] = list
	}
	c.bytes -= int64(len(s.content))
}

// CacheStats is a snapshot of the compile cache.
type CacheStats struct {
	Entries int    `json:"entries"`
	Bytes   int64  `json:"bytes"` // summed CompiledSize of the modules kept, plus their known sources
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

// flightKey is the flight of a compile of key under lim: callers share a
// compile only when they gave the same compile limits, so that one
// caller's tight compileTimeoutMs does not fail another's compile of the
// same bytes, nor a generous one keep a caller waiting past its own.
func flightKey(key string, lim compileLimits) string {
	return fmt.Sprintf("%s\x00%d\x00%d", key, lim.timeout, lim.memoryBytes)
}

// errCompileCancelled is the error of a compile its caller gave up.
func errCompileCancelled() *Error {
	return &Error{Kind: KindCancelled, Message: "compile cancelled by the caller", err: errCancelled}
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
		return flightResult{}, shared, errCompileCancelled()
	}
}
