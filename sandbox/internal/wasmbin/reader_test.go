package wasmbin

import (
	"math"
	"testing"
)

func TestLEBRoundTrip(t *testing.T) {
	for _, v := range []int64{0, 1, -1, 63, 64, -64, -65, 0x7f, 0x80, noCap, math.MaxInt32, math.MinInt32, math.MaxInt64, math.MinInt64} {
		r := newReader(appendSLEB(nil, v), 0)
		if got, err := r.sleb(64); err != nil || got != v || !r.eof() {
			t.Errorf("sleb(%d) = %d, %v", v, got, err)
		}
		u := uint64(v)
		r = newReader(appendULEB(nil, u), 0)
		if got, err := r.uleb(64); err != nil || got != u || !r.eof() {
			t.Errorf("uleb(%d) = %d, %v", u, got, err)
		}
	}
}

func TestLEBLimits(t *testing.T) {
	tests := []struct {
		name   string
		in     []byte
		bits   uint
		signed bool
		ok     bool
	}{
		{"u32 max", []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, 32, false, true},
		{"u32 overflow", []byte{0xff, 0xff, 0xff, 0xff, 0x1f}, 32, false, false},
		{"u32 too long", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, 32, false, false},
		{"u32 padded", []byte{0x80, 0x80, 0x00}, 32, false, true},
		{"s33 max", []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, 33, true, true},
		{"s33 min", []byte{0x80, 0x80, 0x80, 0x80, 0x70}, 33, true, true},
		{"s33 bad sign bits", []byte{0x80, 0x80, 0x80, 0x80, 0x20}, 33, true, false},
		{"s64 -1 padded", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, 64, true, true},
		{"s64 overflow", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x3f}, 64, true, false},
		{"truncated", []byte{0x80}, 32, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newReader(tc.in, 0)
			var err error
			if tc.signed {
				_, err = r.sleb(tc.bits)
			} else {
				_, err = r.uleb(tc.bits)
			}
			if (err == nil) != tc.ok {
				t.Errorf("err = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
