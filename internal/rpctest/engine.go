// Package rpctest is the fake engine the sidecar's tests (rpc) and the Go
// client's tests (clients/go/sandboxd) run the real rpc.Server over. A
// module compiles at once to the one module of Exports, whose functions
// do what their names say, so a test drives every path of the server
// (queueing, cancellation, logs, errors, instances) without wasmtime and
// can wait for what it needs by events (Started), never by sleeping. It is
// pure Go, like rpc and the client.
package rpctest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

// Engine implements rpc.Engine. What a run does depends on its function:
//
//	run          returns i32 42
//	values       returns one value of each type, with awkward bits
//	echo         returns its four args (i32, i64, f32, f64)
//	pause(k)     returns k after k%3 ms, so that concurrent answers reorder
//	logs(k, n)   logs n lines "k:i", then returns k
//	log:N        logs N lines "line i", then returns nothing
//	block        reports it started (Started), then waits for its context
//	gate         reports it started, then waits for Gate (or its context)
//	fail:KIND    fails with a *protocol.Error of that kind (KindError)
//	plainerror   fails with an error that is no outcome
//	panic        panics
//	sleep        pauses 0-2 ms, then returns i32 1
//	host:N       calls its first host function N times (host.go)
//
// A module given as the WAT text "compile:gate" compiles until Gate is
// closed (reporting "compile" on Started); "compile:stuck" too, but deaf
// to its context, as a compile stuck in a system call no cancellation
// reaches; the id UnknownModuleID was never compiled.
type Engine struct {
	Started chan string   // "block", "gate", "compile", as each begins
	Gate    chan struct{} // closed to release "gate" runs and "compile:gate" compiles
	Runs    atomic.Int64  // runs begun
}

// NewEngine returns an engine whose Started holds 1,000 events unread.
func NewEngine() *Engine {
	return &Engine{Started: make(chan string, 1000), Gate: make(chan struct{})}
}

// Exports are the exports of the engine's module.
var Exports = []protocol.Export{
	{Name: "run", Kind: "func", Params: []string{}, Results: []string{"i32"}},
	{Name: "values", Kind: "func", Params: []string{}, Results: []string{"i32", "i64", "f32", "f64"}},
	{Name: "echo", Kind: "func", Params: []string{"i32", "i64", "f32", "f64"}, Results: []string{"i32", "i64", "f32", "f64"}},
	{Name: "pause", Kind: "func", Params: []string{"i32"}, Results: []string{"i32"}},
	{Name: "logs", Kind: "func", Params: []string{"i32", "i32"}, Results: []string{"i32"}},
	{Name: "memory", Kind: "memory", Params: []string{}, Results: []string{}},
}

// ModuleID is the id of the engine's module.
const ModuleID = "sha256:fa4efa4efa4efa4efa4efa4efa4efa4efa4efa4efa4efa4efa4efa4efa4efa4e"

// UnknownModuleID is a module id the engine never compiled.
const UnknownModuleID = "sha256:0000000000000000000000000000000000000000000000000000000000000000"

// Module is the one module of the engine (or a plugin's, Instances').
type Module struct{ info protocol.ModuleInfo }

func (m *Module) Info() *protocol.ModuleInfo { return &m.info }

func (e *Engine) Compile(ctx context.Context, src protocol.Source) (rpc.Module, protocol.CompileInfo, error) {
	if src.ID == UnknownModuleID {
		return nil, protocol.CompileInfo{}, &protocol.Error{Kind: protocol.KindInvalidModule, Message: "module " + UnknownModuleID + " was never compiled here"}
	}
	if src.WAT == "compile:gate" { // a slow compile: until the gate opens or ctx ends
		e.Started <- "compile"
		select {
		case <-e.Gate:
		case <-ctx.Done():
			return nil, protocol.CompileInfo{}, &protocol.Error{Kind: protocol.KindCancelled, Message: "compile cancelled"}
		}
	}
	if src.WAT == "compile:stuck" {
		e.Started <- "compile"
		<-e.Gate
	}
	mod := &Module{protocol.ModuleInfo{
		ID:      ModuleID,
		Imports: []protocol.Import{{Module: "host", Name: "log", Kind: "func", Type: "(i32, i32) -> ()"}},
		Exports: Exports,
	}}
	return mod, protocol.CompileInfo{Cached: src.ID != "", Elapsed: 5 * time.Microsecond}, nil
}

// CompileCached: every module is in the cache, except the slow compile's
// and the unknown id, so runs take the server's inline paths (prepared,
// and run when nothing else waits, where they were read).
func (e *Engine) CompileCached(src protocol.Source) (rpc.Module, bool) {
	if src.Encoded != nil && src.WAT == "" && src.Wasm == nil {
		return nil, false // knows no wire literals: the server decodes and asks again
	}
	if src.WAT == "compile:gate" || src.WAT == "compile:stuck" || src.ID == UnknownModuleID {
		return nil, false
	}
	m, _, err := e.Compile(context.Background(), src)
	return m, err == nil
}

