package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// Long-lived instances (instantiate, call, release) and plugin runs.
//
// An instantiate is a job like a run: decoded and compiled in its prepare
// goroutine, then queued for a run slot; it runs the start function and
// _initialize. A call is a job too, but its order is fixed on the
// dispatcher: there, in read order, it looks up its instance and takes
// the next turn in the instance's line (InstanceEngine's Turn). Its
// prepare goroutine decodes the params, then waits for the turn to come
// (Turn.Ready) and only then puts the call in the run queue; so a call
// waiting behind its instance's earlier calls holds no run slot, and the
// slots hold at most one call per instance at a time. A release is
// answered on the dispatcher, also in read order: calls read before it
// and still waiting get -32001 (released); one already running is
// cancelled.

// InstanceEngine is implemented by an engine that keeps long-lived
// instances. Without it, instantiate, call and release are unknown
// methods and a plugin run is refused.
//
// Instantiate is called in a run slot, like Run. LookupInstance and
// Instance.Enqueue are called on the dispatcher and must not block;
// Instance.Release too, and it may free the instance's store. A call's
// Turn is used by one goroutine at a time: Ready may be waited on, then
// Call runs in a run slot (at once, the turn being ready), or Abandon gives
// the turn back. Errors about an instance that is closed or unknown are
// *protocol.InstanceClosedError; a refusal for too many instances is
// *protocol.TooManyInstancesError.
type InstanceEngine interface {
	Instantiate(ctx context.Context, mod Module, req protocol.InstanceRequest) (Instance, protocol.InstanceInfo, error)
	LookupInstance(id string) (Instance, error)
	// CallOnce instantiates, calls and releases: a plugin `run`.
	CallOnce(ctx context.Context, mod Module, req protocol.InstanceRequest, call protocol.Call) (*protocol.CallOutcome, error)
	InstanceStats() protocol.InstancesInfo
	// InstanceIdle is how long an instance may go without a call.
	InstanceIdle() time.Duration
	// ExtismFunctions lists the extism:host/env functions served.
	ExtismFunctions() []string
}

// hostDeclarer is implemented by an Instance made with host functions
// (InstanceRequest.HostFunctions): its calls' host calls are read by
// those declarations.
type hostDeclarer interface {
	HostFunctions() []protocol.HostFunction
}

// Instance is one long-lived instance as the server sees it.
type Instance interface {
	ID() string
	Module() *protocol.ModuleInfo
	Limits() limits.Limits // the instance's, the per-call defaults among them
	Enqueue() Turn
	Release()
}

// Turn is a call's place in its instance's line.
type Turn interface {
	// Ready is closed once Call would not wait: the instance's earlier
	// calls are done, or it closed (Call then fails at once).
	Ready() <-chan struct{}
	Call(ctx context.Context, call protocol.Call) (*protocol.CallOutcome, error)
	// Abandon gives the turn back unused; after Call it does nothing.
	Abandon()
}

func (s *Server) instances() (InstanceEngine, bool) {
	ie, ok := s.eng.(InstanceEngine)
	return ie, ok
}

// dispatchInstance handles instantiate, call and release on the
// dispatcher.
func (s *Server) dispatchInstance(req request) {
	ie, ok := s.instances()
	if !ok {
		s.reply(req.id, nil, protocolError(CodeMethodNotFound, "unknown method %s: this engine keeps no instances", protocol.Quote(req.method)))
		return
	}
	switch req.method {
	case protocol.MethodInstantiate:
		s.admit(req)
	case protocol.MethodRelease:
		id, err := decodeRelease(req.params)
		if err != nil {
			s.reply(req.id, nil, ErrorObject(err))
			return
		}
		if in, err := ie.LookupInstance(id); err == nil {
			in.Release()
		}
		s.reply(req.id, nil, nil) // idempotent: closed, evicted and unknown instances too
	case protocol.MethodCall:
		j := s.admitJob(req)
		if j == nil {
			return // refused and answered
		}
		err := s.takeTurn(j)
		if j.size > inlineDecodeBytes {
			s.goJob(func() { s.prepareCall(j, err) })
			return
		}
		// A small call is decoded here, and queued at once if its turn has
		// come; only a call that must wait for its instance gets a goroutine.
		if s.prepareCallNow(j, err) {
			s.enqueueRun(j)
		}
	}
}

