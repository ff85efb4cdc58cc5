package sandbox

import (
	"bytes"
	"testing"
)

// TestFillSlicedStopsBetweenSlices: random_get fills its buffer a slice
// at a time and stops at the first check of the fence that says stop, so
// a 1 GiB random_get ends within a slice of the deadline (it took 12 s
// against 50 ms in one call).
func TestFillSlicedStopsBetweenSlices(t *testing.T) {
	dst := make([]byte, 4*transferSlice+100)
	checks := 0
	stop, err := fillSliced(dst, func(b []byte) error {
		for i := range b {
			b[i] = 1
		}
		return nil
	}, func() stopReason {
		if checks++; checks == 2 {
			return stopTimedOut
		}
		return stopNone
	})
	if err != nil || stop != stopTimedOut {
		t.Fatalf("fillSliced = %v, %v; want stopTimedOut", stop, err)
	}
	if filled := bytes.Count(dst, []byte{1}); filled != 2*transferSlice {
		t.Errorf("%d bytes filled, want the two slices before the stop (%d)", filled, 2*transferSlice)
	}
	// Without a stop, every byte; the last slice is short.
	dst = make([]byte, 3*transferSlice+7)
	if stop, _ := fillSliced(dst, func(b []byte) error { copy(b, bytes.Repeat([]byte{2}, len(b))); return nil }, func() stopReason { return stopNone }); stop != stopNone || bytes.Count(dst, []byte{2}) != len(dst) {
		t.Errorf("unstopped fill: %v, %d of %d bytes", stop, bytes.Count(dst, []byte{2}), len(dst))
	}
}

// TestScratchIovecIsOutsideTheSlice: the scratch iovec never overlaps the
// slice it describes and stays 4-aligned inside memory, at either end of
// a buffer that fills memory.
func TestScratchIovecIsOutsideTheSlice(t *testing.T) {
	const page = 64 << 10
	for _, c := range []struct{ mem, lo, hi uint64 }{
		{2 * page, 0, transferSlice},
		{2 * page, page - 4, 2*page - 4},
		{2 * page, page, 2 * page},
		{3 * page, 5, 5 + transferSlice},
		{2*page + 0, page + 3, 2 * page},
	} {
		s := scratchIovec(c.mem, c.lo, c.hi)
		if s%4 != 0 || s+scratchBytes > c.mem || (s < c.hi && c.lo < s+scratchBytes) {
			t.Errorf("scratchIovec(%d, %d, %d) = %d", c.mem, c.lo, c.hi, s)
		}
	}
}
