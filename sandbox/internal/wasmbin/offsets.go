package wasmbin

import "sort"

// OffsetMap translates code offsets in the rewritten module back to the
// module the caller sent. The rewrite appends types, globals and exports
// before the code section, re-encodes body sizes and replaces instructions
// with calls, so wasmtime's trap offsets point into bytes the caller never
// saw. Each anchor says that the rewritten byte at New is the original
// byte at Orig, and so are the bytes after it up to the next anchor.
type OffsetMap struct {
	anchors []offsetAnchor // sorted by new, strictly increasing
	end     int            // rewritten offset where the original bodies end
}

type offsetAnchor struct{ new, orig int }

// add records an anchor; anchors come in increasing rewritten order.
func (m *OffsetMap) add(newOff, orig int) {
	if n := len(m.anchors); n > 0 && m.anchors[n-1].new == newOff {
		m.anchors[n-1].orig = orig
		return
	}
	m.anchors = append(m.anchors, offsetAnchor{newOff, orig})
}

// shift moves every anchor by delta (code is built before its final
// position in the module is known).
func (m *OffsetMap) shift(delta int) {
	for i := range m.anchors {
		m.anchors[i].new += delta
	}
	m.end += delta
}

// Original returns the offset in the caller's module of the rewritten
// module's byte at off, or false when off lies outside the module's own
// function bodies (in an injected helper, or outside the code section).
func (m *OffsetMap) Original(off int) (int, bool) {
	if m == nil || off >= m.end {
		return 0, false
	}
	i := sort.Search(len(m.anchors), func(i int) bool { return m.anchors[i].new > off }) - 1
	if i < 0 {
		return 0, false
	}
	a := m.anchors[i]
	return a.orig + off - a.new, true
}
