package sandboxd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

// --- a fake instance engine behind the real rpc.Server ---

// fakeInstances adds instances to fakeEngine: each keeps a counter; by
// function, "count" adds one and outputs the count, "fail" is a plugin
// error naming its input, "trap" closes the instance. At most max live.
type fakeInstances struct {
	*fakeEngine
	max int

	mu   sync.Mutex
	next int
	live map[string]*fakeInstance
	gone map[string]string // closed instances and why
}

func (e *fakeInstances) Instantiate(ctx context.Context, _ rpc.Module, req protocol.InstanceRequest) (rpc.Instance, protocol.InstanceInfo, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.live) >= e.max {
		return nil, protocol.InstanceInfo{}, &protocol.TooManyInstancesError{Live: len(e.live), Max: e.max}
	}
	e.next++
	in := &fakeInstance{e: e, id: "inst-fake-" + strconv.Itoa(e.next)}
	e.live[in.id] = in
	return in, protocol.InstanceInfo{ID: in.id, Plugin: true}, nil
}

func (e *fakeInstances) LookupInstance(id string) (rpc.Instance, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if in, ok := e.live[id]; ok {
		return in, nil
	}
	reason, ok := e.gone[id]
	if !ok {
		reason = "no such instance (never created, or already closed)"
	}
	return nil, &protocol.InstanceClosedError{Instance: id, Reason: reason}
}

func (e *fakeInstances) close(in *fakeInstance, reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.live, in.id)
	e.gone[in.id] = reason
}

func (e *fakeInstances) CallOnce(context.Context, rpc.Module, protocol.InstanceRequest, protocol.Call) (*protocol.CallOutcome, error) {
	return nil, errors.New("not in this fake")
}
func (e *fakeInstances) InstanceStats() protocol.InstancesInfo {
	return protocol.InstancesInfo{Max: e.max}
}
func (e *fakeInstances) InstanceIdle() time.Duration { return time.Minute }
func (e *fakeInstances) ExtismFunctions() []string   { return []string{"alloc"} }

type fakeInstance struct {
	e  *fakeInstances
	id string

	mu      sync.Mutex
	busy    bool
	waiting []*fakeTurn
	count   int
	closed  string
}

var fakePluginModule = &protocol.ModuleInfo{ID: "sha256:fake", Imports: []protocol.Import{{Module: protocol.ExtismEnvModule, Name: "alloc", Kind: "func"}},
	Exports: []protocol.Export{{Name: "count", Kind: "func", Params: []string{}, Results: []string{"i32"}},
		{Name: "fail", Kind: "func", Params: []string{}, Results: []string{"i32"}},
		{Name: "trap", Kind: "func", Params: []string{}, Results: []string{"i32"}}}}

func (in *fakeInstance) ID() string                   { return in.id }
func (in *fakeInstance) Module() *protocol.ModuleInfo { return fakePluginModule }
func (in *fakeInstance) Limits() limits.Limits        { return limits.Defaults() }
func (in *fakeInstance) Release()                     { in.shut("released") }

func (in *fakeInstance) shut(reason string) {
	in.mu.Lock()
	if in.closed == "" {
		in.closed = reason
		for _, t := range in.waiting {
			close(t.ready)
		}
		in.waiting = nil
	}
	in.mu.Unlock()
	in.e.close(in, reason)
}

func (in *fakeInstance) Enqueue() rpc.Turn {
	in.mu.Lock()
	defer in.mu.Unlock()
	t := &fakeTurn{in: in, ready: make(chan struct{})}
	if !in.busy || in.closed != "" {
		in.busy = in.closed == ""
		close(t.ready)
	} else {
		in.waiting = append(in.waiting, t)
	}
	return t
}

func (in *fakeInstance) handOn() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.waiting) > 0 {
		close(in.waiting[0].ready)
		in.waiting = in.waiting[1:]
		return
	}
	in.busy = false
}

type fakeTurn struct {
	in    *fakeInstance
	ready chan struct{}
	done  bool
}

func (t *fakeTurn) Ready() <-chan struct{} { return t.ready }

func (t *fakeTurn) Abandon() {
	if t.done {
		return
	}
	t.done = true
	in := t.in
	in.mu.Lock()
	for i, w := range in.waiting {
		if w == t {
			in.waiting = append(in.waiting[:i], in.waiting[i+1:]...)
			in.mu.Unlock()
			return
		}
	}
	closed := in.closed != ""
	in.mu.Unlock()
	if !closed {
		in.handOn()
	}
}

