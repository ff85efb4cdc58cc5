package main

// Regression tests for the guest escapes of issue 10 (items 1, 2, 4 and 5),
// each an attack run through the real binary: bulk operations that
// escaped the deadline, cancellation and fuel; modules that reached the
// rewriter's control globals; tables outside the memory cap; trap offsets
// in the rewritten module instead of the caller's bytes.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/rpc"
)

// writeGuest writes a generated module to a file of the test's own.
func writeGuest(t *testing.T, name, wat string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(wat), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// straightLine repeats one instruction n times in the body of run, with no
// loop and no call: before the fix wasmtime checked the epoch and fuel
// only at function entry and loop headers, so this ran to the end.
func straightLine(decls, instr string, n int) string {
	return fmt.Sprintf("(module %s (func (export \"run\")\n%s))", decls, strings.Repeat(instr+"\n", n))
}

// fillBomb is issue 10's attack: 10,000 memory.fill of 16 MiB (the default
// cap), 1.3 s to 9 s of work in one basic block.
func fillBomb(t *testing.T) string {
	return writeGuest(t, "fill_bomb.wat", straightLine("(memory 256)",
		"(memory.fill (i32.const 0) (i32.const 7) (i32.const 16777216))", 10_000))
}

func TestBulkMemoryFillHonoursTheDeadline(t *testing.T) {
	r := runCLI(t, fillBomb(t), "--timeout-ms", "50", "--fuel", fmt.Sprint(hugeFuel))
	wantCode(t, r, 3)
	t.Logf("10,000 × memory.fill of 16 MiB under a 50 ms deadline: timeout after %v (process)", r.took.Round(time.Millisecond))
}

func TestBulkTableFillHonoursTheDeadline(t *testing.T) {
	bomb := writeGuest(t, "table_fill_bomb.wat", straightLine("(table $t 10000000 funcref)",
		"(table.fill $t (i32.const 0) (ref.null func) (i32.const 10000000))", 1000))
	r := runCLI(t, bomb, "--timeout-ms", "50", "--fuel", fmt.Sprint(hugeFuel),
		"--table-elements", "10000000", "--memory-mb", "4096")
	wantCode(t, r, 3)
}

// TestBulkOperationsPayFuel: one 16 MiB fill, copy or init costs fuel in
// proportion to its bytes (about 25 per KiB), not one unit.
func TestBulkOperationsPayFuel(t *testing.T) {
	for name, instr := range map[string]string{
		"memory.fill": "(memory.fill (i32.const 0) (i32.const 1) (i32.const 16777216))",
		"memory.copy": "(memory.copy (i32.const 0) (i32.const 8388608) (i32.const 8388608))",
		"memory.init": "(memory.init $d (i32.const 0) (i32.const 0) (i32.const 65536))",
		"table.fill":  "(table.fill $t (i32.const 0) (ref.null func) (i32.const 1000000))",
	} {
		decls := `(memory 256) (table $t 1000000 funcref) (data $d "` + strings.Repeat("x", 65536) + `")`
		path := writeGuest(t, "one.wat", straightLine(decls, instr, 1))
		r := runCLI(t, path, "--fuel", "1000", "--table-elements", "1000000", "--memory-mb", "64")
		if r.code != 2 {
			t.Errorf("%s with 1000 fuel: want exit 2 (fuel_exhausted), got %s", name, r)
		}
	}
}

// loggingFillBomb logs one line, then runs 40,000 straight-line fills of
// 16 MiB (5 s or more of work before the fix).
func loggingFillBomb(t *testing.T) string {
	wat := straightLine(`(import "host" "log" (func $log (param i32 i32)))
	  (memory (export "memory") 256) (data (i32.const 0) "go")`,
		"(memory.fill (i32.const 16) (i32.const 7) (i32.const 16777200))", 40_000)
	wat = strings.Replace(wat, "(func (export \"run\")\n", "(func (export \"run\")\n(call $log (i32.const 0) (i32.const 2))\n", 1)
	return writeGuest(t, "fill_bomb.wat", wat)
}

// TestBulkFillStopsAtStdinEOF: stdin EOF cancels a run inside straight-line
// bulk fills; before the fix the run finished and was answered ok.
func TestBulkFillStopsAtStdinEOF(t *testing.T) {
	s := startRaw(t, binPath)
	s.request(`"bomb"`, "run", runParams(loggingFillBomb(t), "", nil,
		map[string]uint64{"fuel": hugeFuel, "timeoutMs": 600_000}, map[string]any{"log": true}))
	s.startReading()
	if m := s.mustTake(60 * time.Second); m.Method != "log" {
		t.Fatalf("want the guest's log line first, got %s", m.raw)
	}
	if err := s.stdin.Close(); err != nil {
		t.Fatal(err)
	}
	r, _ := s.response(`"bomb"`, 60*time.Second)
	if r.kind() != "cancelled" {
		t.Errorf("want kind cancelled after stdin EOF, got %s", r.raw)
	}
}

// TestBulkFillIsCancellable: $/cancelRequest stops a straight-line run of
// bulk fills; before the fix the run finished and answered ok.
func TestBulkFillIsCancellable(t *testing.T) {
	c, _ := startClient(t, binPath)
	// The cancel is sent when the guest's line arrives, so it lands among
	// the fills.
	bomb := loggingFillBomb(t)
	p := sandboxd.RunParams{Module: rpc.ModuleSpec{Path: sandboxd.Str(bomb)},
		Limits:       map[string]uint64{"fuel": hugeFuel, "timeoutMs": 600_000},
		Capabilities: &rpc.CapabilitySpec{Log: true}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := c.Run(ctx, p, func(int, string) { cancel() }); done <- err }()
	if e := asRPCError(t, <-done); e.Kind() != "cancelled" {
		t.Fatalf("want kind cancelled, got %v", e)
	}
	// The client answers a cancelled call at once; the sidecar's own count
	// says whether the run stopped (cancelled) or ran to its end (ok).
	waitStats(t, c, func(st *rpc.StatsResult) bool { return st.InFlight == 0 && st.Runs["cancelled"]+st.Runs["ok"] == 1 })
	st, err := c.Stats(ctxT(t, 10*time.Second))
	if err != nil || st.Runs["cancelled"] != 1 {
		t.Fatalf("the sidecar did not stop the run: runs %v (%v)", st.Runs, err)
	}
	res, err := c.Run(ctxT(t, 30*time.Second), sandboxd.RunParams{Module: modPath("well_behaved.wat"), Function: "add", Args: rawArgs(2, 40)}, nil)
	if err != nil || string(res.Values[0].Value) != "42" {
		t.Fatalf("after the cancel: %+v %v", res, err)
	}
}

// TestInjectedGlobalsAreUnreachable: a module naming globals past its own
// count reached the rewriter's control globals: it forged a memory denial
// for a divide by zero, and raised the cap so that four memories held 4×
// the cap. Both are refused as invalid modules now.
func TestInjectedGlobalsAreUnreachable(t *testing.T) {
	forge := writeGuest(t, "forge.wat", `(module (memory 1)
	  (func (export "run") (result i32)
	    (drop (memory.grow (i32.const 1)))
	    (global.set 1 (i64.const 1193046))
	    (i32.div_s (i32.const 1) (i32.const 0))))`)
	raise := writeGuest(t, "raise.wat", `(module (memory $a 0) (memory $b 0) (memory $c 0) (memory $d 0)
	  (func (export "run") (result i32)
	    (global.set 0 (i64.const 100000))
	    (drop (memory.grow $a (i32.const 256))) (drop (memory.grow $b (i32.const 256)))
	    (drop (memory.grow $c (i32.const 256))) (drop (memory.grow $d (i32.const 256)))
	    (i32.add (i32.add (memory.size $a) (memory.size $b)) (i32.add (memory.size $c) (memory.size $d)))))`)
	for _, path := range []string{forge, raise} {
		r := runCLI(t, path, "--memories", "4")
		wantCode(t, r, 6)
		if !strings.Contains(r.stderr, "global") {
			t.Errorf("%s: the error does not name the global: %s", filepath.Base(path), r)
		}
	}
}

// TestCapHoldsOverFourMemories: with memories 4 every memory can grow, but
// their sum stays under the cap, from initial sizes and from growth.
func TestCapHoldsOverFourMemories(t *testing.T) {
	grow := writeGuest(t, "grow4.wat", `(module (memory $a 0) (memory $b 0) (memory $c 0) (memory $d 0)
	  (func (export "run") (result i32)
	    (drop (memory.grow $a (i32.const 128))) (drop (memory.grow $b (i32.const 128)))
	    (drop (memory.grow $c (i32.const 128))) (drop (memory.grow $d (i32.const 128)))
	    (i32.add (i32.add (memory.size $a) (memory.size $b)) (i32.add (memory.size $c) (memory.size $d)))))`)
	r := runCLI(t, grow, "--memories", "4", "--memory-mb", "16", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"value":256`) || !strings.Contains(r.stdout, `"peakMemoryBytes":16777216`) {
		t.Errorf("4 memories each asking for 8 MiB under a 16 MiB cap (two fit): want 256 pages and peak 16 MiB, got %s", r)
	}
	initial := writeGuest(t, "initial4.wat", `(module (memory 100) (memory 100) (memory 100) (memory 100)
	  (func (export "run")))`)
	r = runCLI(t, initial, "--memories", "4", "--memory-mb", "16")
	wantCode(t, r, 4)
}

// TestTablesCountAgainstTheMemoryCap: table storage (8 bytes per funcref
// element in wasmtime) counts toward memoryBytes and peakMemoryBytes.
// Before, 100 tables of 10M elements took 7.8 GB under a 1 MiB cap and
// reported a peak of 64 KiB; here ten tables of 1M elements (80 MB) stand
// in for them.
func TestTablesCountAgainstTheMemoryCap(t *testing.T) {
	many := writeGuest(t, "tables.wat", "(module (memory 1)"+strings.Repeat(" (table 1000000 funcref)", 10)+
		" (func (export \"run\")))")
	r := runCLI(t, many, "--memory-mb", "1", "--table-elements", "10000000", "--json")
	if r.code != 4 || !strings.Contains(r.stdout, `"resource":"memory"`) || !strings.Contains(r.stdout, `"requested":80065536`) {
		t.Errorf("10 tables of 1M funcref elements under a 1 MiB cap: want memory_limit_exceeded requesting 80065536 bytes, got %s", r)
	}
	grow := writeGuest(t, "table_grow.wat", `(module (table $t 0 funcref)
	  (func (export "run")
	    (if (i32.eq (table.grow $t (ref.null func) (i32.const 1000000)) (i32.const -1)) (then unreachable))))`)
	r = runCLI(t, grow, "--memory-mb", "1", "--table-elements", "10000000", "--json")
	if r.code != 4 || !strings.Contains(r.stdout, `"requested":8000000`) {
		t.Errorf("table.grow by 1M funcref elements under a 1 MiB cap: want memory_limit_exceeded requesting 8000000 bytes, got %s", r)
	}
	peak := writeGuest(t, "table_peak.wat", `(module (memory 1) (table $t 1000 funcref) (table $e 10 externref)
	  (func (export "run") (result i32) (table.grow $t (ref.null func) (i32.const 24))))`)
	r = runCLI(t, peak, "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"peakMemoryBytes":73768`) {
		t.Errorf("1 page + 1024 funcref + 10 externref elements: want peakMemoryBytes 65536 + 8192 + 40 = 73768, got %s", r)
	}
}

// TestTrapOffsetsAreInTheCallersBytes: trap frames name offsets in the
// module the caller sent (for WAT, in the wasm the text became), not in
// the rewritten one (the divide below was reported at 174 before), and
// leave out the rewriter's own helpers.
func TestTrapOffsetsAreInTheCallersBytes(t *testing.T) {
	// 39 bytes: () -> i32, exported "run", body i32.const 1, i32.const 0,
	// i32.div_s at offset 37 (0x25), end.
	div := "\x00asm\x01\x00\x00\x00" +
		"\x01\x05\x01\x60\x00\x01\x7f" + // type
		"\x03\x02\x01\x00" + // function
		"\x07\x07\x01\x03run\x00\x00" + // export
		"\x0a\x09\x01\x07\x00\x41\x01\x41\x00\x6d\x0b" // code
	// 54 bytes: memory 1; run grows it by one page (a rewritten grow before
	// the trap shifts every later offset), then memory.fill of 131073 bytes
	// from 0 at offset 50 (0x32): one byte past the end.
	fill := "\x00asm\x01\x00\x00\x00" +
		"\x01\x04\x01\x60\x00\x00" + // type
		"\x03\x02\x01\x00" + // function
		"\x05\x03\x01\x00\x01" + // memory
		"\x07\x07\x01\x03run\x00\x00" + // export
		"\x0a\x14\x01\x12\x00" + // code, one body, no locals
		"\x41\x01\x40\x00\x1a" + // (drop (memory.grow (i32.const 1)))
		"\x41\x00\x41\x00\x41\x81\x80\x08\xfc\x0b\x00\x0b" // memory.fill 0 0 131073
	cases := []struct {
		name, file, module, frames, message string
	}{
		{"divide (wasm)", "div.wasm", div, `"frames":[{"funcIndex":0,"moduleOffset":37}]`, "at module offset 0x25"},
		{"divide (WAT)", "div.wat", `(module (func (export "run") (result i32) (i32.div_s (i32.const 1) (i32.const 0))))`,
			`"frames":[{"funcIndex":0,"moduleOffset":37}]`, "at module offset 0x25"},
		{"memory.fill out of bounds", "fill.wasm", fill, `"frames":[{"funcIndex":0,"moduleOffset":50}]`, "at module offset 0x32"},
	}
	for _, tc := range cases {
		if strings.HasSuffix(tc.file, ".wasm") && len(tc.module) != map[string]int{"div.wasm": 39, "fill.wasm": 54}[tc.file] {
			t.Fatalf("%s: the hand-assembled module is %d bytes", tc.name, len(tc.module))
		}
		r := runCLI(t, writeGuest(t, tc.file, tc.module), "--json")
		if r.code != 8 || !strings.Contains(r.stdout, tc.frames) || !strings.Contains(r.stdout, tc.message) {
			t.Errorf("%s: want a trap with %s and %q, got %s", tc.name, tc.frames, tc.message, r)
		}
	}
}
