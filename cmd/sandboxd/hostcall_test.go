package main

// Host functions served by the parent, end to end: the Go client's
// handlers answering the real sidecar's host/call requests for guests
// run by the real wasmtime (testdata/wat/host_lookup.wat,
// testdata/plugins/wat/host_user.wat).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/protocol"
)

// lookupDecl declares host_lookup.wat's import.
var lookupDecl = []sandboxd.HostFunction{{Module: "env", Name: "lookup", Params: []string{"i64"}, Results: []string{"i32"}}}

func lookupRun(function string, arg any, lim map[string]uint64) sandboxd.RunParams {
	return sandboxd.RunParams{Module: modPath("host_lookup.wat"), Function: function, Args: rawArgs(arg),
		Limits: lim, HostFunctions: lookupDecl}
}

// TestHostCallsAnsweredByTheParent: each of the guest's calls of its
// declared import reaches the run's handler with its argument, and the
// answers are what the guest computes with; undeclared, or declared with
// another signature, the import is refused before the guest runs.
func TestHostCallsAnsweredByTheParent(t *testing.T) {
	t.Parallel()
	c, _ := startClient(t, binPath)
	ctx := ctxT(t, time.Minute)
	var calls atomic.Int64
	times3 := func(_ context.Context, call sandboxd.HostCall) ([]sandboxd.HostValue, error) {
		calls.Add(1)
		if call.Module != "env" || call.Name != "lookup" || len(call.Args) != 1 || call.Args[0].Type != protocol.I64 {
			return nil, errors.New("unexpected call")
		}
		return []sandboxd.HostValue{sandboxd.HostI32(int32(call.Args[0].I64()) * 3)}, nil
	}
	res, err := c.RunWith(ctx, lookupRun("sum", 10, nil), sandboxd.RunHandlers{Host: times3})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.Values[0].Value); got != "135" || calls.Load() != 10 { // 3 × (0+…+9)
		t.Errorf("sum(10) = %s after %d host calls, want 135 after 10", got, calls.Load())
	}
	if res.FuelConsumed < 10*10_000 {
		t.Errorf("10 host calls consumed %d fuel, want at least their price (10 × 10,000)", res.FuelConsumed)
	}

	p := lookupRun("lookup", 1, nil)
	p.HostFunctions = nil
	_, err = c.RunWith(ctx, p, sandboxd.RunHandlers{Host: times3})
	if e := asRPCError(t, err); e.Kind() != string(protocol.KindDisallowedImport) {
		t.Errorf("undeclared: %v", err)
	}
	p.HostFunctions = []sandboxd.HostFunction{{Module: "env", Name: "lookup", Params: []string{"i32"}, Results: []string{"i32"}}}
	_, err = c.RunWith(ctx, p, sandboxd.RunHandlers{Host: times3})
	if e := asRPCError(t, err); e.Kind() != string(protocol.KindDisallowedImport) || !strings.Contains(e.Message, "(i64) -> (i32)") {
		t.Errorf("declared with another signature: %v", err)
	}
}

