package script

// The guests' Go runtime collects garbage on its one thread, inside the
// evaluations: with the default GOGC of 100 and a heap goal of at least 4
// MB, an interpreter whose own heap is a few MB (Lua's 3) collects every
// few dozen evaluations of `1+1` (Lua's compiler allocates 30 KB per
// chunk), each collection marking the whole heap, and while one is under
// way every pointer write pays the write barrier and every allocation an
// assist. Told its memory cap, a guest lets its heap grow further
// (gcPercent) and sets the Go runtime's memory limit under the cap, so
// that the collector works harder as the heap nears the cap rather than
// letting it reach the fence: a snippet whose live data fits the cap
// keeps fitting, and one whose data does not still meets the fence.

// gcPercent is the guests' GOGC once they know their cap: the heap may
// grow to five times what the last collection kept before the next one
// (at least 16 MB), within the memory limit.
const gcPercent = 400

// collectorSlack is what the memory limit leaves under the cap beyond the
// memory below the Go heap: the Go runtime's own overshoot of its soft
// limit, and the table storage the cap also counts.
const collectorSlack = 2 << 20

// collectorCap is the cap FitCollector last fitted the collector to.
var collectorCap uint64

// FitCollector sets the Go runtime's collector for a guest whose linear
// memory is capped at capBytes (done once per cap): the memory limit is
// the cap less what lies below the Go heap (the module's data) and
// collectorSlack, and GOGC is gcPercent. Where the cap leaves too little
// room, or outside a wasm guest, it changes nothing.
func FitCollector(capBytes uint64) {
	if capBytes == collectorCap {
		return
	}
	collectorCap = capBytes
	fitCollector(capBytes)
}
