package script

// The guests' Go runtime collects garbage on its one thread, inside the
// evaluations: with the default GOGC of 100 and a heap goal of at least 4
// MB, an interpreter whose own heap is a few MB (Lua's 3) collects every
// few dozen evaluations of `1+1` (Lua's compiler allocates 30 KB per
// chunk), each collection marking the whole heap, and while one is under
// way every pointer write pays the write barrier and every allocation an
// assist. Told its memory cap, a guest lets its heap grow further
// (gcPercent) and sets the Go runtime's memory limit under the cap, so
// that the collector collects before the heap reaches the fence: garbage
// never takes the guest's memory to its cap, only live data does.
//
// The limit is Go's own view of its memory, and on wasm that view is
// short of the linear memory in two ways the cap is not: the module's
// data below the heap, which the Go runtime does not count (heapBase),
// and memory Go counts as returned to the system, which wasm cannot take
// back (linear memory never shrinks). Go's heap grows in chunks of 4 MiB
// (the page allocator's), whenever no free run of pages fits an
// allocation — as happens while a collection is under way, or to a large
// string or array among freed pieces too small for it — and each chunk
// stays in linear memory, where the limit, which counts only the part of
// it in use, lets the heap grow again. collectorSlack is that growth:
// with it the memory limit leaves room under the cap for the chunks a
// heap at its limit still takes.

// heapChunkBytes is the unit the Go runtime grows its heap by (its page
// allocator's chunk: 512 pages of 8 KiB).
const heapChunkBytes = 4 << 20

// collectorSlack is what the memory limit leaves under the cap beyond
// the memory below the Go heap: three of the heap's growth chunks, for
// the heap's growth past its soft limit (measured up to 7.9 MiB, for
// tables of up to 100,000 numbers or a string grown to 2 MB, made and
// dropped in a loop: runtimes/README.md, "The collector"), and one more
// for the next chunk.
const collectorSlack = 3 * heapChunkBytes

// minGCPercentLimit is the least memory limit under which a guest takes
// gcPercent (gc_wasip1.go): under a smaller one Go's default GOGC
// collects before the limit anyway.
const minGCPercentLimit = 16 << 20

// collectorCap is the cap FitCollector last fitted the collector to.
var collectorCap uint64

// FitCollector sets the Go runtime's collector for a guest whose linear
// memory is capped at capBytes (done once per cap): the memory limit is
// the cap less what lies below the Go heap (the module's data) and
// collectorSlack (CollectorLimit), and GOGC is gcPercent when that limit
// is at least minGCPercentLimit. Outside a wasm guest it changes nothing.
func FitCollector(capBytes uint64) {
	if capBytes == collectorCap {
		return
	}
	collectorCap = capBytes
	fitCollector(capBytes)
}

// CollectorLimit is the memory limit of a guest capped at capBytes
// whose Go heap begins at heapBase in its linear memory, and whether it
// takes gcPercent; a limit of 0 is none (the cap leaves no room above
// the heap's base and collectorSlack: the cap is then the only fence).
func CollectorLimit(capBytes, heapBase uint64) (limit uint64, raiseGCPercent bool) {
	below := heapBase + collectorSlack
	if capBytes <= below {
		return 0, false
	}
	limit = capBytes - below
	return limit, limit >= minGCPercentLimit
}
