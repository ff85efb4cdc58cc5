package sandbox

import (
	"math"
	"testing"

	"github.com/sandboxd/sandboxd/protocol"
)

// TestInstanceIDsFitTheProtocolBound: the sidecar refuses an `instance`
// longer than protocol.MaxInstanceIDBytes without looking it up, so no id
// the engine makes may be longer, the counter at its largest included.
func TestInstanceIDsFitTheProtocolBound(t *testing.T) {
	var tbl instanceTable
	tbl.next = math.MaxUint64 - 1
	id := tbl.nextIDLocked()
	if len(id) != protocol.MaxInstanceIDBytes {
		t.Fatalf("the longest id %q has %d bytes; protocol.MaxInstanceIDBytes is %d", id, len(id), protocol.MaxInstanceIDBytes)
	}
}
