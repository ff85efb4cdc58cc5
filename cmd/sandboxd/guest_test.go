package main

// What a hostile module author cannot do to a run, each attack through the
// real binary: bulk operations that escape the deadline, cancel or fuel;
// the rewriter's control globals; tables and memories outside the memory
// cap; names and error texts that multiply per frame; trap offsets in the
// caller's bytes. The threat model (docs/threat-model.md) names each.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// fillBomb is the bulk-fill attack: 10,000 memory.fill of 16 MiB (the default
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

// vmHWM reads the peak resident set (VmHWM) of pid in bytes.
func vmHWM(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM line")
	return 0
}

// trapData is the data of a trap error.
type trapData struct {
	Kind     string `json:"kind"`
	TrapCode string `json:"trapCode"`
	Frames   []struct {
		Func string `json:"func"`
	} `json:"frames"`
}

// TestLongFunctionNamesDoNotMultiplyPerFrame: wasmtime copies a frame's
// function name into every frame of a trap's backtrace, and a stack
// overflow has thousands of frames. A 64 KiB name on a recursive function
// made one run take 725 MiB (a 4 MiB name, a 4 MiB module, took the whole
// 24 GiB machine); the rewriter now keeps at most 128 bytes of each name.
func TestLongFunctionNamesDoNotMultiplyPerFrame(t *testing.T) {
	name := strings.Repeat("A", 64<<10)
	guest := writeGuest(t, "long_name.wat", fmt.Sprintf(`(module (func $%s (export "run") (call $%s)))`, name, name))
	s := startRaw(t, binPath)
	s.request("1", "run", runParams(guest, "", nil, nil, nil))
	m, _ := s.response("1", 60*time.Second)
	var d trapData
	if m.Error == nil || json.Unmarshal(m.Error.Data, &d) != nil || d.TrapCode != "stack_overflow" {
		t.Fatalf("want a stack_overflow trap, got %s", trunc(m.raw))
	}
	if len(d.Frames) == 0 || len(m.raw) > 64<<10 {
		t.Errorf("response of %d bytes with %d frames; want frames and a response under 64 KiB", len(m.raw), len(d.Frames))
	}
	for _, f := range d.Frames {
		if len(f.Func) > 128 || !strings.HasPrefix(f.Func, "AAAA") {
			t.Fatalf("frame name of %d bytes, want a prefix of at most 128", len(f.Func))
			break
		}
	}
	if peak := vmHWM(t, s.pid()); peak > 300<<20 {
		t.Errorf("sidecar peak RSS %s after one trap, want well under 300 MiB", mib(peak))
	}
	s.request("2", "run", runParams(fixture("well_behaved.wat"), "add", []any{2, 40}, nil, nil))
	if r, _ := s.response("2", 10*time.Second); r.Error != nil || !strings.Contains(string(r.Result), `"value":42`) {
		t.Errorf("next run: %s", trunc(r.raw))
	}
}

// TestTableGrowPaysFuel: wasmtime writes the init value into every element
// a table.grow adds, inside one instruction: one grow of 10 M elements was
// 40 ms of work for one fuel and no epoch check, so a run with 100,000 fuel
// could write the whole memory cap's worth of table (4 GiB: 2 s). The
// helper now grows in chunks inside a loop, at the table fill's rate.
func TestTableGrowPaysFuel(t *testing.T) {
	guest := writeGuest(t, "table_grow.wat", `(module (table 0 funcref)
	  (func (export "run") (result i32) (table.grow (ref.null func) (i32.const 10000000))))`)
	r := runCLI(t, guest, "--fuel", "100000", "--table-elements", "10000000", "--memory-mb", "4096")
	wantCode(t, r, 2)
	// Within the fuel it pays, the grow does what the instruction does.
	r = runCLI(t, guest, "--fuel", "100000000", "--table-elements", "10000000", "--memory-mb", "4096", "--json")
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, `"value":0`) || !strings.Contains(r.stdout, `"peakMemoryBytes":80000000`) {
		t.Errorf("want the old size 0 and 80,000,000 bytes of table: %s", r.stdout)
	}
}

// TestDistinctBulkOperationsAreBounded: every distinct (operation, memory
// or table, segment) gets a helper of its own, 100-300 bytes for 10 bytes
// of input, so 20,000 memory.init of distinct segments (263 KB) became a
// 3 MB module that compiled 17 times as long as the original. The rewriter
// refuses past MaxBulkHelpers (1,024) distinct bulk operations.
func TestDistinctBulkOperationsAreBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("(module (memory 1)\n")
	for i := range 2000 {
		fmt.Fprintf(&b, "(data $d%d \"\")\n", i)
	}
	b.WriteString("(func (export \"run\")\n")
	for i := range 2000 {
		fmt.Fprintf(&b, "(memory.init $d%d (i32.const 0) (i32.const 0) (i32.const 0))\n", i)
	}
	b.WriteString("))")
	r := runCLI(t, writeGuest(t, "many_inits.wat", b.String()))
	wantCode(t, r, 6)
	if !strings.Contains(r.stderr, "more than 1024 distinct bulk operations") {
		t.Errorf("want the bound named: %s", r.stderr)
	}
}

