package sandbox_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// fixture reads testdata/wat/NAME.wat.
func fixture(t testing.TB, name string) sandbox.Source {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "wat", name+".wat"))
	if err != nil {
		t.Fatal(err)
	}
	return sandbox.Source{WAT: string(b)}
}

var (
	engineOnce sync.Once
	sharedEng  *sandbox.Engine
)

// engine is one engine for the whole package, as in the sidecar.
func engine(t testing.TB) *sandbox.Engine {
	engineOnce.Do(func() {
		e, err := sandbox.NewEngine(sandbox.Config{CompileTimeout: compileHangBound})
		if err != nil {
			t.Fatal(err)
		}
		sharedEng = e
	})
	return sharedEng
}

// runCase describes one run of a fixture and what must come out of it.
type runCase struct {
	name     string
	fixture  string
	function string
	args     []sandbox.Value
	lim      func(*limits.Limits)
	caps     sandbox.Capabilities

	want      []sandbox.Value // on success
	wantFuel  int64           // -1: do not check
	wantPeak  int64           // -1: do not check
	wantKind  sandbox.Kind    // "" for success
	wantCode  string          // trap code
	wantInMsg string
	wantLogs  []string
	check     func(t *testing.T, err *sandbox.Error)
}

func i32(v int32) sandbox.Value { return sandbox.ValueI32(v) }

const fourMiB = 4 << 20

func capMemory(n uint64) func(*limits.Limits) {
	return func(l *limits.Limits) { l.MemoryBytes = n }
}