// TestHostCallPluginBytes: an Extism plugin's extism:host/user function
// takes and returns memory handles; the bytes behind them, text and
// binary, 1 byte to 4 MiB, reach the Go handler as []byte and come back.
// Its log_info links without the log grant.
func TestHostCallPluginBytes(t *testing.T) {
	t.Parallel()
	c, _ := startClient(t, binPath)
	ctx := ctxT(t, time.Minute)
	plugin, err := filepath.Abs(filepath.Join("..", "..", "testdata", "plugins", "wat", "host_user.wat"))
	if err != nil {
		t.Fatal(err)
	}
	reverse := func(_ context.Context, call sandboxd.HostCall) ([]sandboxd.HostValue, error) {
		b := bytes.Clone(call.Args[0].Bytes)
		for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
			b[i], b[j] = b[j], b[i]
		}
		return []sandboxd.HostValue{sandboxd.HostBytes(b)}, nil
	}
	big := make([]byte, 4<<20)
	for i := range big {
		big[i] = byte(i * 31)
	}
	decl := []sandboxd.HostFunction{{Module: "extism:host/user", Name: "transform", Params: []string{"bytes"}, Results: []string{"bytes"}}}
	for _, input := range [][]byte{[]byte("x"), []byte("héllo wörld"), {0, 255, 0, 1, 0x80}, big} {
		in := protocol.Bytes(input)
		res, err := c.RunWith(ctx, sandboxd.RunParams{Module: protocol.ModuleSpec{Path: sandboxd.Str(plugin)}, Function: "run", Input: &in, HostFunctions: decl,
			Limits: map[string]uint64{"memoryBytes": 64 << 20, "outputBytes": 16 << 20, "timeoutMs": 30_000}},
			sandboxd.RunHandlers{Host: reverse})
		if err != nil {
			t.Fatalf("%d bytes: %v", len(input), err)
		}
		want, _ := reverse(ctx, sandboxd.HostCall{Args: []sandboxd.HostValue{sandboxd.HostBytes(input)}})
		if res.Output == nil || !bytes.Equal(*res.Output, want[0].Bytes) {
			t.Errorf("%d bytes: the output is not the input reversed", len(input))
		}
		if res.LogDropped != 1 || res.LogLines != 0 {
			t.Errorf("%d bytes: logDropped %d, logLines %d; want the one line dropped", len(input), res.LogDropped, res.LogLines)
		}
	}

	// With the log grant the line is sent, and nothing is dropped; an
	// instance's call counts what it drops as a run does.
	var lines []string
	in := protocol.Bytes("ab")
	res, err := c.RunWith(ctx, sandboxd.RunParams{Module: protocol.ModuleSpec{Path: sandboxd.Str(plugin)}, Function: "run", Input: &in,
		HostFunctions: decl, Capabilities: &protocol.CapabilitySpec{Log: true}},
		sandboxd.RunHandlers{Host: reverse, Log: func(_ int, line string) { lines = append(lines, line) }})
	if err != nil || res.LogDropped != 0 || res.LogLines != 1 || fmt.Sprint(lines) != "[hi]" {
		t.Errorf("with the log grant: %+v %v, lines %q", res, err, lines)
	}
	inst, err := c.InstantiateWith(ctx, sandboxd.InstantiateParams{Module: protocol.ModuleSpec{Path: sandboxd.Str(plugin)}, HostFunctions: decl},
		sandboxd.RunHandlers{Host: reverse})
	if err != nil {
		t.Fatal(err)
	}
	out, err := inst.Call(ctx, "run", sandboxd.CallOptions{Input: []byte("ab")})
	if err != nil || out.LogDropped != 1 || out.Output == nil || string(*out.Output) != "ba" {
		t.Errorf("an instance's call: %+v %v", out, err)
	}
}

// TestHostCallWaitEndedByDeadlineAndCancel: a parent holding its answer
// does not hold the run: its deadline, or its caller's cancel, ends the
// wait; the handler's context is cancelled (the sidecar's
// $/cancelRequest), and the sidecar serves the next run.
func TestHostCallWaitEndedByDeadlineAndCancel(t *testing.T) {
	t.Parallel()
	c, _ := startClient(t, binPath, "--max-concurrency", "1")
	handlerEnded := make(chan error, 1)
	waiting := make(chan struct{}, 1)
	hold := func(ctx context.Context, _ sandboxd.HostCall) ([]sandboxd.HostValue, error) {
		waiting <- struct{}{}
		<-ctx.Done()
		handlerEnded <- ctx.Err()
		return nil, ctx.Err()
	}
	_, err := c.RunWith(ctxT(t, time.Minute), lookupRun("lookup", 1, map[string]uint64{"timeoutMs": 200}), sandboxd.RunHandlers{Host: hold})
	if e := asRPCError(t, err); e.Kind() != string(protocol.KindTimeout) {
		t.Errorf("deadline: %v", err)
	}
	<-waiting
	if err := <-handlerEnded; !errors.Is(err, context.Canceled) {
		t.Errorf("deadline: the handler's context ended with %v", err)
	}

	ctx, cancel := context.WithCancel(ctxT(t, time.Minute))
	go func() { <-waiting; cancel() }()
	_, err = c.RunWith(ctx, lookupRun("lookup", 1, map[string]uint64{"timeoutMs": 60_000}), sandboxd.RunHandlers{Host: hold})
	if e := asRPCError(t, err); e.Kind() != string(protocol.KindCancelled) {
		t.Errorf("cancel: %v", err)
	}
	if err := <-handlerEnded; !errors.Is(err, context.Canceled) {
		t.Errorf("cancel: the handler's context ended with %v", err)
	}

	res, err := c.Run(ctxT(t, time.Minute), sandboxd.RunParams{Module: modPath("well_behaved.wat"), Function: "add", Args: rawArgs(2, 40)}, nil)
	if err != nil || string(res.Values[0].Value) != "42" {
		t.Errorf("the next run: %+v %v", res, err)
	}
}

