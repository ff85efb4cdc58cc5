package main

// Extism plugins over the wire, against a hostile plugin: output, vars and
// config bounded; the kernel never trapping on a bad pointer, nor leaving
// memory behind; host copies and nested kernel calls paying fuel and
// keeping the deadline; plugin runs taking no instance slot.

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
)

// u64Input is a plugin input holding n as a little-endian u64.
func u64Input(n uint64) map[string]string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], n)
	return map[string]string{"base64": base64.StdEncoding.EncodeToString(b[:])}
}

// rawPlugin instantiates a WAT plugin on a raw sidecar and returns its id.
func rawPlugin(t *testing.T, s *rawSidecar, id, wat string, extra map[string]any) string {
	t.Helper()
	p := map[string]any{"module": map[string]string{"wat": wat}}
	for k, v := range extra {
		p[k] = v
	}
	s.request(id, "instantiate", p)
	m, _ := s.response(id, time.Minute)
	var res struct{ Instance string }
	if m.Error != nil || json.Unmarshal(m.Result, &res) != nil || res.Instance == "" {
		t.Fatalf("instantiate: %.500s", m.raw)
	}
	return res.Instance
}

// zeroOutputPlugin's "out" sets as its output a fresh kernel block of as
// many bytes as its input (a u64) says: zero bytes, that is NULs.
const zeroOutputPlugin = `(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "output_set" (func $out (param i64 i64)))
  (import "extism:host/env" "input_load_u64" (func $in (param i64) (result i64)))
  (func (export "out") (result i32)
    (local $n i64)
    (local.set $n (call $in (i64.const 0)))
    (call $out (call $alloc (local.get $n)) (local.get $n))
    (i32.const 0)))`

// TestPluginOutputCostsAtMostItsBase64: a plugin's
// output of NULs is valid UTF-8, and was sent as {"text"} with every NUL
// escaped to 6 bytes; outputBytes bounds the bytes, not the wire, so the
// documented maximum (64 MiB) made one response 402 MB and the sidecar's
// peak RSS 2.5 GB. Fence: bytes go as base64 whenever their JSON text
// would be longer, so an output costs at most 4/3 of outputBytes.
func TestPluginOutputCostsAtMostItsBase64(t *testing.T) {
	t.Parallel()
	s := startRaw(t, binPath, "--framing=ndjson")
	s.startReading()
	inst := rawPlugin(t, s, `"i"`, zeroOutputPlugin, nil)
	const n = 300_000
	s.request(`"out"`, "call", map[string]any{"instance": inst, "function": "out", "input": u64Input(n)})
	m, _ := s.response(`"out"`, time.Minute)
	var res struct {
		Output struct{ Text, Base64 *string }
	}
	if m.Error != nil || json.Unmarshal(m.Result, &res) != nil {
		t.Fatalf("call: %.300s", m.raw)
	}
	if limit := n*4/3 + 1024; len(m.raw) > limit {
		t.Fatalf("an output of %d NULs took %d bytes on the wire (limit %d)", n, len(m.raw), limit)
	}
	if res.Output.Base64 == nil {
		t.Fatalf("output not base64: %.100s", m.raw)
	}
	if b, err := base64.StdEncoding.DecodeString(*res.Output.Base64); err != nil || len(b) != n || b[n/2] != 0 {
		t.Fatalf("output decodes to %d bytes (%v), want %d NULs", len(b), err, n)
	}
}

// varFillPlugin's "fill" sets as many vars as its input (a u64) says, each
// a distinct 8-byte key with a 1-byte value.
const varFillPlugin = `(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "store_u64" (func $store_u64 (param i64 i64)))
  (import "extism:host/env" "var_set" (func $var_set (param i64 i64)))
  (import "extism:host/env" "input_load_u64" (func $in (param i64) (result i64)))
  (global $next (mut i64) (i64.const 0))
  (func (export "fill") (result i32)
    (local $i i64) (local $n i64) (local $k i64) (local $v i64)
    (local.set $n (call $in (i64.const 0)))
    (block $done (loop $l
      (br_if $done (i64.ge_u (local.get $i) (local.get $n)))
      (local.set $k (call $alloc (i64.const 8)))
      (call $store_u64 (local.get $k) (global.get $next))
      (global.set $next (i64.add (global.get $next) (i64.const 1)))
      (local.set $v (call $alloc (i64.const 1)))
      (call $store_u8 (local.get $v) (i32.const 7))
      (call $var_set (local.get $k) (local.get $v))
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br $l)))
    (i32.const 0)))`

