// Package limits defines the resource fences of one sandboxed run as a
// validated value: the fuel budget, the wall-clock deadline, the memory and
// table caps, the instance and memory counts, the guest log budget, the
// WASI output budget, and the time and memory the compile of a new module
// may take.
//
// A Limits value is plain data. The sandbox package enforces it; the rpc and
// cmd packages build it from user input and call Validate, which names the
// offending field so that the message can be shown to a user unchanged.
package limits

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Limits are the fences of one run. The zero value is not usable: start from
// Defaults and override fields, then call Validate.
type Limits struct {
	// Fuel is the instruction budget, in wasmtime fuel units (roughly one
	// per wasm instruction). Exhausting it stops the run with fuel_exhausted.
	Fuel uint64
	// Timeout is the wall-clock budget from the start of instantiation
	// (start function included) to the end of the call.
	Timeout time.Duration
	// MemoryBytes caps the sum of all linear memories and table storage
	// (8 bytes per funcref, 4 per externref element) of the run.
	MemoryBytes uint64
	// TableElements caps the elements of each table.
	TableElements uint64
	// Instances caps the instances in the run's store.
	Instances uint64
	// Memories caps the number of linear memories (multi-memory modules).
	Memories uint64
	// LogBytes caps the total bytes of guest log lines kept for the run.
	LogBytes uint64
	// OutputBytes caps each of a WASI guest's stdout and stderr: bytes past
	// it are dropped (the guest's writes still succeed) and the result says
	// the output was truncated.
	OutputBytes uint64
	// CompileTimeout bounds the wall-clock time of compiling a module the
	// engine has not compiled before (converting WAT, validating,
	// instrumenting, Cranelift). A cached module costs no compile.
	CompileTimeout time.Duration
	// CompileMemoryBytes caps the memory of that compile: the data size
	// (RLIMIT_DATA) of the child process that does it, its own baseline
	// of about 110 MiB included (thread stacks and the Go heap arena count).
	CompileMemoryBytes uint64
}

// Documented defaults. Every default is also within DefaultMaximums.
//
// They are chosen so that what the documented toolchains produce runs
// without asking for more (measured with sandboxd's own compile child, on
// the 2-core development machine; the table is in docs/protocol.md, "The
// default limits, and the programs they fit"): C (wasi-libc) and Rust programs need a few MiB and a table of
// under 200 elements; Go programs and Go PDK plugins (2-3 MB of wasm) 3
// MiB of memory and tables of about 6,000 elements, and compile in 6 s;
// the largest ordinary program measured, a JavaScript interpreter built
// from github.com/dop251/goja for wasip1 (19 MB of wasm, 12,400
// functions), starts with a table of 16,509 elements and 10.3 MiB of
// memory, runs "1+1" in 12 MiB, and its compile takes 21-24 s of CPU,
// 512-768 MiB of data, and 46-125 s of wall-clock time on the shared
// machine at loads of 5-10 (at load 17 it got 16 s of CPU in 183 s).
const (
	// DefaultFuel is the default maximum's (2^50, weeks of compute): the
	// deadline is the fence a run meets unless it asks for fuel. Fuel is
	// the deterministic fence (the same count on every machine), so it is
	// for those who want one; at about 1.3 G fuel a second, a budget of
	// 100 M stopped a run after 0.08 s, long before a deadline of
	// seconds that was all its caller had asked for.
	DefaultFuel        = 1 << 50
	DefaultTimeout     = time.Second
	DefaultMemoryBytes = 16 << 20
	// DefaultTableElements holds a Go program six times goja's size (Go
	// tables have about 1.3 elements per function); table storage counts
	// against MemoryBytes too, 8 bytes per element (800 KB at this cap).
	DefaultTableElements = 100_000
	DefaultInstances     = 1
	DefaultMemories      = 1
	DefaultLogBytes      = 1 << 20
	DefaultOutputBytes   = 1 << 20

	// DefaultCompileTimeout lets goja's compile finish on a machine whose
	// cores are shared 5 ways (125 s measured); a module is compiled once
	// and cached. It is wall-clock time: no wall-clock default holds at
	// any load.
	DefaultCompileTimeout = 3 * time.Minute
	// DefaultCompileMemoryBytes is about three times what goja's compile
	// needs.
	DefaultCompileMemoryBytes = 2 << 30
)

// WasmPageSize is the size of one wasm linear-memory page.
const WasmPageSize = 64 << 10

// Defaults returns the limits a run gets when it asks for nothing.
func Defaults() Limits {
	return Limits{
		Fuel:          DefaultFuel,
		Timeout:       DefaultTimeout,
		MemoryBytes:   DefaultMemoryBytes,
		TableElements: DefaultTableElements,
		Instances:     DefaultInstances,
		Memories:      DefaultMemories,
		LogBytes:      DefaultLogBytes,
		OutputBytes:   DefaultOutputBytes,

		CompileTimeout:     DefaultCompileTimeout,
		CompileMemoryBytes: DefaultCompileMemoryBytes,
	}
}

