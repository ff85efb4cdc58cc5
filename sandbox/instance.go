package sandbox

// Long-lived instances. A one-shot Run opens a store, runs one export and
// closes it; an Instance keeps its store (store.go) between calls, so a module's
// globals, memory and (for plugins) vars survive from one call to the
// next. The fences are the same three, arranged for a long life:
//
//   - the memory cap (and every other store-shaped limit) holds for the
//     instance's whole life: memory never shrinks, so what one call grew
//     the next call still pays for;
//   - fuel, the deadline and cancellation are per call: each call sets its
//     own fuel and re-arms the store's fence (capi.go) with its own
//     deadline; the ticker runs only while a call runs;
//   - a call that ends in a trap or a fence closes the instance, because
//     its state stopped at an arbitrary instruction and can no longer be
//     trusted. Later calls get an *InstanceClosedError saying why.
//
// Calls to one instance run one at a time, in the order they reached Call
// (or Enqueue); calls to different instances share nothing and run
// concurrently.

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// Instance is a module instantiated once and called many times. Its
// methods are safe for concurrent use.
type Instance struct {
	id     string
	e      *Engine
	module *Module
	limits limits.Limits
	s      *store // touched only by the turn's holder
	boot   Result // what instantiation (start function, _initialize) consumed
	// oneShot: made by CallOnce for one call, like a run. It takes no slot
	// of MaxInstances, is not counted in InstanceStats and cannot be
	// looked up.
	oneShot bool
	// hostFunctions are the imports its caller serves, for its life.
	hostFunctions []HostFunction
	freed         chan struct{} // closed once the store has been freed
	idle          *time.Timer   // evicts the instance when it fires

	mu    sync.Mutex
	state instanceState // changed only through update
}

// instanceState is what the turns, Release and the idle timer share.
type instanceState struct {
	busy     bool    // a turn is held
	waiting  []*Turn // turns in arrival order, each told its verdict once
	closed   *InstanceClosedError
	stop     func() // stops the call in progress, if any
	freed    bool   // the store has been freed
	lastCall time.Time
}

// update changes the instance's state under its lock, then does what the
// new state calls for: a closed instance fails every waiting turn, stops
// its running call and, once no turn holds the store, frees it; an open
// one whose turn is free hands it to the first waiting call.
func (in *Instance) update(change func(*instanceState)) {
	in.mu.Lock()
	defer in.mu.Unlock()
	st := &in.state
	wasClosed := st.closed != nil
	change(st)
	switch {
	case st.closed != nil:
		if !wasClosed {
			if in.idle != nil {
				in.idle.Stop()
			}
			for _, w := range st.waiting {
				w.grant(false)
			}
			st.waiting = nil
			if st.stop != nil {
				st.stop()
			}
		}
		if !st.busy && !st.freed {
			st.freed = true
			in.s.close()
			close(in.freed)
		}
	case !st.busy && len(st.waiting) > 0:
		next := st.waiting[0]
		st.waiting = st.waiting[1:]
		st.busy = true
		next.grant(true)
	}
}

// running is the store's callSpec.running: the call in progress can be
// stopped by a close (and is at once if the instance closed before it
// began).
func (in *Instance) running(stop func()) {
	in.update(func(st *instanceState) {
		st.stop = stop
		if stop != nil && st.closed != nil {
			stop()
		}
	})
}

// release gives the turn back: to the next waiting call, or, when the
// instance closed meanwhile, the store is freed.
func (in *Instance) release() {
	in.update(func(st *instanceState) {
		st.busy, st.stop = false, nil
		if st.closed == nil {
			st.lastCall = time.Now() // the idle timer, never stopped by a call, sees it
		}
	})
}

func (in *Instance) closedErr() (err error) {
	in.update(func(st *instanceState) {
		if st.closed != nil {
			err = st.closed
		}
	})
	return err
}