// TestVarsCountTheirEntries: varBytes counted only
// the bytes of keys and values, while each var costs the host's map about
// 90 bytes more: 116,000 vars of 9 bytes fit the default 1 MiB and held
// about 100 MiB of the sidecar (8 MiB of varBytes: 840 MB; 64 MiB, the
// maximum: several GB per instance, 64 instances live). Fence: each var
// also counts 128 bytes, so 10,000 vars of 9 bytes (1.37 MB) no longer
// fit in 1 MiB.
func TestVarsCountTheirEntries(t *testing.T) {
	t.Parallel()
	s := startRaw(t, binPath, "--framing=ndjson")
	s.startReading()
	inst := rawPlugin(t, s, `"i"`, varFillPlugin, map[string]any{"limits": hangLimits(map[string]uint64{"varBytes": 1 << 20})})
	s.request(`"fill"`, "call", map[string]any{"instance": inst, "function": "fill", "input": u64Input(10_000)})
	m, _ := s.response(`"fill"`, time.Minute)
	d := errData(t, m)
	if d["kind"] != "memory_limit_exceeded" || d["resource"] != "vars" || d["limit"] != float64(1<<20) {
		t.Fatalf("10,000 vars under varBytes 1 MiB: %.400s", m.raw)
	}
}

// TestConfigKeysAreBounded: config had no bound but
// the message size, and an instance keeps it for life: a 60 MB message of
// 4 M empty keys took 84 s to decode and held 1.4 GB per instance (two
// such instances 2.3 GB; 64 may be live). Fence: at most 4,096 keys,
// refused before anything is decoded, for instantiate and plugin runs.
func TestConfigKeysAreBounded(t *testing.T) {
	t.Parallel()
	s := startRaw(t, binPath, "--framing=ndjson")
	s.startReading()
	many := map[string]string{}
	for i := range 4097 {
		many[fmt.Sprint("k", i)] = ""
	}
	enough := map[string]string{}
	for i := range 4096 {
		enough[fmt.Sprint("k", i)] = "v"
	}
	mod := map[string]string{"wat": zeroOutputPlugin}
	s.request(`"many"`, "instantiate", map[string]any{"module": mod, "config": many})
	s.request(`"run"`, "run", map[string]any{"module": mod, "function": "out", "config": many})
	s.request(`"enough"`, "instantiate", map[string]any{"module": mod, "config": enough})
	for _, id := range []string{`"many"`, `"run"`} {
		m, _ := s.response(id, time.Minute)
		if m.Error == nil || m.Error.Code != protocol.CodeInvalidParams || m.Error.Message != "config: has more than 4096 keys" {
			t.Fatalf("%s with 4,097 config keys: %.300s", id, m.raw)
		}
	}
	if m, _ := s.response(`"enough"`, time.Minute); m.Error != nil {
		t.Fatalf("instantiate with 4,096 config keys: %.300s", m.raw)
	}
}

// configGetPlugin's "get" reads the config key "big" and returns 7 if
// config_get answered 0 (no such key), else 0.
const configGetPlugin = `(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "config_get" (func $cfg (param i64) (result i64)))
  (func (export "get") (result i32)
    (local $k i64)
    (local.set $k (call $alloc (i64.const 3)))
    (call $store_u8 (local.get $k) (i32.const 98))
    (call $store_u8 (i64.add (local.get $k) (i64.const 1)) (i32.const 105))
    (call $store_u8 (i64.add (local.get $k) (i64.const 2)) (i32.const 103))
    (if (result i32) (i64.eqz (call $cfg (local.get $k)))
      (then (i32.const 7))
      (else (i32.const 0)))))`

// TestHostValuesThatDoNotFitAreNotAbsent: when the
// kernel could not hold a config or var value within the memory cap,
// config_get and var_get answered 0, which the ABI defines as "no such
// key": the plugin went on as if the key were unset (a counter restarts
// at zero and overwrites its var) and the call succeeded. Fence: the
// call stops with memory_limit_exceeded (and closes the instance).
func TestHostValuesThatDoNotFitAreNotAbsent(t *testing.T) {
	t.Parallel()
	s := startRaw(t, binPath, "--framing=ndjson")
	s.startReading()
	big := strings.Repeat("x", 2<<20)
	inst := rawPlugin(t, s, `"i"`, configGetPlugin, map[string]any{"config": map[string]string{"big": big},
		"limits": hangLimits(map[string]uint64{"memoryBytes": 1 << 20})})
	s.request(`"get"`, "call", map[string]any{"instance": inst, "function": "get"})
	m, _ := s.response(`"get"`, time.Minute)
	if d := errData(t, m); d["kind"] != "memory_limit_exceeded" || d["instanceClosed"] != true {
		t.Fatalf("config_get of a 2 MiB value under a 1 MiB cap: %.400s", m.raw)
	}
}

