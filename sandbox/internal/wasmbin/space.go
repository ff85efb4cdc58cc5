package wasmbin

import "fmt"

// idxKind names one of the module's index spaces.
type idxKind int

const (
	idxFunc idxKind = iota
	idxTable
	idxMemory
	idxGlobal
	idxType
	idxData
	idxElem
	idxTag
	numIdxKinds
)

var idxNames = [numIdxKinds]string{
	idxFunc: "function", idxTable: "table", idxMemory: "memory", idxGlobal: "global",
	idxType: "type", idxData: "data segment", idxElem: "element segment", idxTag: "tag",
}

// indexSpace holds the size of each index space of the original module.
// The rewriter appends its functions, globals and types right after these,
// so an index at or past a count would reach something injected: every
// index the module names is checked here, whether or not wasmtime would
// have validated the module first.
type indexSpace [numIdxKinds]uint64

// IndexError reports an index past the module's own count.
type IndexError struct {
	Kind   string // "function", "global", ...
	Index  uint64
	Count  uint64
	Offset int // absolute offset of the immediate
}

func (e *IndexError) Error() string {
	return fmt.Sprintf("offset %d: %s index %d out of range (the module has %d)", e.Offset, e.Kind, e.Index, e.Count)
}

// check returns an *IndexError when v is not an index of kind k. A nil
// space checks nothing.
func (s *indexSpace) check(k idxKind, v uint64, at int) error {
	if s == nil || v < s[k] {
		return nil
	}
	return &IndexError{Kind: idxNames[k], Index: v, Count: s[k], Offset: at}
}