// close closes the instance for reason: waiting calls fail, the running
// call, if any, is stopped through its fence and frees the store when it
// ends; otherwise the store is freed now. The table forgets the
// instance, remembering why. Idempotent: the first reason stays.
func (in *Instance) close(reason string, evicted bool) {
	first := false
	in.update(func(st *instanceState) {
		if st.closed == nil {
			st.closed, first = &InstanceClosedError{Instance: in.id, Reason: reason}, true
		}
	})
	if first && !in.oneShot {
		in.e.instances.remove(in.id, reason, evicted)
	}
}

// Release closes the instance: queued calls fail with "released", a call
// in progress is cancelled, and the store is freed once nothing runs.
// Idempotent.
func (in *Instance) Release() { in.close("released", false) }

// Close is Release with the reason later calls are given: for a caller
// that found the guest's state broken where the engine cannot see it (a
// snippet runtime whose interpreter cannot go on). The first reason
// stays.
func (in *Instance) Close(reason string) { in.close(reason, false) }

// evict is the idle timer's. Calls neither stop nor re-arm the timer (a
// timer armed anew at every call made the Go runtime wake an idle thread
// per call to watch it); it fires at most once per idle period, and
// re-arms itself for the rest of the period when a call ran meanwhile.
func (in *Instance) evict() {
	period := in.e.instances.idle
	var reason string
	in.update(func(st *instanceState) {
		switch left := period - time.Since(st.lastCall); {
		case st.closed != nil:
		case st.busy: // a call's end sets lastCall: look again one period later
			in.idle.Reset(period)
		case left > 0:
			in.idle.Reset(left)
		default:
			reason = fmt.Sprintf("evicted after %v without a call", time.Since(st.lastCall).Round(time.Millisecond))
		}
	})
	if reason != "" {
		in.close(reason, true)
	}
}

// ID is the instance's name: "inst-" + a random part chosen once per
// engine + "-" + a counter, so it is unique within the engine's life and
// not reused by a later process (a parent holding an id across a sidecar
// restart gets "no such instance", not somebody else's instance).
func (in *Instance) ID() string { return in.id }

// Module is the module the instance runs.
func (in *Instance) Module() *Module { return in.module }

// IsPlugin says whether the module imports the Extism ABI.
func (in *Instance) IsPlugin() bool { return in.s.plugin != nil }

// Instantiation is what instantiation consumed: fuel, memory, elapsed time and
// log lines of the start function and _initialize.
func (in *Instance) Instantiation() Result { return in.boot }

// Limits are the instance's limits (the per-call defaults among them).
func (in *Instance) Limits() limits.Limits { return in.limits }

// HostFunctions are the imports the instance's caller serves
// (InstanceRequest.HostFunctions); each call's CallRequest.Host answers them.
func (in *Instance) HostFunctions() []HostFunction { return in.hostFunctions }

// Instantiate creates a long-lived instance of req.Module: the same checks
// as Run (imports, static caps), a store of its own, then the start
// function and _initialize, fenced by req.Limits like a call. A failure
// here leaves no instance behind.
func (e *Engine) Instantiate(ctx context.Context, req InstanceRequest) (*Instance, error) {
	return e.instantiate(ctx, req, false)
}

// InstantiateUnlisted makes an instance for its caller alone, as CallOnce
// does for its one call: it takes no slot of MaxInstances, is neither
// counted nor found by LookupInstance, is never evicted for being idle,
// and its store comes from the runs' share of the pool (a long-lived
// instance's from the instances'), as a run's does. The caller calls it
// when it needs it and must Release it. It is for a run prepared ahead
// of its request: a spare interpreter, started before the snippet that
// will use it arrives (snippet).
func (e *Engine) InstantiateUnlisted(ctx context.Context, req InstanceRequest) (*Instance, error) {
	return e.instantiate(ctx, req, true)
}