func TestFixtures(t *testing.T) {
	huge := func(l *limits.Limits) { l.Fuel = 1 << 50; l.Timeout = 100 * time.Millisecond }
	cases := []runCase{
		{name: "add", fixture: "well_behaved", function: "add", args: []sandbox.Value{i32(2), i32(40)}, want: []sandbox.Value{i32(42)}, wantFuel: 4, wantPeak: 0},
		{name: "fib10", fixture: "well_behaved", function: "fib", args: []sandbox.Value{i32(10)}, want: []sandbox.Value{i32(55)}, wantFuel: 182, wantPeak: -1},
		{name: "fib20", fixture: "well_behaved", function: "fib", args: []sandbox.Value{i32(20)}, want: []sandbox.Value{i32(6765)}, wantFuel: 352, wantPeak: -1},
		{name: "fib30", fixture: "well_behaved", function: "fib", args: []sandbox.Value{i32(30)}, want: []sandbox.Value{i32(832040)}, wantFuel: 522, wantPeak: -1},
		{name: "infinite loop on fuel", fixture: "infinite_loop", lim: func(l *limits.Limits) { l.Fuel = 1_000_000 }, wantKind: sandbox.KindFuelExhausted, wantFuel: 1_000_000, wantPeak: -1,
			check: func(t *testing.T, e *sandbox.Error) {
				if e.Budget != 1_000_000 {
					t.Errorf("budget = %d", e.Budget)
				}
			}},
		{name: "infinite loop on time", fixture: "infinite_loop", lim: huge, wantKind: sandbox.KindTimeout, wantFuel: -1, wantPeak: -1,
			check: func(t *testing.T, e *sandbox.Error) {
				if e.TimeoutMs != 100 {
					t.Errorf("timeoutMs = %d", e.TimeoutMs)
				}
			}},
		{name: "start function is fenced", fixture: "start_spin", lim: huge, wantKind: sandbox.KindTimeout, wantFuel: -1, wantPeak: -1},
		{name: "memory bomb", fixture: "memory_bomb", lim: capMemory(fourMiB), wantKind: sandbox.KindMemoryLimitExceeded, wantFuel: -1, wantPeak: 49 * 65536,
			check: func(t *testing.T, e *sandbox.Error) {
				if e.Limit != fourMiB || e.Resource != sandbox.ResourceMemory || e.Requested != 65*65536 {
					t.Errorf("limit %d resource %s requested %d", e.Limit, e.Resource, e.Requested)
				}
			}},
		{name: "memory bomb default cap", fixture: "memory_bomb", wantKind: sandbox.KindMemoryLimitExceeded, wantFuel: -1, wantPeak: 15794176},
		{name: "disallowed import", fixture: "disallowed_import", wantKind: sandbox.KindDisallowedImport, wantFuel: -1, wantPeak: -1, wantInMsg: "env::secret",
			check: func(t *testing.T, e *sandbox.Error) {
				if e.Module != "env" || e.Name != "secret" || e.Usage != nil {
					t.Errorf("module %q name %q usage %v", e.Module, e.Name, e.Usage)
				}
			}},
		{name: "logger without grant", fixture: "logger", wantKind: sandbox.KindDisallowedImport, wantFuel: -1, wantPeak: -1, wantInMsg: "host::log"},
		{name: "logger", fixture: "logger", caps: sandbox.Capabilities{Log: true}, wantFuel: -1, wantPeak: 65536, wantLogs: []string{"hello from the guest"}},
		{name: "roll seed 42", fixture: "random_roller", function: "roll", caps: sandbox.Capabilities{Random: true, Seed: 42}, want: []sandbox.Value{i32(803958421)}, wantFuel: -1, wantPeak: -1},
		{name: "grow within cap", fixture: "grow_within_cap", want: []sandbox.Value{i32(32)}, wantFuel: -1, wantPeak: 2097152},
		{name: "start grows past cap", fixture: "start_grow", wantKind: sandbox.KindMemoryLimitExceeded, wantFuel: -1, wantPeak: -1},
		{name: "deny then unreachable", fixture: "mem_deny_unreachable", lim: capMemory(fourMiB), wantKind: sandbox.KindMemoryLimitExceeded, wantFuel: -1, wantPeak: 65536},
		{name: "deny then oob store", fixture: "mem_deny_oob_store", lim: capMemory(fourMiB), wantKind: sandbox.KindMemoryLimitExceeded, wantFuel: -1, wantPeak: 65536},
		{name: "deny then spin to fuel", fixture: "mem_deny_spin", lim: func(l *limits.Limits) { l.MemoryBytes = fourMiB; l.Fuel = 100_000 }, wantKind: sandbox.KindMemoryLimitExceeded, wantFuel: 100_000, wantPeak: 65536},
		{name: "huge single grow", fixture: "mem_huge_grow", lim: capMemory(fourMiB), wantKind: sandbox.KindMemoryLimitExceeded, wantFuel: -1, wantPeak: 65536,
			check: func(t *testing.T, e *sandbox.Error) {
				if e.Requested != 60001*65536 {
					t.Errorf("requested = %d", e.Requested)
				}
			}},
		{name: "hidden memory grow", fixture: "mem_hidden_grow", lim: capMemory(fourMiB), wantKind: sandbox.KindMemoryLimitExceeded, wantFuel: -1, wantPeak: -1},
		{name: "table bomb", fixture: "table_bomb", wantKind: sandbox.KindMemoryLimitExceeded, wantFuel: -1, wantPeak: -1,
			check: func(t *testing.T, e *sandbox.Error) {
				if e.Resource != sandbox.ResourceTable || e.Limit != limits.DefaultTableElements {
					t.Errorf("resource %s limit %d", e.Resource, e.Limit)
				}
			}},
		{name: "trap near cap is a trap", fixture: "trap_near_cap", lim: capMemory(fourMiB), wantKind: sandbox.KindTrap, wantCode: "integer_divide_by_zero", wantFuel: -1, wantPeak: fourMiB},
		{name: "oob without grow is a trap", fixture: "oob_without_grow", wantKind: sandbox.KindTrap, wantCode: "memory_out_of_bounds", wantFuel: -1, wantPeak: -1},
		{name: "recursion", fixture: "recursion", wantKind: sandbox.KindTrap, wantCode: "stack_overflow", wantFuel: -1, wantPeak: -1},
		{name: "log bad pointer", fixture: "log_bad_pointer", caps: sandbox.Capabilities{Log: true}, wantKind: sandbox.KindTrap, wantCode: "memory_out_of_bounds", wantInMsg: "host::log", wantFuel: -1, wantPeak: -1},
		{name: "log past end", fixture: "log_trap_inside", caps: sandbox.Capabilities{Log: true}, wantKind: sandbox.KindTrap, wantCode: "memory_out_of_bounds", wantInMsg: "host::log", wantFuel: -1, wantPeak: -1},
		{name: "log invalid utf8", fixture: "log_invalid_utf8", caps: sandbox.Capabilities{Log: true}, wantFuel: -1, wantPeak: -1, wantLogs: []string{"ok \uFFFD\uFFFD bad"}},
		{name: "log wrong signature", fixture: "log_wrong_signature", caps: sandbox.Capabilities{Log: true}, wantKind: sandbox.KindDisallowedImport, wantInMsg: "signature", wantFuel: -1, wantPeak: -1},
		{name: "data exceeds cap", fixture: "data_exceeds_cap", lim: capMemory(fourMiB), wantKind: sandbox.KindMemoryLimitExceeded, wantFuel: -1, wantPeak: -1},
		{name: "multi memory refused by count", fixture: "multi_memory", wantKind: sandbox.KindMemoryLimitExceeded, wantFuel: -1, wantPeak: -1,
			check: func(t *testing.T, e *sandbox.Error) {
				if e.Resource != sandbox.ResourceMemories {
					t.Errorf("resource %s", e.Resource)
				}
			}},
		{name: "multi memory", fixture: "multi_memory", lim: func(l *limits.Limits) { l.Memories = 2 }, want: []sandbox.Value{i32(4)}, wantFuel: -1, wantPeak: 4 * 65536},
		{name: "missing export", fixture: "well_behaved", function: "nope", wantKind: sandbox.KindExport, wantInMsg: `"nope"`, wantFuel: -1, wantPeak: -1},
		{name: "wrong arity", fixture: "well_behaved", function: "add", args: []sandbox.Value{i32(1)}, wantKind: sandbox.KindExport, wantInMsg: "takes 2", wantFuel: -1, wantPeak: -1},
		{name: "wrong type", fixture: "well_behaved", function: "add", args: []sandbox.Value{i32(1), sandbox.ValueI64(2)}, wantKind: sandbox.KindExport, wantInMsg: "must be i32", wantFuel: -1, wantPeak: -1},
	}
	for _, trap := range []struct{ export, code string }{
		{"unreachable", "unreachable"},
		{"div_by_zero", "integer_divide_by_zero"},
		{"int_overflow", "integer_overflow"},
		{"bad_conversion", "invalid_conversion_to_integer"},
		{"oob", "memory_out_of_bounds"},
		{"table_oob", "table_out_of_bounds"},
		{"null_call", "indirect_call_to_null"},
		{"bad_sig", "bad_signature"},
		{"stack_overflow", "stack_overflow"},
	} {
		cases = append(cases, runCase{name: "trap " + trap.export, fixture: "traps", function: trap.export, wantKind: sandbox.KindTrap, wantCode: trap.code, wantFuel: -1, wantPeak: -1})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runFixture(t, tc)
		})
	}
}