// TestPluginRunsTakeNoInstanceSlot: a plugin `run`
// (instantiate, call, release in one request) reserved one of
// --max-instances: with the maximum live it was refused -32002 "too many
// instances … release one", a message for instantiate, and plugin runs in
// flight made a concurrent instantiate fail while fewer than the maximum
// were live; each run also counted in stats' instances.created. A plugin
// run is bounded by --max-concurrency like any run.
func TestPluginRunsTakeNoInstanceSlot(t *testing.T) {
	t.Parallel()
	s := startRaw(t, binPath, "--framing=ndjson", "--max-instances", "1")
	s.startReading()
	rawPlugin(t, s, `"i"`, zeroOutputPlugin, nil)
	s.request(`"run"`, "run", map[string]any{"module": map[string]string{"wat": zeroOutputPlugin}, "function": "out", "input": u64Input(3)})
	if m, _ := s.response(`"run"`, time.Minute); m.Error != nil {
		t.Fatalf("a plugin run with --max-instances live: %.300s", m.raw)
	}
	s.request(`"st"`, "stats", nil)
	m, _ := s.response(`"st"`, time.Minute)
	var st struct{ Instances protocol.InstancesInfo }
	if json.Unmarshal(m.Result, &st) != nil || st.Instances != (protocol.InstancesInfo{Live: 1, Max: 1, Created: 1}) {
		t.Fatalf("stats after one instantiate and one plugin run: %s", m.raw)
	}
}

// kernelAbusePlugin: "input" points the input at a length past the kernel
// memory and reads 4 GB beyond it; "walk" forges a freed block's capacity
// (store_u64 on its header) so that the next alloc's search lands on a
// header at the very end of the memory.
const kernelAbusePlugin = `(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "free" (func $free (param i64)))
  (import "extism:host/env" "store_u64" (func $store_u64 (param i64 i64)))
  (import "extism:host/env" "input_set" (func $input_set (param i64 i64)))
  (import "extism:host/env" "input_load_u8" (func $input_load_u8 (param i64) (result i32)))
  (import "extism:host/env" "input_load_u64" (func $input_load_u64 (param i64) (result i64)))
  (func (export "input") (result i32)
    (call $input_set (i64.const 80) (i64.const 0x7fffffffffffffff))
    (drop (call $input_load_u8 (i64.const 0xFFFF0001)))
    (drop (call $input_load_u64 (i64.const 0xFFFF0001)))
    (i32.const 0))
  (func (export "walk") (result i32)
    (local $a i64)
    (local.set $a (call $alloc (i64.const 8)))      ;; block at 64, up to 88
    (drop (call $alloc (i64.const 65424)))          ;; up to 65528
    (call $free (local.get $a))
    (call $store_u64 (i64.const 64) (i64.const 65444)) ;; next header at 65524
    (drop (call $alloc (i64.const 70000)))
    (i32.const 0)))`

// TestKernelNeverTrapsOnABadPointer: the kernel
// promises that no ABI function traps on a bad pointer (docs/architecture,
// threat model), but $inData computed memsize - n without checking n, so
// input_set accepted any length and input_load_u8/u64 then read out of
// bounds; and alloc's first-fit walk trusted capacities the plugin can
// write, so a forged header sent it past the memory. Both were
// memory_out_of_bounds traps (closing the instance) from inside the
// kernel. Fence: $inData checks n against the size; the walk stops at a
// header or capacity outside the block area.
func TestKernelNeverTrapsOnABadPointer(t *testing.T) {
	t.Parallel()
	s := startRaw(t, binPath, "--framing=ndjson")
	s.startReading()
	for _, fn := range []string{"input", "walk"} {
		id := `"` + fn + `"`
		s.request(id, "run", map[string]any{"module": map[string]string{"wat": kernelAbusePlugin}, "function": fn})
		if m, _ := s.response(id, time.Minute); m.Error != nil {
			t.Errorf("%s: %.300s", fn, m.raw)
		}
	}
}

