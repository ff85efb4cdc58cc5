package sandbox

import (
	"strings"
	"testing"
)

// TestSourceHashCollision: sources whose hashes collide (forced here; the
// seeded hash makes it rare, not impossible) are told apart by their
// bytes, and a colliding stranger is a miss, never another module.
func TestSourceHashCollision(t *testing.T) {
	c := newModuleCache(8, 1<<20)
	a := &Module{ID: IDPrefix + "a", CompiledSize: 100}
	b := &Module{ID: IDPrefix + "b", CompiledSize: 100}
	const h = 42
	srcA, srcB := moduleBytes{text: "(module $a)"}, moduleBytes{bin: []byte("(module $b)")}
	c.put(a, h, srcA)
	c.put(b, h, srcB)
	if m, ok := c.lookupSource(h, srcA); !ok || m != a {
		t.Errorf("a: %v %v", m, ok)
	}
	if m, ok := c.lookupSource(h, moduleBytes{bin: []byte("(module $a)")}); !ok || m != a {
		t.Errorf("a's bytes as binary: %v %v", m, ok)
	}
	if m, ok := c.lookupSource(h, srcB); !ok || m != b {
		t.Errorf("b: %v %v", m, ok)
	}
	if m, ok := c.lookupSource(h, moduleBytes{text: "(module $c)"}); ok {
		t.Errorf("a stranger of the same hash and length found %s", m.ID)
	}
	// Evicting a drops its source; b's survives under the shared hash.
	c.maxEntries = 1
	c.put(b, h, srcB)
	if _, ok := c.lookupSource(h, srcA); ok {
		t.Error("a's source outlived a")
	}
	if m, ok := c.lookupSource(h, srcB); !ok || m != b {
		t.Errorf("b after a's eviction: %v %v", m, ok)
	}
	c.put(&Module{ID: IDPrefix + "d", CompiledSize: 100}, 7, moduleBytes{text: "d"})
	if len(c.sources[h]) != 0 || len(c.sources) != 1 || c.bytes != 101 {
		t.Errorf("left behind: sources %v, bytes %d", c.sources, c.bytes)
	}
}

// TestSourcesFitTheBound: the sources of one module never take the cache
// past its byte bound, however many are added.
func TestSourcesFitTheBound(t *testing.T) {
	c := newModuleCache(8, 1000)
	m := &Module{ID: IDPrefix + "m", CompiledSize: 600}
	for i := range 10 {
		text := string(rune('a'+i)) + strings.Repeat(" ", 150)
		c.put(m, uint64(i), moduleBytes{text: text})
		if c.bytes > c.maxBytes {
			t.Fatalf("after source %d: %d bytes, the bound is %d", i, c.bytes, c.maxBytes)
		}
	}
	ent := c.byID[m.ID].Value.(*cacheEntry)
	if want := int64(600 + ent.sourceBytes()); c.bytes != want || len(ent.sources) != 2 {
		t.Errorf("bytes %d (want %d), %d sources (want the latest 2)", c.bytes, want, len(ent.sources))
	}
	if got, ok := c.lookupSource(9, moduleBytes{text: "j" + strings.Repeat(" ", 150)}); !ok || got != m {
		t.Error("the latest source is not known")
	}
}

// TestEncodedSourcesKeptApart: a wire literal and a module's bytes (or a
// literal of the other field) with the same content and, forced here, the
// same hash never find each other's module: the kind is compared too.
func TestEncodedSourcesKeptApart(t *testing.T) {
	c := newModuleCache(8, 1<<20)
	const h = 42
	content := []byte(`"(module)"`)
	kinds := []moduleBytes{{bin: content}, {bin: content, encoded: encodedWAT}, {bin: content, encoded: encodedWasm}}
	mods := make([]*Module, len(kinds))
	for i, b := range kinds {
		mods[i] = &Module{ID: IDPrefix + string(rune('a'+i)), CompiledSize: 100}
		c.put(mods[i], h, b)
	}
	for i, b := range kinds {
		if m, ok := c.lookupSource(h, b); !ok || m != mods[i] {
			t.Errorf("kind %d: found %v %v, want %s", i, m, ok, mods[i].ID)
		}
	}
	if m, ok := c.lookupSource(h, moduleBytes{bin: []byte(`"(module) "`), encoded: encodedWAT}); ok {
		t.Errorf("another literal of the same hash found %s", m.ID)
	}
	if a, b := c.sourceHash(kinds[0]), c.sourceHash(kinds[1]); a == b {
		t.Errorf("bytes and a wat literal of the same content hash alike (%x)", a)
	}
}
