package sandboxd

// Host calls served by the client's handlers, over the real rpc.Server and
// the fake engine, whose "host:N" guests call their first declared host
// function N times (internal/rpctest/host.go).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
)

// lookup is env::lookup (i64) -> (i32).
var lookup = []HostFunction{{Module: "env", Name: "lookup", Params: []string{"i64"}, Results: []string{"i32"}}}

func hostRun(fn string, fns []HostFunction) RunParams {
	p := runP(fn)
	p.HostFunctions = fns
	return p
}

// TestHostHandlerOfARun: the run's handler gets each call with its args
// and the sidecar's id; its values go back to the guest; the client's
// handler serves a run that has none; with none at all, the call is
// answered an error.
func TestHostHandlerOfARun(t *testing.T) {
	framings(t, func(t *testing.T, ndjson bool) {
		f := serve(t, ndjson, 1)
		ctx := context.Background()
		var got []HostCall
		h := func(ctx context.Context, call HostCall) ([]HostValue, error) {
			got = append(got, call)
			return []HostValue{HostI32(int32(call.Args[0].I64()) + 40)}, nil
		}
		res, err := f.c.RunWith(ctx, hostRun("host:3", lookup), RunHandlers{Host: h})
		if err != nil || value(t, res) != "42" {
			t.Fatalf("run: %+v %v", res, err)
		}
		if len(got) != 3 || got[2].ID != "sbx-3" || got[2].Module != "env" || got[2].Name != "lookup" || got[2].Instance != "" ||
			got[2].Args[0].Type != protocol.I64 || got[2].Args[0].I64() != 2 {
			t.Fatalf("calls: %+v", got)
		}

		_, err = f.c.Run(ctx, hostRun("host:1", lookup), nil)
		var e *Error
		if !errors.As(err, &e) || e.Kind() != string(protocol.KindHostFunctionError) || !strings.Contains(e.Message, "no handler serves env::lookup") {
			t.Fatalf("without a handler: %v", err)
		}
		f.c.SetHostHandler(h)
		if res, err := f.c.Run(ctx, hostRun("host:1", lookup), nil); err != nil || value(t, res) != "40" {
			t.Fatalf("with the client's handler: %+v %v", res, err)
		}
	})
}

// TestHostHandlerErrors: a handler's error is the run's
// host_function_error with its message; a panic is one too.
func TestHostHandlerErrors(t *testing.T) {
	f := serve(t, false, 1)
	for _, c := range []struct {
		h    HostHandler
		want string
	}{
		{func(context.Context, HostCall) ([]HostValue, error) { return nil, errors.New("no such key") }, "no such key"},
		{func(context.Context, HostCall) ([]HostValue, error) {
			return nil, &HostError{Code: 7, Message: "seven"}
		}, "seven"},
		{func(context.Context, HostCall) ([]HostValue, error) { panic("boom") }, "the handler of env::lookup panicked: boom"},
		{func(context.Context, HostCall) ([]HostValue, error) { return nil, nil }, "the parent answered with 0 values; it returns (i32)"},
	} {
		_, err := f.c.RunWith(context.Background(), hostRun("host:1", lookup), RunHandlers{Host: c.h})
		var e *Error
		if !errors.As(err, &e) || e.Kind() != string(protocol.KindHostFunctionError) || !strings.Contains(e.Message, c.want) {
			t.Errorf("want host_function_error with %q, got %v", c.want, err)
		}
	}
}

// TestHostHandlerBytes: bytes arguments and results map to []byte.
func TestHostHandlerBytes(t *testing.T) {
	f := serve(t, false, 1)
	kv := []HostFunction{{Module: "extism:host/user", Name: "kv", Params: []string{"bytes", "f64"}, Results: []string{"bytes"}}}
	big := strings.Repeat("\x00\xff", 3000)
	res, err := f.c.RunWith(context.Background(), hostRun("host:2", kv), RunHandlers{Host: func(_ context.Context, call HostCall) ([]HostValue, error) {
		if call.Args[0].Type != protocol.TypeBytes || !strings.HasPrefix(string(call.Args[0].Bytes), "arg ") || call.Args[1].F64() != float64(call.Args[0].Bytes[4]-'0') {
			return nil, fmt.Errorf("args %+v", call.Args)
		}
		return []HostValue{HostBytes([]byte(big))}, nil
	}})
	if err != nil || value(t, res) != `"6000"` {
		t.Fatalf("run: %+v %v", res, err)
	}
}

