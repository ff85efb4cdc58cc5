package main

import (
	"context"
	"errors"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/snippet"
)

// The instance half of sidecarEngine: rpc.InstanceEngine over the
// engine's long-lived instances (sandbox/instance.go). Here the engine's
// instance errors become the protocol's (-32001, -32002), a plugin's own
// error gets its message and return code in the wire data, and a failed
// call says whether it closed its instance.

var _ rpc.InstanceEngine = sidecarEngine{}

func (e sidecarEngine) Instantiate(ctx context.Context, mod rpc.Module, req protocol.InstanceRequest) (rpc.Instance, protocol.InstanceInfo, error) {
	cm := mod.(*compiledModule)
	in, err := e.eng.Instantiate(ctx, e.instanceRequest(cm, req))
	if err != nil {
		return nil, protocol.InstanceInfo{}, e.instanceError(err, "")
	}
	boot := in.Instantiation()
	info := protocol.InstanceInfo{ID: in.ID(), Plugin: in.IsPlugin(),
		Usage:   protocol.Usage{FuelConsumed: boot.FuelConsumed, PeakMemoryBytes: boot.PeakMemoryBytes},
		Elapsed: boot.Elapsed, LogLines: boot.LogLines, LogTruncated: boot.LogTruncated,
		LogDropped: boot.LogDropped}
	return &sidecarInstance{e: e, in: in, info: &cm.info}, info, nil
}

func (e sidecarEngine) instanceRequest(cm *compiledModule, req protocol.InstanceRequest) sandbox.InstanceRequest {
	return sandbox.InstanceRequest{Module: cm.mod, Capabilities: sandboxCaps(req.Capabilities), Limits: req.Limits,
		Config: req.Config, VarBytes: req.VarBytes, Log: levelled(req.Log), Output: req.Output,
		HostFunctions: req.HostFunctions, Host: req.Host}
}

func levelled(f func(level, line string)) func(sandbox.LogLevel, string) {
	if f == nil {
		return nil
	}
	return func(level sandbox.LogLevel, line string) { f(string(level), line) }
}

func (e sidecarEngine) LookupInstance(id string) (rpc.Instance, error) {
	in, err := e.eng.LookupInstance(id)
	if err != nil {
		return nil, e.instanceError(err, "")
	}
	return &sidecarInstance{e: e, in: in, info: moduleInfo(in.Module()), session: e.sessionOf(in)}, nil
}

func (e sidecarEngine) CallOnce(ctx context.Context, mod rpc.Module, req protocol.InstanceRequest, call protocol.Call) (*protocol.CallOutcome, error) {
	cm := mod.(*compiledModule)
	res, err := e.eng.CallOnce(ctx, e.instanceRequest(cm, req), sandboxCall(call))
	if err != nil {
		return nil, e.instanceError(err, "")
	}
	return callOutcome(&cm.info, call.Function, res), nil
}

func (e sidecarEngine) InstanceStats() protocol.InstancesInfo {
	s := e.eng.InstanceStats()
	return protocol.InstancesInfo{Live: s.Live, Max: s.Max, Created: s.Created, Evicted: s.Evicted}
}

func (e sidecarEngine) InstanceIdle() time.Duration { return e.idle }

func (e sidecarEngine) ExtismFunctions() []string { return sandbox.ExtismFunctions() }