func (e *Engine) instantiate(ctx context.Context, req InstanceRequest, oneShot bool) (*Instance, error) {
	if err := e.checkModule(req.Module); err != nil {
		return nil, err
	}
	if err := req.Limits.Validate(limits.HardMaximums()); err != nil {
		return nil, &Error{Kind: KindHost, Message: "limits." + err.Error(), err: err}
	}
	if req.VarBytes == 0 {
		req.VarBytes = DefaultVarBytes
	}
	if req.VarBytes > MaxVarBytes {
		return nil, newError(KindHost, "limits.varBytes: must be <= %d", MaxVarBytes)
	}
	if ctx.Err() != nil {
		return nil, cancelledError()
	}
	if err := protocol.CheckHostFunctions(req.HostFunctions); err != nil {
		return nil, err
	}
	spec := storeSpec{module: req.Module, caps: req.Capabilities, limits: req.Limits, longLived: !oneShot, hostFunctions: req.HostFunctions}
	if isPlugin(req.Module) {
		spec.plugin = &pluginConfig{config: maps.Clone(req.Config), varBytes: req.VarBytes, logGranted: req.Capabilities.Log}
	}
	if err := spec.checkImports(); err != nil {
		return nil, err
	}
	if err := spec.checkCaps(); err != nil {
		return nil, err
	}
	var id string
	var err error
	if oneShot {
		id, err = e.instances.name()
	} else {
		id, err = e.instances.reserve()
	}
	if err != nil {
		return nil, err
	}
	in := &Instance{id: id, e: e, module: req.Module, limits: req.Limits, oneShot: oneShot,
		hostFunctions: slices.Clone(req.HostFunctions), freed: make(chan struct{})}
	if err := in.start(ctx, spec, req); err != nil {
		if !oneShot {
			e.instances.remove(id, "", false)
		}
		return nil, err
	}
	// The table knows the instance before its idle timer runs: an eviction
	// before add took the reserved slot out and add then put the closed
	// instance back, live for ever. The timer is set under in.mu, which
	// evict takes first.
	if oneShot { // its caller holds it, and releases it
		return in, nil
	}
	e.instances.add(in)
	in.update(func(st *instanceState) {
		st.lastCall = time.Now()
		in.idle = time.AfterFunc(e.instances.idle, in.evict)
	})
	return in, nil
}

// start opens the store and runs the instantiation (the start function
// and _initialize) as its first call. On error the store is closed.
func (in *Instance) start(ctx context.Context, spec storeSpec, req InstanceRequest) error {
	s, err := in.e.openStore(ctx, spec)
	if err != nil {
		return err
	}
	in.s = s
	l, err := in.callLimits(req.Start)
	if err != nil {
		s.close()
		return err
	}
	o := s.call(ctx, callSpec{limits: l, log: req.Log, output: req.Output, host: req.Host, running: in.running},
		func() ([]Value, error) { return nil, s.instantiate(true) })
	if o.err != nil {
		s.close()
		return o.err
	}
	in.boot = *o.res
	return nil
}

// CallOnce instantiates req, makes one call and releases the instance: a
// plugin function (or any export) without a long-lived instance, the
// one-shot path for a run with input.
func (e *Engine) CallOnce(ctx context.Context, req InstanceRequest, call CallRequest) (*CallResult, error) {
	in, err := e.instantiate(ctx, req, true)
	if err != nil {
		return nil, err
	}
	defer in.s.freeAfterAnswer(ctx, in.Release) // no call runs: CallOnce's has returned
	return in.Call(ctx, call)
}

// Call runs one call, after every call that reached Call before it. A
// trap or fence (fuel, timeout, memory, cancellation) closes the instance;
// a plugin error (plugin_error) does not.
func (in *Instance) Call(ctx context.Context, req CallRequest) (*CallResult, error) {
	return in.Enqueue().Call(ctx, req)
}