// takeTurn looks up an admitted call's instance and takes the call's
// place in the instance's line. It runs where the call was read, before
// anything behind it is handled: that is what orders an instance's calls.
// Other jobs have no turn to take. What goes wrong is answered later, by
// whoever prepares the call.
func (s *Server) takeTurn(j *job) error {
	if j.method == protocol.MethodEval {
		return s.takeEvalTurn(j) // session.go
	}
	ie, ok := s.instances()
	if !ok || j.method != protocol.MethodCall {
		return nil
	}
	obj, id, err := callParams(j.params)
	if err != nil {
		return err
	}
	j.callParams, j.params = obj, nil // read once, here
	var from string
	if v := obj.values[callHostCall]; v != nil {
		if from, err = decodeHostCall(v); err != nil {
			return err
		}
	}
	in, err := ie.LookupInstance(id)
	if err != nil {
		return err
	}
	if lang := sessionLanguage(in); lang != "" {
		return paramErr("instance", "%s is a %s session: use eval", protocol.Escape(in.ID()), lang)
	}
	if from != "" && s.hosts.waitsFor(from, in.ID()) {
		return &hostCycleError{instance: in.ID(), hostCall: from}
	}
	j.hostCall = from
	s.enterLine(j, in)
	return nil
}

// enterLine takes j's place in the line of in, on the dispatcher.
func (s *Server) enterLine(j *job, in Instance) {
	j.inst, j.turn = in, in.Enqueue()
	s.mu.Lock()
	s.inLine++
	j.inLine = true
	s.mu.Unlock()
}

// inlineCall says whether a request is a call or an eval the reader may run inline
// (runInline), as it does small runs.
func (s *Server) inlineCall(req request) bool {
	if req.method == protocol.MethodEval {
		_, ok := s.snippets()
		return ok
	}
	_, ok := s.instances()
	return ok && req.method == protocol.MethodCall
}

// prepareInline prepares a job the reader runs inline: a run, or a call
// or an eval whose turn takeTurn took (turnErr is what it returned).
func (s *Server) prepareInline(j *job, turnErr error) bool {
	switch j.method {
	case protocol.MethodCall:
		return s.prepareCallNow(j, turnErr)
	case protocol.MethodEval:
		return s.prepareEvalNow(j, turnErr) // eval.go
	}
	return s.prepareRun(j)
}

// prepareInstantiate decodes and compiles an instantiate, and queues it
// for a run slot.
func (s *Server) prepareInstantiate(j *job, raw json.RawMessage) {
	if sess, err := decodeSessionInstantiate(raw); sess != nil || err != nil {
		s.prepareSession(j, sess, err) // session.go
		return
	}
	spec, err := decodeInstantiate(raw, s.opts.Defaults, s.opts.Maximums, varLimits{s.opts.DefaultVarBytes, s.opts.MaxVarBytes})
	if err == nil {
		err = checkHostCallerID(j, spec.hostFunctions)
	}
	if err == nil && j.ctx.Err() != nil {
		err = cancelledError()
	}
	if err == nil {
		if g, ok := s.eng.(grantChecker); ok {
			err = g.CheckGrant(spec.source, spec.caps)
		}
	}
	var mod Module
	if err == nil {
		mod, _, err = s.eng.Compile(j.ctx, spec.source)
	}
	if err != nil {
		if countable(err) {
			s.count(string(protocol.KindOf(err)))
		}
		s.respond(j, nil, ErrorObject(s.explainCancel(err)))
		return
	}
	if spec.caps.WASI != nil && spec.caps.WASI.Argv0 == "" && spec.source.Path != "" {
		wasiDefaults(&runSpec{source: spec.source, caps: spec.caps}, mod.Info())
	}
	j.mod = mod
	j.exec = func(queued time.Duration) (any, error) { return s.execInstantiate(j, spec, queued) }
	s.enqueueRun(j)
}

func (s *Server) execInstantiate(j *job, spec *instantiateSpec, queued time.Duration) (any, error) {
	ie, _ := s.instances()
	logs := logWire{left: spec.limits.LogBytes}
	req := protocol.InstanceRequest{Capabilities: spec.caps, Limits: spec.limits, Config: spec.config, VarBytes: spec.varBytes,
		Log:           func(level, line string) { s.notifyLog(j.id, &logs, level, line) },
		HostFunctions: spec.hostFunctions}
	var output *outputWire
	if spec.caps.WASI != nil {
		output = s.newOutputWire(j.id, spec.limits.OutputBytes)
		req.Output = output.write
		defer output.flush()
	}
	// The instance's id is not known before Instantiate returns: its
	// start function's host calls carry the instantiate's request id only.
	req.Host = s.hostCaller(j, hostSite{fns: spec.hostFunctions, from: spec.hostCall, output: output})
	in, info, err := ie.Instantiate(j.ctx, j.mod, req)
	if err != nil {
		return nil, err
	}
	mi := in.Module()
	res := &protocol.InstantiateResult{Instance: info.ID, ModuleID: mi.ID, Plugin: mi.IsPlugin(), Exports: []protocol.ExportInfo{},
		FuelConsumed: info.FuelConsumed, PeakMemoryBytes: info.PeakMemoryBytes, ElapsedMicros: info.Elapsed.Microseconds(),
		QueuedMicros: queued.Microseconds(), LogLines: logs.sent, LogTruncated: info.LogTruncated || logs.dropped,
		LogDropped: info.LogDropped}
	for _, e := range mi.Exports {
		res.Exports = append(res.Exports, protocol.ExportInfo(e))
	}
	return res, nil
}