// TestExportErrorsListABoundedPrefix: an export error lists the module's
// functions, and the names are the module's: 80,000 exports of 100-byte
// names made each such error 9 MB (and every run of the module by id
// could ask for it again). The list now holds at most 16 names of at most
// 128 bytes, then the count of the rest.
func TestExportErrorsListABoundedPrefix(t *testing.T) {
	var b strings.Builder
	b.WriteString("(module (func)\n")
	long := strings.Repeat("E", 300)
	for i := range 20_000 {
		fmt.Fprintf(&b, "(export \"%s%05d\" (func 0))\n", long, i)
	}
	b.WriteString(")")
	r := runCLI(t, writeGuest(t, "many_exports.wat", b.String()), "--invoke", "nope", "--json")
	wantCode(t, r, 7)
	if len(r.stdout) > 16<<10 || !strings.Contains(r.stdout, "and 19984 more") || strings.Contains(r.stdout, long) {
		t.Errorf("export error of %d bytes, want a bounded list ending \"and 19984 more\": %.300s", len(r.stdout), r.stdout)
	}
}

// TestPluginKernelFramesAreNotTheGuests: a plugin that recursed through
// the kernel's alloc overflowed the stack inside the kernel, and the trap
// named the kernel's function ("stack overflow in memsize"), with the
// kernel's function index and an offset mapped through the plugin's own
// offset map. Frames of any module but the rewritten guest are left out.
func TestPluginKernelFramesAreNotTheGuests(t *testing.T) {
	guest := writeGuest(t, "plugin_recursion.wat", `(module
	  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
	  (memory (export "memory") 1)
	  (func $rec (result i32) (drop (call $alloc (i64.const 8))) (drop (call $rec)) (i32.const 0))
	  (func (export "run") (result i32) (call $rec)))`)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, binPath, "call", guest, "run")
	cmd.Stderr = &stderr
	err := cmd.Run()
	if code := exitCode(err); code != 8 || !strings.Contains(stderr.String(), "stack overflow in rec at module offset") {
		t.Errorf("want exit 8 naming the plugin's own function rec, got %d: %s", code, stderr.String())
	}
}

// TestRewriteDoesNotPushAValidModulePastWasmtimesLimits: the rewrite adds
// four globals, so a valid module of 999,997 globals was refused after it
// by wasmtime, with a multi-line message and an offset into bytes the
// caller never sent. The rewriter now refuses it itself, naming the count.
func TestRewriteDoesNotPushAValidModulePastWasmtimesLimits(t *testing.T) {
	const n = 999_997
	payload := []byte{0xbd, 0x84, 0x3d} // LEB128 of 999,997
	for range n {
		payload = append(payload, 0x7f, 0x00, 0x41, 0x00, 0x0b) // (global i32 (i32.const 0))
	}
	section := []byte{6}
	for v := len(payload); ; { // LEB128 of the size
		b := byte(v & 0x7f)
		if v >>= 7; v == 0 {
			section = append(section, b)
			break
		}
		section = append(section, b|0x80)
	}
	wasm := append([]byte("\x00asm\x01\x00\x00\x00"), append(section, payload...)...)
	path := filepath.Join(t.TempDir(), "globals.wasm")
	if err := os.WriteFile(path, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, path, "--json")
	wantCode(t, r, 6)
	if !strings.Contains(r.stdout, "the module has 999997 globals; sandboxd's rewrite adds 4") || strings.Contains(r.stdout, `\n`) {
		t.Errorf("want one line naming the module's own count: %s", r.stdout)
	}
}

// TestExportedHostLogIsNotCallable: a module may export host::log itself
// as its entry point; called from outside, a host function runs with no
// guest as its caller (WASI's did so past every fence), so an export that
// is an imported function passed through is refused, as the export error
// it is (it once ran, host::log finding the memory by other means).
func TestExportedHostLogIsNotCallable(t *testing.T) {
	guest := writeGuest(t, "exported_log.wat", `(module (import "host" "log" (func $l (param i32 i32)))
	  (memory (export "memory") 1) (data (i32.const 0) "hello")
	  (export "run" (func $l)))`)
	r := runCLI(t, guest, "--allow-log", "--arg", "0", "--arg", "5")
	wantCode(t, r, 7)
	if !strings.Contains(r.stderr, "imported function passed through") {
		t.Errorf("want the export error: %s", r)
	}
}
