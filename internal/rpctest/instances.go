package rpctest

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

// Instances adds instances (rpc.InstanceEngine) to Engine: each is a
// plugin with a counter. By function, "count" adds one and outputs the
// count, "fail" is a plugin error naming its input, "host:N" makes N
// host calls (host.go; a failed one closes the instance), anything else
// traps and closes the instance. An instance whose config has "start"
// set to "host:N" makes them while it is instantiated. At most Max live at once. A call's turn works
// as the engine's: one call at a time per instance, in the order taken,
// and Call refuses a turn that is not ready.
type Instances struct {
	*Engine
	Max int

	mu   sync.Mutex
	next int
	live map[string]*instance
	gone map[string]string // closed instances and why
}

// NewInstances returns an instance engine of at most max live instances.
func NewInstances(max int) *Instances {
	return &Instances{Engine: NewEngine(), Max: max, live: map[string]*instance{}, gone: map[string]string{}}
}

// PluginModule is the module of every instance.
var PluginModule = &protocol.ModuleInfo{ID: ModuleID, Imports: []protocol.Import{{Module: protocol.ExtismEnvModule, Name: "alloc", Kind: "func"}},
	Exports: []protocol.Export{{Name: "count", Kind: "func", Params: []string{}, Results: []string{"i32"}},
		{Name: "fail", Kind: "func", Params: []string{}, Results: []string{"i32"}},
		{Name: "trap", Kind: "func", Params: []string{}, Results: []string{"i32"}}}}

func (e *Instances) Instantiate(ctx context.Context, _ rpc.Module, req protocol.InstanceRequest) (rpc.Instance, protocol.InstanceInfo, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.live) >= e.Max {
		return nil, protocol.InstanceInfo{}, &protocol.TooManyInstancesError{Live: len(e.live), Max: e.Max}
	}
	e.next++
	in := &instance{e: e, id: "inst-fake-" + strconv.Itoa(e.next), fns: req.HostFunctions}
	if n, ok := hostCalls(req.Config["start"]); ok { // the start function's host calls
		if _, err := callHost(ctx, n, req.HostFunctions, req.Host, req.Limits.Timeout, nil); err != nil {
			e.next--
			return nil, protocol.InstanceInfo{}, err
		}
	}
	e.live[in.id] = in
	return in, protocol.InstanceInfo{ID: in.id, Plugin: true}, nil
}

func (e *Instances) LookupInstance(id string) (rpc.Instance, error) {
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

func (e *Instances) close(in *instance, reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.live, in.id)
	e.gone[in.id] = reason
}

func (e *Instances) CallOnce(context.Context, rpc.Module, protocol.InstanceRequest, protocol.Call) (*protocol.CallOutcome, error) {
	return nil, errors.New("not in this fake")
}

func (e *Instances) InstanceStats() protocol.InstancesInfo {
	return protocol.InstancesInfo{Max: e.Max}
}

func (e *Instances) InstanceIdle() time.Duration { return time.Minute }
func (e *Instances) ExtismFunctions() []string   { return []string{"alloc"} }

type instance struct {
	e   *Instances
	id  string
	fns []protocol.HostFunction

	mu      sync.Mutex
	busy    bool
	waiting []*turn
	count   int
	closed  string
}

func (in *instance) ID() string                   { return in.id }
func (in *instance) Module() *protocol.ModuleInfo { return PluginModule }
func (in *instance) Limits() limits.Limits        { return limits.Defaults() }
func (in *instance) Release()                     { in.shut("released") }

// HostFunctions are the instance's declarations (rpc's hostDeclarer).
func (in *instance) HostFunctions() []protocol.HostFunction { return in.fns }

func (in *instance) shut(reason string) {
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

func (in *instance) Enqueue() rpc.Turn {
	in.mu.Lock()
	defer in.mu.Unlock()
	t := &turn{in: in, ready: make(chan struct{})}
	if !in.busy || in.closed != "" {
		in.busy = in.closed == ""
		close(t.ready)
	} else {
		in.waiting = append(in.waiting, t)
	}
	return t
}

func (in *instance) handOn() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.waiting) > 0 {
		close(in.waiting[0].ready)
		in.waiting = in.waiting[1:]
		return
	}
	in.busy = false
}

type turn struct {
	in    *instance
	ready chan struct{}
	done  bool
}

func (t *turn) Ready() <-chan struct{} { return t.ready }

func (t *turn) Abandon() {
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

func (t *turn) Call(ctx context.Context, call protocol.Call) (*protocol.CallOutcome, error) {
	select {
	case <-t.ready:
	default:
		return nil, errors.New("fake: a call ran on a turn that was not ready")
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
		if n, ok := hostCalls(call.Function); ok {
			timeout := call.Limits.Timeout
			if timeout == 0 {
				timeout = in.Limits().Timeout
			}
			log := func(line string) { call.Log("", line) }
			vals, err := callHost(ctx, n, in.fns, call.Host, timeout, log)
			if err != nil {
				in.shut("closed after a failed host call in a call of " + protocol.Quote(call.Function))
				return nil, err
			}
			return &protocol.CallOutcome{RunOutcome: protocol.RunOutcome{Values: vals}}, nil
		}
		in.shut("closed after trap in a call of " + protocol.Quote(call.Function))
		return nil, &protocol.Error{Kind: protocol.KindTrap, Message: "unreachable", Data: protocol.ErrorData{InstanceClosed: true}}
	}
}