// prepareCall decodes a call whose turn the dispatcher took (or answers
// lookupErr), waits for the turn, and queues the call for a run slot.
func (s *Server) prepareCall(j *job, lookupErr error) {
	defer s.recoverJob(j)
	defer s.leaveLine(j) // if a panic skipped it
	if spec := s.decodeCallJob(j, lookupErr); spec != nil {
		s.awaitTurn(j, func(time.Duration) (any, error) { return s.execCall(j, spec) })
	}
}

// prepareCallNow is prepareCall where the call was read (the dispatcher,
// or the reader running it inline). ready: its turn has come and the
// caller queues or runs it; otherwise it was answered, or the wait for
// the turn goes on in a goroutine of its own, which queues it.
func (s *Server) prepareCallNow(j *job, lookupErr error) (ready bool) {
	defer func() {
		if p := recover(); p != nil {
			ready = false
			s.leaveLine(j)
			s.answerPanic(j, p)
		}
	}()
	spec := s.decodeCallJob(j, lookupErr)
	if spec == nil {
		return false
	}
	select {
	case <-j.turn.Ready():
		s.leaveLine(j)
		j.exec = func(time.Duration) (any, error) { return s.execCall(j, spec) }
		return true
	default:
		s.goJob(func() {
			defer s.recoverJob(j)
			defer s.leaveLine(j)
			s.awaitTurn(j, func(time.Duration) (any, error) { return s.execCall(j, spec) })
		})
		return false
	}
}

// decodeCallJob decodes a call's params, or answers the call (a lookup
// or params error) and returns nil.
func (s *Server) decodeCallJob(j *job, lookupErr error) *callSpec {
	p := j.callParams
	j.params, j.callParams = nil, members{}
	if lookupErr != nil {
		s.respond(j, nil, ErrorObject(lookupErr))
		return nil
	}
	spec, err := decodeCall(&p, j.inst, s.opts.Defaults, s.opts.Maximums)
	if d, ok := j.inst.(hostDeclarer); ok && err == nil {
		err = checkHostCallerID(j, d.HostFunctions())
	}
	if err != nil {
		s.leaveLine(j)
		s.respond(j, nil, ErrorObject(err)) // the turn is given back
		return nil
	}
	return spec
}

// awaitTurn waits for the job's turn, or its cancellation, then queues
// it to run exec (a call, or an evaluation in a session).
func (s *Server) awaitTurn(j *job, exec func(queued time.Duration) (any, error)) {
	select {
	case <-j.turn.Ready():
		s.leaveLine(j)
	case <-j.ctx.Done():
		s.leaveLine(j)
		s.answerCancelled(j) // the turn is given back, the instance stays open
		return
	}
	j.exec = exec
	s.enqueueRun(j)
}

// leaveLine counts a call whose wait for its turn ended (once).
func (s *Server) leaveLine(j *job) {
	s.mu.Lock()
	if j.inLine {
		j.inLine = false
		s.inLine--
	}
	s.mu.Unlock()
}

func (s *Server) execCall(j *job, spec *callSpec) (any, error) {
	l := j.inst.Limits()
	logs := logWire{left: or(spec.limits.LogBytes, l.LogBytes)}
	call := protocol.Call{Function: spec.function, Args: spec.args, Input: spec.input, Limits: spec.limits,
		Log: func(level, line string) { s.notifyLog(j.id, &logs, level, line) }}
	output := s.newOutputWire(j.id, or(spec.limits.OutputBytes, l.OutputBytes)) // a WASI instance's
	call.Output = output.write
	if d, ok := j.inst.(hostDeclarer); ok {
		call.Host = s.hostCaller(j, hostSite{fns: d.HostFunctions(), instance: j.inst.ID(), from: j.hostCall, output: output})
	}
	res, err := j.turn.Call(j.ctx, call)
	output.flush() // before the response
	if err != nil {
		return nil, err
	}
	return callResult(res, &logs), nil
}

