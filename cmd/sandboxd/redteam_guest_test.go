package main

// Regression tests for the second red-team pass as a hostile module author
// (after issue 10's fixes): each is the attack through the real binary,
// and each failed on the code before its fix.

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
)

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