// nestedCallPlugin's "loop" calls var_get with a fresh key as many times
// as its input (a u64) says, until its fuel runs out: each var_get takes
// the key out of the kernel and frees it, a kernel call nested in the
// host function.
const nestedCallPlugin = `(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u64" (func $store_u64 (param i64 i64)))
  (import "extism:host/env" "var_get" (func $var_get (param i64) (result i64)))
  (import "extism:host/env" "input_load_u64" (func $in (param i64) (result i64)))
  (func (export "loop") (result i32)
    (local $i i64) (local $n i64) (local $k i64)
    (local.set $n (call $in (i64.const 0)))
    (block $done (loop $l
      (br_if $done (i64.ge_u (local.get $i) (local.get $n)))
      (local.set $k (call $alloc (i64.const 8)))
      (call $store_u64 (local.get $k) (local.get $i))
      (drop (call $var_get (local.get $k)))
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br $l)))
    (i32.const 0)))`

// TestNestedKernelCallsLeaveNoMemory: the host
// functions called the kernel (free in var_get/config_get/var_set/log_*,
// alloc in var_get/config_get) through wasmtime-go's Func.Call, which
// fetches the function's type on every call; that left native memory
// behind which no store's end returned: 30 one-shot plugin runs of this
// loop under the default limits took the sidecar from 20 to 247 MiB RSS,
// still rising, and a long-lived instance grew the same way. Fence: the
// kernel is called in one cgo call in the caller's context (capi.go).
// Measured after: 25 MiB throughout.
func TestNestedKernelCallsLeaveNoMemory(t *testing.T) {
	t.Parallel()
	s := startRaw(t, binPath, "--framing=ndjson")
	s.startReading()
	run := func(i int) {
		id := fmt.Sprintf(`"r%d"`, i)
		s.request(id, "run", map[string]any{"module": map[string]string{"wat": nestedCallPlugin}, "function": "loop",
			"input": u64Input(1 << 40), "limits": map[string]uint64{"fuel": 100_000_000, "timeoutMs": 60_000}})
		if m, _ := s.response(id, 2*time.Minute); m.kind() != "fuel_exhausted" {
			t.Fatalf("run %d: %.300s", i, m.raw)
		}
	}
	run(0)
	before, err := vmRSS(s.pid())
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 15; i++ {
		run(i)
	}
	after, err := vmRSS(s.pid())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sidecar RSS after the first run %s, after 15 more %s", mib(before), mib(after))
	if after > before+48<<20 {
		t.Fatalf("15 plugin runs of nested kernel calls grew the sidecar from %s to %s", mib(before), mib(after))
	}
}

// copyLoopPlugin loops config_get(alloc(n)): every iteration hands the
// host an n-byte kernel block, which config_get copies out and frees (a
// nested call of the kernel's free, inside the host function).
func copyLoopPlugin(t *testing.T, n int) string {
	return writeGuest(t, fmt.Sprintf("copy_loop_%d.wat", n), fmt.Sprintf(`(module
	  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
	  (import "extism:host/env" "config_get" (func $cfg (param i64) (result i64)))
	  (memory (export "memory") 1)
	  (func (export "run") (result i32)
	    (loop $l
	      (drop (call $cfg (call $alloc (i64.const %d))))
	      (br $l))
	    (i32.const 0)))`, n))
}

// TestPluginDeadlineInsideNestedFreeIsATimeout: the deadline fired inside
// the kernel's free, called by take() inside config_get; take() dropped the
// nested call's trap and config_get reported its key as a bad handle, so
// the run exited 8 "trap: ... key 80 is not a live kernel block" instead
// of 3 timeout. (8 MB keys: nearly all the time is the host's copy, so the
// deadline is noticed at the next wasm entry, the nested free.)
func TestPluginDeadlineInsideNestedFreeIsATimeout(t *testing.T) {
	t.Parallel()
	guest := copyLoopPlugin(t, 8_000_000)
	_, stderr, code := sandboxdCall(t, guest, "run", "--fuel", "100000000000", "--timeout-ms", "300")
	if code != 3 || !strings.Contains(stderr, "timeout: deadline of 300 ms exceeded") {
		t.Fatalf("exit %d, stderr %q; want 3 and a timeout", code, stderr)
	}
}