// call runs req while holding the turn.
func (in *Instance) call(ctx context.Context, req CallRequest) (*CallResult, error) {
	m, plugin := in.module, in.s.plugin
	if req.Function == "" {
		return nil, &Error{Kind: KindExport, Message: "no function named; the module exports " + funcNames(m)}
	}
	pluginFn := plugin != nil && isPluginFunction(m, req.Function)
	if err := checkSignature(m, req.Function, req.Args); err != nil {
		return nil, err
	}
	if req.Input != nil && !pluginFn {
		what := "the module is not an Extism plugin"
		if plugin != nil {
			what = protocol.PluginFunctionShape
		}
		return nil, &Error{Kind: KindExport, Function: req.Function,
			Message: fmt.Sprintf("input: %s is not a plugin function (%s)", protocol.Quote(req.Function), what)}
	}
	l, err := in.callLimits(req.Limits)
	if err != nil {
		return nil, err
	}
	// An input larger than the whole memory cap can never be held: refuse
	// it before the kernel is touched, so the instance, whose state this
	// call never reached, stays open.
	if n := uint64(len(req.Input)); pluginFn && n > in.limits.MemoryBytes {
		return nil, &Error{Kind: KindMemoryLimitExceeded, Resource: ResourceMemory, Limit: in.limits.MemoryBytes, Requested: n,
			Message: fmt.Sprintf("the input of %d bytes exceeds the plugin's memory cap of %d bytes", n, in.limits.MemoryBytes)}
	}
	spec := callSpec{limits: l, log: req.Log, output: req.Output, host: req.Host, running: in.running}
	var pc *pluginCall
	body := func() ([]Value, error) {
		exp, _ := m.Export(req.Function)
		return callFunction(in.s.wt, in.s.instance, req.Function, req.Args, exp.Results)
	}
	if pluginFn {
		pc = &pluginCall{p: plugin, function: req.Function, input: req.Input, outputBytes: cmp.Or(req.Limits.PluginOutputBytes, l.OutputBytes)}
		body = pc.run // extism.go: the return code, the output, proc_exit
	}
	o := in.s.call(ctx, spec, body)
	if reason := closeReason(o, "a call of "+protocol.Quote(req.Function), pc); reason != "" {
		in.close(reason, false)
	}
	if o.err != nil {
		return nil, o.err
	}
	res := &CallResult{Result: *o.res}
	if pc != nil {
		res.PluginOutput, res.PluginOutputTruncated = pc.output, pc.truncated
	}
	return res, nil
}

// closeReason says why a call that ended as o closes its instance, or ""
// when the instance stays: a trap or a fence (its state stopped at an
// arbitrary instruction), an exit (the guest ended itself), or a plugin's
// _start that ran (pc.closes).
func closeReason(o outcome, what string, pc *pluginCall) string {
	switch {
	case o.fatal:
		return fmt.Sprintf("closed after %s in %s", KindOf(o.err), what)
	case o.exited:
		return fmt.Sprintf("closed after the guest exited with status %d in %s", o.res.ExitCode, what)
	case pc != nil && pc.exit != nil:
		return fmt.Sprintf("closed after the guest exited with status %d in %s", pc.exit.code, what)
	case pc != nil && pc.function == StartExport && (o.err == nil || KindOf(o.err) == KindPluginError):
		// A WASI command's main runs once: after it the runtime may have
		// run its destructors (wasi-libc) or refuse to start again (Go),
		// so the instance is done, as Extism's runtime treats it (it
		// starts the next call on a fresh instance).
		return fmt.Sprintf("closed after %q ran (a WASI command's main runs once per instance; instantiate again to run it again)", StartExport)
	}
	return ""
}

// callLimits are the limits of a call: the instance's, with what the call
// sets instead, each within the hard maximums.
func (in *Instance) callLimits(cl CallLimits) (limits.Limits, error) {
	l := in.limits
	if cl.Fuel != 0 {
		l.Fuel = cl.Fuel
	}
	if cl.Timeout != 0 {
		l.Timeout = cl.Timeout
	}
	if cl.LogBytes != 0 {
		l.LogBytes = cl.LogBytes
	}
	if cl.OutputBytes != 0 {
		l.OutputBytes = cl.OutputBytes
	}
	if err := l.Validate(limits.HardMaximums()); err != nil {
		return l, &Error{Kind: KindHost, Message: "limits." + err.Error(), err: err}
	}
	return l, nil
}