// instanceError converts what the engine's instance methods return. id,
// if set, is the instance a failed call ran on: the error then says
// whether the call closed it.
func (e sidecarEngine) instanceError(err error, id string) error {
	var ce *sandbox.InstanceClosedError
	if errors.As(err, &ce) {
		return &protocol.InstanceClosedError{Instance: ce.Instance, Reason: ce.Reason}
	}
	if errors.Is(err, sandbox.ErrTooManyInstances) {
		// Every slot was taken (live == max), or the instances' share of
		// the engine's pool had no room for this one (live < max).
		st := e.eng.InstanceStats()
		out := &protocol.TooManyInstancesError{Live: st.Max, Max: st.Max}
		var se *sandbox.Error
		if errors.Is(err, sandbox.ErrInstancePoolShort) && errors.As(err, &se) {
			out.Live, out.Reason = st.Live, se.Message
		}
		return out
	}
	var ge *sandbox.GrantError
	if errors.As(err, &ge) { // a grant the engine refuses is a params problem
		return &rpc.ParamError{Field: ge.Field, Problem: ge.Problem}
	}
	var se *sandbox.Error
	if !errors.As(err, &se) {
		return err
	}
	out := se.Outcome()
	if se.Kind == sandbox.KindPluginError {
		msg, rc := se.Message, se.ReturnCode
		out.Data.Message, out.Data.ReturnCode = &msg, &rc
	}
	if id != "" {
		if _, lerr := e.eng.LookupInstance(id); lerr != nil {
			out.Data.InstanceClosed = true
		}
	}
	return out
}

func sandboxCall(c protocol.Call) sandbox.CallRequest {
	return sandbox.CallRequest{Function: c.Function, Args: c.Args, Input: c.Input,
		Limits: sandbox.CallLimits{Fuel: c.Limits.Fuel, Timeout: c.Limits.Timeout, LogBytes: c.Limits.LogBytes, OutputBytes: c.Limits.OutputBytes},
		Log:    levelled(c.Log), Output: c.Output, Host: c.Host}
}

func callOutcome(info *protocol.ModuleInfo, fn string, res *sandbox.CallResult) *protocol.CallOutcome {
	out := &protocol.CallOutcome{
		RunOutcome: protocol.RunOutcome{Values: res.Values,
			Usage:   protocol.Usage{FuelConsumed: res.FuelConsumed, PeakMemoryBytes: res.PeakMemoryBytes},
			Elapsed: res.Elapsed, LogLines: res.LogLines, LogTruncated: res.LogTruncated, LogDropped: res.LogDropped, ExitCode: res.ExitCode},
		Plugin:       info.IsPluginFunction(fn),
		PluginOutput: res.PluginOutput, PluginOutputTruncated: res.PluginOutputTruncated,
		Queued: res.Queued,
	}
	if res.Output != nil {
		out.Output = &protocol.Output{Stdout: res.Output.Stdout, Stderr: res.Output.Stderr, Truncated: res.Output.Truncated}
	}
	return out
}

func moduleInfo(mod *sandbox.Module) *protocol.ModuleInfo {
	return &protocol.ModuleInfo{ID: mod.ID, Imports: mod.Imports, Exports: mod.Exports}
}

// sidecarInstance is a *sandbox.Instance as the server sees it.
type sidecarInstance struct {
	e       sidecarEngine
	in      *sandbox.Instance
	info    *protocol.ModuleInfo
	session *snippet.Session // a session's (engine_eval.go), else nil
}

func (i *sidecarInstance) ID() string                   { return i.in.ID() }
func (i *sidecarInstance) Module() *protocol.ModuleInfo { return i.info }
func (i *sidecarInstance) Limits() limits.Limits        { return i.in.Limits() }

// HostFunctions makes the instance an rpc hostDeclarer: its calls' host
// calls are read by the declarations it was made with.
func (i *sidecarInstance) HostFunctions() []protocol.HostFunction { return i.in.HostFunctions() }
func (i *sidecarInstance) Release()                               { i.in.Release() }
func (i *sidecarInstance) Enqueue() rpc.Turn                      { return &sidecarTurn{i: i, t: i.in.Enqueue()} }

type sidecarTurn struct {
	i *sidecarInstance
	t *sandbox.Turn
}

func (t *sidecarTurn) Ready() <-chan struct{} { return t.t.Ready() }
func (t *sidecarTurn) Abandon()               { t.t.Abandon() }

func (t *sidecarTurn) Call(ctx context.Context, call protocol.Call) (*protocol.CallOutcome, error) {
	res, err := t.t.Call(ctx, sandboxCall(call))
	if err != nil {
		return nil, t.i.e.instanceError(err, t.i.in.ID())
	}
	return callOutcome(t.i.info, call.Function, res), nil
}