// DefaultMaximums returns the ceilings an operator allows when they set none.
// They exist so that a parent cannot, by mistake or malice, ask for a run
// that would take the whole machine: 4 GiB is the most a wasm32 memory can
// address, ten minutes is longer than any interactive use needs.
func DefaultMaximums() Limits {
	return Limits{
		Fuel:          1 << 50,
		Timeout:       10 * time.Minute,
		MemoryBytes:   4 << 30,
		TableElements: 10_000_000,
		Instances:     16,
		Memories:      16,
		LogBytes:      64 << 20,
		OutputBytes:   64 << 20,

		CompileTimeout:     5 * time.Minute,
		CompileMemoryBytes: 4 << 30,
	}
}

// HardMaximums are the ceilings no configuration may exceed: what the
// engine can enforce at all (a wasm32 memory addresses 4 GiB) or what no
// sane run needs. The operator's maximums (flags) must lie within them.
func HardMaximums() Limits {
	return Limits{
		Fuel:          1 << 62,
		Timeout:       24 * time.Hour,
		MemoryBytes:   4 << 30,
		TableElements: 100_000_000,
		Instances:     10_000,
		Memories:      100,
		LogBytes:      1 << 30,
		OutputBytes:   1 << 30,

		CompileTimeout:     24 * time.Hour,
		CompileMemoryBytes: 1 << 40,
	}
}

// FieldError reports an invalid limit, naming the field with its wire name.
type FieldError struct {
	Field   string // wire name, e.g. "fuel" or "timeoutMs"
	Problem string // e.g. "must be > 0"
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

// ErrInvalid is matched by every FieldError with errors.Is.
var ErrInvalid = errors.New("invalid limit")

// Is makes errors.Is(err, ErrInvalid) true for field errors.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// Field describes one limit: its wire name and how to read it from a Limits.
type Field struct {
	Name string // the wire name, used in messages and JSON
	Get  func(Limits) uint64
	Set  func(*Limits, uint64)
}

// Fields lists every limit in wire order, a copy each call (what the
// package keeps cannot be changed from outside). rpc and cmd use it so the
// set of limits is written down once.
func Fields() []Field { return slices.Clone(fields) }

var fields = []Field{
	{"fuel", func(l Limits) uint64 { return l.Fuel }, func(l *Limits, v uint64) { l.Fuel = v }},
	{"timeoutMs", func(l Limits) uint64 { return uint64(l.Timeout / time.Millisecond) }, func(l *Limits, v uint64) { l.Timeout = Millis(v) }},
	{"memoryBytes", func(l Limits) uint64 { return l.MemoryBytes }, func(l *Limits, v uint64) { l.MemoryBytes = v }},
	{"tableElements", func(l Limits) uint64 { return l.TableElements }, func(l *Limits, v uint64) { l.TableElements = v }},
	{"instances", func(l Limits) uint64 { return l.Instances }, func(l *Limits, v uint64) { l.Instances = v }},
	{"memories", func(l Limits) uint64 { return l.Memories }, func(l *Limits, v uint64) { l.Memories = v }},
	{"logBytes", func(l Limits) uint64 { return l.LogBytes }, func(l *Limits, v uint64) { l.LogBytes = v }},
	{"outputBytes", func(l Limits) uint64 { return l.OutputBytes }, func(l *Limits, v uint64) { l.OutputBytes = v }},
	{"compileTimeoutMs", func(l Limits) uint64 { return uint64(l.CompileTimeout / time.Millisecond) }, func(l *Limits, v uint64) { l.CompileTimeout = Millis(v) }},
	{"compileMemoryBytes", func(l Limits) uint64 { return l.CompileMemoryBytes }, func(l *Limits, v uint64) { l.CompileMemoryBytes = v }},
}

// Millis converts a count of milliseconds to a Duration, saturating
// instead of wrapping, so that an absurd value stays absurd (and fails
// Validate) instead of becoming a small one.
func Millis(v uint64) time.Duration {
	const most = uint64(math.MaxInt64 / int64(time.Millisecond))
	if v > most {
		v = most
	}
	return time.Duration(v) * time.Millisecond
}

// Validate checks every field is positive and at most the matching maximum.
// The first problem found is returned as a *FieldError.
func (l Limits) Validate(max Limits) error {
	if l.Timeout%time.Millisecond != 0 {
		return &FieldError{"timeoutMs", "must be a whole number of milliseconds"}
	}
	if l.CompileTimeout%time.Millisecond != 0 {
		return &FieldError{"compileTimeoutMs", "must be a whole number of milliseconds"}
	}
	for _, f := range fields {
		v, m := f.Get(l), f.Get(max)
		if v == 0 {
			return &FieldError{f.Name, "must be > 0"}
		}
		if v > m {
			return &FieldError{f.Name, fmt.Sprintf("must be <= %d (the sidecar's maximum)", m)}
		}
	}
	return nil
}