func runFixture(t *testing.T, tc runCase) {
	e := engine(t)
	ctx := context.Background()
	m, _, err := e.Compile(ctx, fixture(t, tc.fixture))
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	l := limits.Defaults()
	if tc.lim != nil {
		tc.lim(&l)
	}
	fn := tc.function
	if fn == "" {
		fn = "run"
	}
	var logs []string
	res, err := e.Run(ctx, sandbox.Request{Module: m, Function: fn, Args: tc.args, Limits: l, Capabilities: tc.caps,
		Log: func(line string) { logs = append(logs, line) }})
	var usage sandbox.Usage
	if tc.wantKind == "" {
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		if tc.want != nil && !equalValues(res.Values, tc.want) {
			t.Errorf("values = %v, want %v", res.Values, tc.want)
		}
		usage = res.Usage
	} else {
		var se *sandbox.Error
		if !errors.As(err, &se) {
			t.Fatalf("err = %v (%T), want kind %s", err, err, tc.wantKind)
		}
		if se.Kind != tc.wantKind || !errors.Is(err, tc.wantKind) {
			t.Fatalf("kind = %s (%v), want %s", se.Kind, se, tc.wantKind)
		}
		if tc.wantCode != "" && se.TrapCode != tc.wantCode {
			t.Errorf("trap code = %q, want %q (%v)", se.TrapCode, tc.wantCode, se)
		}
		if !strings.Contains(se.Message, tc.wantInMsg) {
			t.Errorf("message %q does not mention %q", se.Message, tc.wantInMsg)
		}
		if strings.Contains(se.Message, "backtrace") || strings.Contains(se.Message, "\n") {
			t.Errorf("message leaks host detail: %q", se.Message)
		}
		if tc.check != nil {
			tc.check(t, se)
		}
		if se.Usage != nil {
			usage = *se.Usage
		}
	}
	if tc.wantFuel >= 0 && usage.FuelConsumed != uint64(tc.wantFuel) {
		t.Errorf("fuel = %d, want %d", usage.FuelConsumed, tc.wantFuel)
	}
	if tc.wantPeak >= 0 && usage.PeakMemoryBytes != uint64(tc.wantPeak) {
		t.Errorf("peak = %d, want %d", usage.PeakMemoryBytes, tc.wantPeak)
	}
	if tc.wantLogs != nil && strings.Join(logs, "\n") != strings.Join(tc.wantLogs, "\n") {
		t.Errorf("logs = %q, want %q", logs, tc.wantLogs)
	}
}