func (t *fakeTurn) Call(ctx context.Context, call protocol.Call) (*protocol.CallOutcome, error) {
	select {
	case <-t.ready:
	default:
		return nil, errors.New("fake: a worker called a turn that was not ready")
	}
	t.done = true
	in := t.in
	in.mu.Lock()
	closed := in.closed
	in.mu.Unlock()
	if closed != "" {
		return nil, &protocol.InstanceClosedError{Instance: in.id, Reason: closed}
	}
	defer in.handOn()
	switch call.Function {
	case "count":
		in.count++
		return &protocol.CallOutcome{Plugin: true, PluginOutput: []byte(strconv.Itoa(in.count)),
			RunOutcome: protocol.RunOutcome{Values: []protocol.Value{protocol.ValueI32(0)}}}, nil
	case "fail":
		msg, rc, fn := "failed: "+string(call.Input), int32(1), call.Function
		return nil, &protocol.Error{Kind: protocol.KindPluginError, Message: msg,
			Data: protocol.ErrorData{Message: &msg, ReturnCode: &rc, Function: &fn}}
	default:
		in.shut(fmt.Sprintf("closed after trap in a call of %q", call.Function))
		return nil, &protocol.Error{Kind: protocol.KindTrap, Message: "unreachable", Data: protocol.ErrorData{InstanceClosed: true}}
	}
}

func serveInstances(t *testing.T, max int) *Client {
	t.Helper()
	eng := &fakeInstances{fakeEngine: newFakeEngine(), max: max, live: map[string]*fakeInstance{}, gone: map[string]string{}}
	srv, err := rpc.NewServer(eng, rpc.Options{MaxConcurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- srv.Serve(context.Background(), inR, outW)
		outW.Close()
	}()
	c := New(context.Background(), outR, inW, false)
	t.Cleanup(func() {
		_ = c.Close()
		inW.Close()
		select {
		case <-served:
		case <-time.After(5 * time.Second):
			t.Errorf("server did not stop")
		}
	})
	return c
}

// TestInstanceClient: Instantiate, Call and Release, and the instance
// errors as their types (each unwrapping to the response's *Error).
func TestInstanceClient(t *testing.T) {
	c := serveInstances(t, 1)
	ctx := context.Background()
	in, err := c.Instantiate(ctx, InstantiateParams{Module: mod})
	if err != nil || in.ID != "inst-fake-1" || !in.Result.Plugin {
		t.Fatalf("instantiate: %+v, %v", in, err)
	}
	_, err = c.Instantiate(ctx, InstantiateParams{Module: mod})
	var tm *TooManyInstancesError
	var e *Error
	if !errors.As(err, &tm) || tm.Instances != 1 || tm.MaxInstances != 1 || !errors.As(err, &e) || e.Code != protocol.CodeTooManyInstances {
		t.Fatalf("second instantiate: %T %v", err, err)
	}

	// Concurrent calls to one instance run one at a time, each on a turn
	// that is ready (the fake refuses any other).
	var wg sync.WaitGroup
	outs := make([]string, 20)
	for i := range outs {
		wg.Go(func() {
			res, err := in.Call(ctx, "count", CallOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			outs[i] = string(*res.Output)
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, o := range outs {
		seen[o] = true
	}
	if len(seen) != 20 {
		t.Fatalf("outputs %q: two calls ran at once or one was lost", outs)
	}

	_, err = in.Call(ctx, "fail", CallOptions{Input: []byte("x")})
	var pe *PluginError
	if !errors.As(err, &pe) || pe.Message != "failed: x" || pe.ReturnCode != 1 || pe.Function != "fail" || InstanceClosed(err) {
		t.Fatalf("fail: %T %v", err, err)
	}
	_, err = in.Call(ctx, "trap", CallOptions{})
	if !InstanceClosed(err) || !errors.As(err, &e) || e.Kind() != "trap" {
		t.Fatalf("trap: %v", err)
	}
	_, err = in.Call(ctx, "count", CallOptions{})
	var ce *InstanceClosedError
	if !errors.As(err, &ce) || ce.Instance != in.ID || ce.Reason != `closed after trap in a call of "trap"` || !errors.Is(err, ErrInstanceClosed) {
		t.Fatalf("after trap: %T %v", err, err)
	}
	if err := in.Release(ctx); err != nil {
		t.Fatalf("release of a closed instance: %v", err)
	}
}
