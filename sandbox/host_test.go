package sandbox_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// TestLogLineCostIsTheJSONSize: a line's cost is exactly the size
// encoding/json gives it on the wire, plus the envelope overhead, for every
// byte value, the runes encoding/json escapes, and random mixtures of them.
func TestLogLineCostIsTheJSONSize(t *testing.T) {
	check := func(s string) {
		t.Helper()
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := sandbox.LogLineCost(s), uint64(len(b))+sandbox.LogLineOverhead; got != want {
			t.Errorf("LogLineCost(%q) = %d, want %d (json %s)", s, got, want, b)
		}
	}
	var pieces []string
	for b := 0; b < 256; b++ {
		pieces = append(pieces, string([]byte{byte(b)}))
	}
	pieces = append(pieces, "\u2028", "\u2029", "\u0085", "\u202e", "\ufffd", "é", "日本", "🙂", "\xe2\x80", "\xf0\x9f")
	check("")
	for _, p := range pieces {
		check(p)
		check("a" + p + "b")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var sb strings.Builder
		for range rng.IntN(40) {
			sb.WriteString(pieces[rng.IntN(len(pieces))])
		}
		check(sb.String())
	}
}

// TestLogBudgetCountsEveryLine: empty lines and lines of NUL bytes (six
// wire bytes each) use up logBytes at their wire cost, and a run can never
// deliver more than logBytes of cost, whatever the lines.
func TestLogBudgetCountsEveryLine(t *testing.T) {
	e := engine(t)
	// log(0, len) 100,000 times; memory starts zeroed, so a line of len
	// bytes is len NULs.
	wat := `(module (import "host" "log" (func $log (param i32 i32)))
	  (memory (export "memory") 1)
	  (func (export "run") (param $len i32) (local $i i32)
	    (loop $l
	      (call $log (i32.const 0) (local.get $len))
	      (local.set $i (i32.add (local.get $i) (i32.const 1)))
	      (br_if $l (i32.lt_u (local.get $i) (i32.const 100000))))))`
	m, _, err := e.Compile(context.Background(), sandbox.Source{WAT: wat})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		len, logBytes uint64
	}{{0, 1}, {0, 4096}, {0, 1 << 20}, {100, 10_000}, {1000, 1 << 20}} {
		l := limits.Defaults()
		l.LogBytes = tc.logBytes
		l.Timeout = time.Minute // a hang bound only: 100,000 host calls on a loaded machine
		var lines int
		var cost uint64
		res, err := e.Run(context.Background(), sandbox.Request{Module: m, Function: "run", Args: []sandbox.Value{sandbox.ValueI32(int32(tc.len))},
			Limits: l, Capabilities: sandbox.Capabilities{Log: true},
			Log: func(line string) { lines++; cost += sandbox.LogLineCost(line) }})
		if err != nil {
			t.Fatalf("len %d, logBytes %d: %v", tc.len, tc.logBytes, err)
		}
		lineCost := 6*tc.len + 2 + sandbox.LogLineOverhead
		want := int(tc.logBytes / lineCost)
		if lines != want || res.LogLines != want || !res.LogTruncated || cost > tc.logBytes {
			t.Errorf("len %d, logBytes %d: %d lines (result %d, want %d), cost %d, truncated %v",
				tc.len, tc.logBytes, lines, res.LogLines, want, cost, res.LogTruncated)
		}
	}
}