func equalValues(a, b []sandbox.Value) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestValuesRoundTrip passes edge values through the echo exports and
// compares bits.
func TestValuesRoundTrip(t *testing.T) {
	e := engine(t)
	m, _, err := e.Compile(context.Background(), fixture(t, "well_behaved"))
	if err != nil {
		t.Fatal(err)
	}
	vals := []sandbox.Value{
		sandbox.ValueI32(math.MinInt32), sandbox.ValueI32(-1),
		sandbox.ValueI64(math.MinInt64), sandbox.ValueI64(math.MaxInt64), sandbox.ValueI64(1<<53 + 1),
		sandbox.ValueF32(float32(math.Copysign(0, -1))), sandbox.ValueF32(float32(math.Inf(1))),
		{Type: sandbox.F32, Bits: 0x7fc00001}, {Type: sandbox.F32, Bits: 0x7fa00000},
		sandbox.ValueF64(math.Copysign(0, -1)), sandbox.ValueF64(math.Inf(-1)),
		{Type: sandbox.F64, Bits: 0x7ff8000000000123}, {Type: sandbox.F64, Bits: 0x7ff0000000000001},
		sandbox.ValueF64(5e-324),
	}
	for _, v := range vals {
		res, err := e.Run(context.Background(), sandbox.Request{Module: m, Function: "echo_" + string(v.Type), Args: []sandbox.Value{v}, Limits: limits.Defaults()})
		if err != nil {
			t.Fatalf("%v: %v", v, err)
		}
		if len(res.Values) != 1 || res.Values[0] != v {
			t.Errorf("echo %v (bits %#x) = %v (bits %#x)", v, v.Bits, res.Values, res.Values[0].Bits)
		}
	}
	res, err := e.Run(context.Background(), sandbox.Request{Module: m, Function: "multi", Limits: limits.Defaults(),
		Args: []sandbox.Value{i32(7), sandbox.ValueI64(-8), sandbox.ValueF32(1.5), sandbox.ValueF64(-2.25)}})
	if err != nil {
		t.Fatal(err)
	}
	want := []sandbox.Value{sandbox.ValueF64(-2.25), sandbox.ValueF32(1.5), sandbox.ValueI64(-8), i32(7)}
	if !equalValues(res.Values, want) {
		t.Errorf("multi = %v, want %v", res.Values, want)
	}
}