// TestHostHandlerLeavesReadingToOthers: a host call is served on the
// goroutine of the caller whose run made it, which had been reading; while
// its handler holds the answer (never looking at its context), another
// caller's run is read and answered.
func TestHostHandlerLeavesReadingToOthers(t *testing.T) {
	f := serve(t, false, 2)
	entered, release := make(chan struct{}), make(chan struct{})
	h := func(context.Context, HostCall) ([]HostValue, error) {
		close(entered)
		<-release
		return []HostValue{HostI32(7)}, nil
	}
	type outcome struct {
		res *RunResult
		err error
	}
	first := make(chan outcome, 1)
	go func() {
		res, err := f.c.RunWith(context.Background(), hostRun("host:1", lookup), RunHandlers{Host: h})
		first <- outcome{res, err}
	}()
	<-entered
	bounded(t, time.Minute, "a run while another run's handler holds its answer", func() {
		res, err := f.c.Run(context.Background(), runP("pause", 5), nil)
		if err != nil || value(t, res) != "5" {
			t.Errorf("run: %+v %v", res, err)
		}
	})
	close(release)
	o := <-first
	if o.err != nil || value(t, o.res) != "7" {
		t.Fatalf("the run with the host call: %+v %v", o.res, o.err)
	}
}

// TestHostHandlerCallsTheClient: a handler that runs, compiles and asks
// for stats with its context is answered with one run slot; the requests
// carry hostCall.
func TestHostHandlerCallsTheClient(t *testing.T) {
	f := serve(t, false, 1)
	h := func(ctx context.Context, call HostCall) ([]HostValue, error) {
		res, err := f.c.Run(ctx, runP("pause", 5), nil)
		if err != nil {
			return nil, err
		}
		if _, err := f.c.Compile(ctx, mod); err != nil {
			return nil, err
		}
		if _, err := f.c.Stats(ctx); err != nil {
			return nil, err
		}
		var n int32
		_, _ = fmt.Sscan(string(res.Values[0].Value), &n)
		return []HostValue{HostI32(n)}, nil
	}
	res, err := f.c.RunWith(context.Background(), hostRun("host:2", lookup), RunHandlers{Host: h})
	if err != nil || value(t, res) != "5" {
		t.Fatalf("run: %+v %v", res, err)
	}
	if n := f.sent.count(`"hostCall":"sbx-`); n != 2 {
		t.Errorf("%d requests carry hostCall, want the 2 runs made from the handlers", n)
	}
}

// TestHostHandlerCancelled: the run's deadline passes while the handler
// holds its answer: the handler's context is cancelled, the run fails
// timeout, and nothing is answered for the call.
func TestHostHandlerCancelled(t *testing.T) {
	f := serve(t, false, 1)
	p := hostRun("host:1", lookup)
	p.Limits = map[string]uint64{"timeoutMs": 50}
	var cause error
	done := make(chan struct{})
	_, err := f.c.RunWith(context.Background(), p, RunHandlers{Host: func(ctx context.Context, call HostCall) ([]HostValue, error) {
		defer close(done)
		<-ctx.Done()
		cause = ctx.Err()
		return nil, ctx.Err()
	}})
	var e *Error
	if !errors.As(err, &e) || e.Kind() != string(protocol.KindTimeout) {
		t.Fatalf("run: %v", err)
	}
	bounded(t, time.Minute, "the handler", func() { <-done })
	if !errors.Is(cause, context.Canceled) {
		t.Errorf("handler's context: %v", cause)
	}
	if n := f.sent.count(`"id":"sbx-1"`); n != 0 {
		t.Errorf("the client answered a host call the sidecar cancelled (%d)", n)
	}
}

// TestHostHandlerOfAnInstance: the instance's handler serves its calls
// (and its instantiation), a call's own replaces it, and a call from the
// handler to the instance waiting for it is refused at once.
func TestHostHandlerOfAnInstance(t *testing.T) {
	c := serveInstances(t, 2)
	ctx := context.Background()
	var mu sync.Mutex
	var seen []string
	var in *Instance
	instanceHandler := func(ctx context.Context, call HostCall) ([]HostValue, error) {
		mu.Lock()
		seen = append(seen, "instance "+call.Instance)
		mu.Unlock()
		if in != nil {
			_, err := in.Call(ctx, "count", CallOptions{}) // waits for itself
			var e *Error
			if !errors.As(err, &e) || e.Code != protocol.CodeHostCallCycle {
				return nil, fmt.Errorf("call from the handler: %v", err)
			}
		}
		return []HostValue{HostI32(1)}, nil
	}
	in, err := c.InstantiateWith(ctx, InstantiateParams{Module: mod, HostFunctions: lookup, Config: map[string]string{"start": "host:1"}},
		RunHandlers{Host: instanceHandler})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Call(ctx, "host:2", CallOptions{}); err != nil {
		t.Fatal(err)
	}
	own := func(context.Context, HostCall) ([]HostValue, error) {
		mu.Lock()
		seen = append(seen, "own")
		mu.Unlock()
		return []HostValue{HostI32(2)}, nil
	}
	res, err := in.Call(ctx, "host:1", CallOptions{Host: own})
	if err != nil || string(res.Values[0].Value) != "2" {
		t.Fatalf("call with its own handler: %+v %v", res, err)
	}
	want := []string{"instance ", "instance " + in.ID, "instance " + in.ID, "own"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("handlers ran %q, want %q", seen, want)
	}
}