// TestPluginFuelOutInsideNestedKernelCallIsFuelExhausted: a fuel budget
// that runs out inside the nested free (any of about a third of the
// budgets of one iteration did) was reported as a trap for a bad handle.
// Every budget across more than one iteration must end fuel_exhausted.
func TestPluginFuelOutInsideNestedKernelCallIsFuelExhausted(t *testing.T) {
	t.Parallel()
	guest := copyLoopPlugin(t, 8)
	const from, to = 1000, 1250 // an iteration costs ~100-150 fuel
	budgets := make(chan int)
	var mu sync.Mutex
	var wrong []string
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for fuel := range budgets {
				_, stderr, code := sandboxdCall(t, guest, "run", "--fuel", fmt.Sprint(fuel))
				if code != 2 || !strings.Contains(stderr, "fuel_exhausted") {
					mu.Lock()
					wrong = append(wrong, fmt.Sprintf("--fuel %d: exit %d, %s", fuel, code, strings.TrimSpace(stderr)))
					mu.Unlock()
				}
			}
		})
	}
	for fuel := from; fuel < to; fuel++ {
		budgets <- fuel
	}
	close(budgets)
	wg.Wait()
	if len(wrong) > 0 {
		t.Fatalf("%d of %d budgets did not end fuel_exhausted (exit 2), e.g.\n%s", len(wrong), to-from, strings.Join(wrong[:min(len(wrong), 5)], "\n"))
	}
}

// TestPluginHostCopiesCostFuel: the host copied whatever a plugin handed
// it (config_get and var_get keys, var_set keys and values, var_get
// values, log lines) for a few hundred fuel per call, so a loop of
// config_get(alloc(8 MB)) ran 9.4 s of memcpy under --fuel 200000. Each
// copy now costs memory.copy's rate (30 per whole KiB), charged before
// the copy. Each plugin below does one bounded piece of work whose wasm
// costs a small part of the budget and whose copies cost more than all of
// it: exit 0 before the fix, fuel_exhausted now.
func TestPluginHostCopiesCostFuel(t *testing.T) {
	t.Parallel()
	const imports = `
	  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
	  (import "extism:host/env" "config_get" (func $cfg (param i64) (result i64)))
	  (import "extism:host/env" "var_get" (func $vget (param i64) (result i64)))
	  (import "extism:host/env" "var_set" (func $vset (param i64 i64)))
	  (import "extism:host/env" "log_info" (func $log (param i64)))
	  (memory (export "memory") 1)`
	repeat := func(n int, body string) string {
		return fmt.Sprintf(`(loop $l %s
		  (local.set $i (i32.add (local.get $i) (i32.const 1)))
		  (br_if $l (i32.lt_u (local.get $i) (i32.const %d))))`, body, n)
	}
	cases := []struct {
		name, body, fuel string
	}{
		// an 8 MB key: 7,812 whole KiB, 234,360 fuel
		{"config_get key", `(drop (call $cfg (call $alloc (i64.const 8000000))))`, "200000"},
		// a 1 MB value: 976 whole KiB, 29,280 fuel
		{"var_set value", `(call $vset (call $alloc (i64.const 8)) (call $alloc (i64.const 1000000)))`, "20000"},
		// the 1 MB value read back 10 times: 322,080 fuel
		{"var_get value", `(call $vset (call $alloc (i64.const 8)) (call $alloc (i64.const 1000000)))` +
			repeat(10, `(drop (call $vget (call $alloc (i64.const 8))))`), "200000"},
		// 100 lines of 16 KiB: 48,000 fuel
		{"log lines", repeat(100, `(call $log (call $alloc (i64.const 16384)))`), "20000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			guest := writeGuest(t, "copies.wat", `(module `+imports+`
			  (func (export "run") (result i32) (local $i i32) `+tc.body+` (i32.const 0)))`)
			_, stderr, code := sandboxdCall(t, guest, "run", "--allow-log", "--log-bytes", "8388608", "--fuel", tc.fuel)
			if code != 2 || !strings.Contains(stderr, "fuel_exhausted: fuel budget of "+tc.fuel+" exhausted") {
				t.Fatalf("--fuel %s: exit %d, stderr %.200q; want 2 fuel_exhausted", tc.fuel, code, stderr)
			}
			// with enough fuel the same plugin succeeds: the charge is a price, not a refusal
			if _, stderr, code := sandboxdCall(t, guest, "run", "--allow-log", "--log-bytes", "8388608", "--fuel", "10000000"); code != 0 {
				t.Fatalf("--fuel 10000000: exit %d, stderr %.200q; want 0", code, stderr)
			}
		})
	}
}