// TestLogMaximalLines: a guest logging lines far over the per-line cap in a
// tight loop gets each line cut to MaxLogLineBytes, the run's total capped
// by logBytes at the lines' wire cost, and the result marked truncated.
func TestLogMaximalLines(t *testing.T) {
	e := engine(t)
	// 4 pages of memory; log(0, 200000) 1000 times.
	wat := `(module (import "host" "log" (func $log (param i32 i32)))
	  (memory (export "memory") 4)
	  (func (export "run") (local $i i32)
	    (loop $l
	      (call $log (i32.const 0) (i32.const 200000))
	      (local.set $i (i32.add (local.get $i) (i32.const 1)))
	      (br_if $l (i32.lt_u (local.get $i) (i32.const 1000))))))`
	m, _, err := e.Compile(context.Background(), sandbox.Source{WAT: wat})
	if err != nil {
		t.Fatal(err)
	}
	l := limits.Defaults()
	l.LogBytes = 256 << 10
	var lines, total int
	res, err := e.Run(context.Background(), sandbox.Request{Module: m, Function: "run", Limits: l,
		Capabilities: sandbox.Capabilities{Log: true},
		Log: func(line string) {
			lines++
			total += len(line)
			if len(line) > sandbox.MaxLogLineBytes {
				t.Errorf("a line of %d bytes passed the per-line cap", len(line))
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	// The memory is zeroed: each cut line is MaxLogLineBytes NULs, six
	// bytes each in JSON.
	lineCost := sandbox.LogLineCost(strings.Repeat("\x00", sandbox.MaxLogLineBytes))
	if !res.LogTruncated || total > int(l.LogBytes) || lines != res.LogLines || lines != int(l.LogBytes/lineCost) {
		t.Errorf("lines %d (result %d), bytes %d of %d, truncated %v", lines, res.LogLines, total, l.LogBytes, res.LogTruncated)
	}
}

// TestInvalidModulesStayInvalid: compile validates the original bytes only
// when it must (see Engine.compile); these must all still be refused with
// wasmtime's message about the original.
func TestInvalidModulesStayInvalid(t *testing.T) {
	e := engine(t)
	for name, wat := range map[string]string{
		"start with a parameter": `(module (func $s (param i32)) (start $s))`,
		"start with a result":    `(module (func $s (result i32) (i32.const 1)) (start $s))`,
		"type error in a body":   `(module (func (export "run") (result i32) (f32.const 1)))`,
		"grow without memory":    `(module (func (export "run") (result i32) (memory.grow (i32.const 1))))`,
		"grow of a float":        `(module (memory 1) (func (export "run") (result i32) (memory.grow (f32.const 1))))`,
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := e.Compile(context.Background(), sandbox.Source{WAT: wat})
			var se *sandbox.Error
			if !errors.As(err, &se) || se.Kind != sandbox.KindInvalidModule {
				t.Fatalf("err = %v, want invalid_module", err)
			}
			if strings.Contains(se.Message, "__sandboxd") {
				t.Errorf("message speaks of the instrumentation: %q", se.Message)
			}
		})
	}
}

// TestFuelBoundaryIsExact: a call that needs more fuel than its budget is
// fuel_exhausted, even when it ends between two of wasmtime's fuel checks
// (function entries and loop headers): add needs 4 and fib(10) 182. Before,
// --fuel 3 ran add and reported 3 consumed, and fib(10) ran with 180.
func TestFuelBoundaryIsExact(t *testing.T) {
	m := compileFixture(t, "well_behaved")
	for _, c := range []struct {
		fn   string
		arg  []sandbox.Value
		need uint64
	}{
		{"add", []sandbox.Value{sandbox.ValueI32(2), sandbox.ValueI32(40)}, 4},
		{"fib", []sandbox.Value{sandbox.ValueI32(10)}, 182},
	} {
		for _, budget := range []uint64{c.need - 2, c.need - 1, c.need, c.need + 1} {
			l := hangLimits()
			l.Fuel = budget
			res, err := engine(t).Run(context.Background(), sandbox.Request{Module: m, Function: c.fn, Args: c.arg, Limits: l})
			if budget < c.need {
				se := wantKind(t, err, sandbox.KindFuelExhausted)
				if se.Usage == nil || se.Usage.FuelConsumed != budget || se.Budget != budget {
					t.Errorf("%s with %d fuel: %+v, want fuel_exhausted having consumed the budget", c.fn, budget, se)
				}
				continue
			}
			if err != nil || res.FuelConsumed != c.need {
				t.Errorf("%s with %d fuel: %v, %+v; want success consuming %d", c.fn, budget, err, res, c.need)
			}
		}
	}
}