func (e *Engine) CacheStats() protocol.CacheStats {
	return protocol.CacheStats{Entries: 3, Bytes: 1234, Hits: 9, Misses: 3}
}

func u64(v uint64) *uint64 { return &v }
func str(s string) *string { return &s }

// KindError is the error a "fail:KIND" run returns: the kind with the
// details the engine gives it.
func KindError(kind protocol.Kind) *protocol.Error {
	se := &protocol.Error{Kind: kind, Message: "fake " + string(kind)}
	d := &se.Data
	switch kind {
	case protocol.KindFuelExhausted:
		d.Budget = u64(1000)
	case protocol.KindTimeout:
		d.TimeoutMs = u64(250)
	case protocol.KindMemoryLimitExceeded:
		d.Limit, d.Resource, d.Requested = u64(65536), string(protocol.ResourceMemory), u64(131072)
	case protocol.KindDisallowedImport:
		d.Module, d.Name = str("wasi_snapshot_preview1"), str("fd_write")
	case protocol.KindExport:
		d.Function = str("nope")
	case protocol.KindTrap:
		d.TrapCode = "unreachable"
		d.Frames = []protocol.FrameInfo{{Func: "inner", FuncIndex: 3, ModuleOffset: 0x42}, {FuncIndex: 1, ModuleOffset: 7}}
	}
	if kind != protocol.KindInvalidModule && kind != protocol.KindDisallowedImport {
		d.FuelConsumed, d.PeakMemoryBytes = u64(77), u64(65536)
	}
	return se
}

func cancelled(data protocol.ErrorData) error {
	return &protocol.Error{Kind: protocol.KindCancelled, Message: "run cancelled by the caller", Data: data}
}

func (e *Engine) Run(ctx context.Context, _ rpc.Module, req protocol.Run) (*protocol.RunOutcome, error) {
	e.Runs.Add(1)
	fn := req.Function
	res := &protocol.RunOutcome{Usage: protocol.Usage{FuelConsumed: 4, PeakMemoryBytes: 65536}, Elapsed: 31 * time.Microsecond}
	switch {
	case fn == "run":
		res.Values = []protocol.Value{protocol.ValueI32(42)}
	case fn == "values":
		res.Values = []protocol.Value{
			protocol.ValueI32(-1),
			protocol.ValueI64(math.MinInt64),
			protocol.ValueF32(float32(math.Copysign(0, -1))),
			{Type: protocol.F64, Bits: 0x7ff8000000000123},
		}
	case fn == "echo":
		res.Values = append([]protocol.Value(nil), req.Args...)
	case fn == "pause":
		k := req.Args[0].I32()
		time.Sleep(time.Duration(k%3) * time.Millisecond) // not to wait for anything: to reorder answers
		res.Values = []protocol.Value{protocol.ValueI32(k)}
	case fn == "logs":
		k, n := req.Args[0].I32(), int(req.Args[1].I32())
		for i := range n {
			req.Log(fmt.Sprintf("%d:%d", k, i))
		}
		res.LogLines = n
		res.Values = []protocol.Value{protocol.ValueI32(k)}
	case strings.HasPrefix(fn, "log:"):
		n, _ := strconv.Atoi(strings.TrimPrefix(fn, "log:"))
		for i := range n {
			req.Log(fmt.Sprintf("line %d", i))
		}
		res.LogLines = n
		res.Values = []protocol.Value{}
	case fn == "block":
		e.Started <- fn
		<-ctx.Done()
		return nil, cancelled(protocol.ErrorData{FuelConsumed: u64(1)})
	case fn == "gate":
		e.Started <- fn
		select {
		case <-e.Gate:
			res.Values = []protocol.Value{protocol.ValueI32(1)}
		case <-ctx.Done():
			return nil, cancelled(protocol.ErrorData{})
		}
	case strings.HasPrefix(fn, "fail:"):
		return nil, KindError(protocol.Kind(strings.TrimPrefix(fn, "fail:")))
	case fn == "plainerror":
		return nil, errors.New("something broke")
	case fn == "panic":
		panic("fake engine panic")
	case strings.HasPrefix(fn, "host:"):
		n, _ := hostCalls(fn)
		vals, err := callHost(ctx, n, req.HostFunctions, req.Host, req.Limits.Timeout, req.Log)
		if err != nil {
			return nil, err
		}
		res.Values = vals
	case fn == "sleep":
		time.Sleep(time.Duration(e.Runs.Load()%3) * time.Millisecond) // not to wait for anything: to vary timings
		res.Values = []protocol.Value{protocol.ValueI32(1)}
	default:
		return nil, &protocol.Error{Kind: protocol.KindExport, Data: protocol.ErrorData{Function: str(fn)}, Message: "no export " + fn}
	}
	return res, nil
}