// callResult is the wire form of a call's (or a plugin run's) outcome.
func callResult(res *protocol.CallOutcome, logs *logWire) *protocol.CallResult {
	r := &protocol.CallResult{
		Values:          protocol.EncodeValues(res.Values),
		FuelConsumed:    res.FuelConsumed,
		PeakMemoryBytes: res.PeakMemoryBytes,
		ElapsedMicros:   res.Elapsed.Microseconds(),
		QueuedMicros:    res.Queued.Microseconds(),
		LogLines:        logs.sent,
		LogTruncated:    res.LogTruncated || logs.dropped,
		LogDropped:      res.LogDropped,
	}
	truncated := false
	if res.Plugin {
		out := protocol.Bytes(res.PluginOutput)
		if out == nil {
			out = protocol.Bytes{}
		}
		r.Output = &out
		truncated = res.PluginOutputTruncated
		r.OutputTruncated = &truncated
	}
	if o := res.Output; o != nil {
		exit, stdout, stderr := res.ExitCode, protocol.Bytes(o.Stdout), protocol.Bytes(o.Stderr)
		r.ExitCode, r.Stdout, r.Stderr = &exit, &stdout, &stderr
		truncated = truncated || o.Truncated
		r.OutputTruncated = &truncated
	}
	return r
}

// preparePluginRun turns a prepared run of a plugin into a CallOnce, or
// refuses input on a run of a module that is not one.
func (s *Server) preparePluginRun(j *job) error {
	spec := j.spec
	info := j.mod.Info()
	if !info.IsPlugin() {
		if spec.input != nil {
			return paramErr("input", "the module is not an Extism plugin (it imports nothing from %s); input is for plugin functions", protocol.ExtismEnvModule)
		}
		return nil
	}
	if _, ok := s.instances(); !ok {
		return paramErr("module", "is an Extism plugin, and this engine runs no plugins")
	}
	if spec.input != nil {
		if err := checkInput(info, spec.function); err != nil {
			return err
		}
	}
	j.exec = func(queued time.Duration) (any, error) { return s.execPluginRun(j, queued) }
	return nil
}

func (s *Server) execPluginRun(j *job, queued time.Duration) (any, error) {
	ie, _ := s.instances()
	spec := j.spec
	logs := logWire{left: spec.limits.LogBytes}
	logf := func(level, line string) { s.notifyLog(j.id, &logs, level, line) }
	req := protocol.InstanceRequest{Capabilities: spec.caps, Limits: spec.limits, Config: spec.config, VarBytes: s.opts.DefaultVarBytes, Log: logf,
		HostFunctions: spec.hostFunctions}
	call := protocol.Call{Function: spec.function, Args: j.args, Input: spec.input, Log: logf}
	var output *outputWire
	if spec.caps.WASI != nil {
		output = s.newOutputWire(j.id, spec.limits.OutputBytes)
		req.Output, call.Output = output.write, output.write
		defer output.flush()
	}
	req.Host = s.hostCaller(j, hostSite{fns: spec.hostFunctions, from: spec.hostCall, output: output})
	call.Host = req.Host
	res, err := ie.CallOnce(s.engineContext(j), j.mod, req, call)
	if err != nil {
		return nil, err
	}
	r := callResult(res, &logs)
	r.QueuedMicros = queued.Microseconds()
	return &pluginRunResult{CallResult: r, ModuleID: j.mod.Info().ID}, nil
}

// pluginRunResult is a plugin run's result: a call's, with the module id
// as every run result has it.
type pluginRunResult struct {
	*protocol.CallResult
	ModuleID string `json:"moduleId"`
}

func or(v, fallback uint64) uint64 {
	if v != 0 {
		return v
	}
	return fallback
}

// rpcErrorer is an error that is its own JSON-RPC error object: the
// instance errors (-32001, -32002).
type rpcErrorer interface {
	error
	RPCError() *jsonrpc2.Error
}

// countable says whether err is a run outcome that stats counts: not a
// params problem, not an instance that is closed or too many.
func countable(err error) bool {
	var pe *ParamError
	var re rpcErrorer
	return !errors.As(err, &pe) && !errors.As(err, &re)
}

// describeInstances adds the instance settings to initialize's result.
func (s *Server) describeInstances(res *protocol.InitializeResult) {
	ie, ok := s.instances()
	if !ok {
		return
	}
	res.MaxInstances = ie.InstanceStats().Max
	res.InstanceIdleMs = ie.InstanceIdle().Milliseconds()
	res.Capabilities.Extism = ie.ExtismFunctions()
}
