package main

// Regression tests, through the real binary, for the wire-size fence of a
// WASI guest's output (issue 10 item 3 applied to issue 12's `output`
// notifications): whatever a guest writes, in whatever pieces and timing,
// the output a run sends on the wire is bounded by a small multiple of
// outputBytes.

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
)

// writerGuest is a WASI command that, count times, writes len bytes of
// value b to fd 1, or to fd 1 and 2 in turn when alternate is set, and
// sleeps 2 ms after each write when sleep is set.
func writerGuest(b byte, length, count int, alternate, sleep bool) string {
	mask, nap := 0, ""
	if alternate {
		mask = 1
	}
	if sleep {
		nap = `(drop (call $poll (i32.const 64) (i32.const 128) (i32.const 1) (i32.const 192)))`
	}
	return fmt.Sprintf(`(module
	  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
	  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
	  (memory (export "memory") 2)
	  (func (export "_start") (local $i i32)
	    (i32.store (i32.const 0) (i32.const 1024))      ;; iovec: the bytes at 1024
	    (i32.store (i32.const 4) (i32.const %[2]d))
	    (memory.fill (i32.const 1024) (i32.const %[1]d) (i32.const %[2]d))
	    (i32.store (i32.const 80) (i32.const 1))         ;; subscription at 64: monotonic clock
	    (i64.store (i32.const 88) (i64.const 2000000))  ;; relative, 2 ms
	    (loop $l
	      (drop (call $write (i32.add (i32.const 1) (i32.and (local.get $i) (i32.const %[4]d)))
	        (i32.const 0) (i32.const 1) (i32.const 8)))
	      %[5]s
	      (local.set $i (i32.add (local.get $i) (i32.const 1)))
	      (br_if $l (i32.lt_u (local.get $i) (i32.const %[3]d))))))`, b, length, count, mask, nap)
}

// TestWASIOutputCostsItsWireSize: a guest that writes a byte at a time
// while switching streams or sleeping (one notification per byte before,
// ~130 wire bytes each) or writes bytes JSON escapes to six (NUL) cannot
// make its output notifications exceed sandbox.OutputWireBudget per
// stream, nor the result's stdout and stderr the same again; the result
// says the output was cut. Ordinary output in big writes is not cut.
func TestWASIOutputCostsItsWireSize(t *testing.T) {
	s := startWire(t)
	id := `"` + strings.Repeat("w", 30) + `"` // the longest id the overhead covers
	for _, tc := range []struct {
		name        string
		b           byte
		length      int
		count       int
		alternate   bool
		sleep       bool
		outputBytes uint64
		truncated   bool
	}{
		{"a byte per stream switch", 'a', 1, 200_000, true, false, 64 << 10, true},
		{"a NUL per stream switch", 0, 1, 200_000, true, false, 64 << 10, true},
		{"a byte per 2 ms sleep", 'a', 1, 400, false, true, 256, true},
		{"16 KiB writes of NUL", 0, 16 << 10, 64, false, false, 1 << 20, true},
		{"16 KiB writes of <", '<', 16 << 10, 64, true, false, 1 << 20, true},
		{"16 KiB writes of text", 'a', 16 << 10, 64, false, false, 1 << 20, false},
		{"16 KiB writes of text, both streams", 'a', 16 << 10, 128, true, false, 1 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			outputs, resp := s.run(t, id, map[string]any{
				"module":       map[string]any{"wat": writerGuest(tc.b, tc.length, tc.count, tc.alternate, tc.sleep)},
				"limits":       map[string]any{"outputBytes": tc.outputBytes, "fuel": hugeFuel, "timeoutMs": 110_000},
				"capabilities": map[string]any{"wasi": true},
			}, "output")
			var res struct {
				ExitCode        int             `json:"exitCode"`
				Stdout          json.RawMessage `json:"stdout"`
				Stderr          json.RawMessage `json:"stderr"`
				OutputTruncated bool            `json:"outputTruncated"`
			}
			if resp.err != nil || json.Unmarshal(resp.result, &res) != nil {
				t.Fatalf("want a result, got error %s", resp.err)
			}
			wire := 0
			for _, f := range outputs {
				wire += f.size
			}
			rss := vmHWM(t, s.cmd.Process.Pid)
			budget := sandbox.OutputWireBudget(tc.outputBytes)
			t.Logf("guest wrote %d×%d bytes: %d notifications, %d wire bytes, result frame %d bytes (outputBytes %d, budget %d per stream), sidecar peak RSS %s, %v",
				tc.count, tc.length, len(outputs), wire, resp.size, tc.outputBytes, budget, mib(rss), time.Since(start).Round(time.Millisecond))
			if uint64(wire) > 2*budget {
				t.Errorf("%d output notifications took %d bytes on the wire, over 2 × %d", len(outputs), wire, budget)
			}
			// The result frame: the two streams (each within its budget)
			// plus the rest of a run result.
			if fields := len(res.Stdout) + len(res.Stderr); uint64(fields) > 2*budget {
				t.Errorf("the result's stdout and stderr take %d bytes, over 2 × %d", fields, budget)
			}
			if res.OutputTruncated != tc.truncated {
				t.Errorf("outputTruncated %v, want %v", res.OutputTruncated, tc.truncated)
			}
			if !tc.truncated {
				want := tc.count * tc.length
				got := len(wireBytes(t, res.Stdout)) + len(wireBytes(t, res.Stderr))
				if got != want {
					t.Errorf("the result holds %d bytes of output, want all %d", got, want)
				}
			}
		})
	}
}