// TestHostCallWrongAnswers: values of the wrong type or count, and an
// error answer, end the run with host_function_error naming what was
// wrong; the sidecar keeps serving.
func TestHostCallWrongAnswers(t *testing.T) {
	t.Parallel()
	c, _ := startClient(t, binPath)
	ctx := ctxT(t, time.Minute)
	for _, tc := range []struct {
		values []sandboxd.HostValue
		err    error
		want   string
	}{
		{values: []sandboxd.HostValue{sandboxd.HostI64(1)}, want: "i64"},
		{values: []sandboxd.HostValue{sandboxd.HostF64(1)}, want: "f64"},
		{values: []sandboxd.HostValue{sandboxd.HostI32(1), sandboxd.HostI32(2)}, want: "2 values"},
		{values: []sandboxd.HostValue{sandboxd.HostBytes([]byte("x"))}, want: "bytes"},
		{err: errors.New("key <not> found"), want: "key <not> found"},
	} {
		_, err := c.RunWith(ctx, lookupRun("lookup", 7, nil), sandboxd.RunHandlers{Host: func(context.Context, sandboxd.HostCall) ([]sandboxd.HostValue, error) {
			return tc.values, tc.err
		}})
		e := asRPCError(t, err)
		if e.Kind() != string(protocol.KindHostFunctionError) || !strings.Contains(e.Message, "env::lookup") || !strings.Contains(e.Message, tc.want) {
			t.Errorf("answer %v %v: want host_function_error naming env::lookup and %q, got %v", tc.values, tc.err, tc.want, err)
		}
	}
	res, err := c.RunWith(ctx, lookupRun("lookup", 7, nil), sandboxd.RunHandlers{Host: func(context.Context, sandboxd.HostCall) ([]sandboxd.HostValue, error) {
		return []sandboxd.HostValue{sandboxd.HostI32(8)}, nil
	}})
	if err != nil || string(res.Values[0].Value) != "8" {
		t.Errorf("a right answer after the wrong ones: %+v %v", res, err)
	}
}

// TestHostCallHandlerCallsTheSidecar: with --max-concurrency 1, a handler
// that runs another module, calls an instance and asks for stats is
// answered (the waiting run gave its slot back), and a handler calling
// the very instance that waits on it is refused at once (-32003).
func TestHostCallHandlerCallsTheSidecar(t *testing.T) {
	t.Parallel()
	c, _ := startClient(t, binPath, "--max-concurrency", "1")
	ctx := ctxT(t, time.Minute)
	other, err := c.Instantiate(ctx, sandboxd.InstantiateParams{Module: modPath("well_behaved.wat")})
	if err != nil {
		t.Fatal(err)
	}
	nested := func(ctx context.Context, call sandboxd.HostCall) ([]sandboxd.HostValue, error) {
		res, err := c.Run(ctx, sandboxd.RunParams{Module: modPath("well_behaved.wat"), Function: "add", Args: rawArgs(call.Args[0].I64(), 40)}, nil)
		if err != nil {
			return nil, err
		}
		if _, err := other.Call(ctx, "fib", sandboxd.CallOptions{Args: rawArgs(10)}); err != nil {
			return nil, err
		}
		if _, err := c.Stats(ctx); err != nil {
			return nil, err
		}
		n, err := strconv.ParseInt(string(res.Values[0].Value), 10, 32)
		if err != nil {
			return nil, err
		}
		return []sandboxd.HostValue{sandboxd.HostI32(int32(n))}, nil
	}
	res, err := c.RunWith(ctx, lookupRun("sum", 3, map[string]uint64{"timeoutMs": 30_000}), sandboxd.RunHandlers{Host: nested})
	if err != nil || string(res.Values[0].Value) != "123" { // 40+41+42
		t.Fatalf("a run whose handler runs: %+v %v", res, err)
	}

	var self *sandboxd.Instance
	selfCall := func(ctx context.Context, _ sandboxd.HostCall) ([]sandboxd.HostValue, error) {
		_, err := self.Call(ctx, "lookup", sandboxd.CallOptions{Args: rawArgs(1)})
		var e *sandboxd.Error
		if !errors.As(err, &e) || e.Code != protocol.CodeHostCallCycle || !strings.Contains(e.Message, self.ID) {
			return nil, errors.New("calling the waiting instance: " + errString(err))
		}
		return []sandboxd.HostValue{sandboxd.HostI32(5)}, nil
	}
	self, err = c.InstantiateWith(ctx, sandboxd.InstantiateParams{Module: modPath("host_lookup.wat"), HostFunctions: lookupDecl},
		sandboxd.RunHandlers{Host: selfCall})
	if err != nil {
		t.Fatal(err)
	}
	out, err := self.Call(ctx, "lookup", sandboxd.CallOptions{Args: rawArgs(1)})
	if err != nil || string(out.Values[0].Value) != "5" {
		t.Errorf("an instance whose handler calls it: %+v %v", out, err)
	}
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}
