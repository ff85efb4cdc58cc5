package rpc

import (
	"errors"
	"runtime/debug"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
)

// Execution has two stages. The prepare stage decodes the params and
// obtains the module (Engine.Compile, which returns cached modules at
// once). A request that may have to wait for a compile (or is large to
// decode) is prepared in a goroutine of its own, so it holds no run
// slot, and runs of modules already compiled never wait behind a
// compile; a small run whose module is cached is prepared where it was
// read, which saves a goroutine and a hand-off. A prepared run then waits
// in the run queue for one of MaxConcurrency run slots (slots.go), or is
// run at once by the goroutine that read it (runInline).

// inlineDecodeBytes is the largest run message decoded by the goroutine
// that handles it: decoding it costs microseconds, not enough to delay
// the messages behind it.
const inlineDecodeBytes = 64 << 10

// cachedCompiler is implemented by engines that can hand out a module
// they have compiled without reading a file, converting or compiling
// anything: Compile served from the cache, in one step. (Asking whether a
// module is cached and then calling Compile is not that: another compile
// can evict it in between, and Compile would then compile on the caller,
// the dispatcher or the reader.)
type cachedCompiler interface {
	CompileCached(src protocol.Source) (Module, bool)
}

// prepare decodes and compiles one admitted job; a compile is answered
// here, a run goes on to the run queue.
func (s *Server) prepare(j *job) {
	defer s.recoverJob(j)
	raw := j.params
	j.params = nil // the decoded form replaces it
	if j.method == protocol.MethodInstantiate {
		s.prepareInstantiate(j, raw)
		return
	}
	if j.method == MethodCompile {
		src, err := decodeCompile(raw, s.opts.Defaults, s.opts.Maximums)
		if err != nil {
			s.respond(j, nil, ErrorObject(err))
			return
		}
		mod, info, err := s.eng.Compile(j.ctx, src)
		if err != nil {
			s.respond(j, nil, ErrorObject(s.explainCancel(err)))
			return
		}
		s.respond(j, CompileResultOf(mod.Info(), info), nil)
		return
	}
	spec, err := decodeRun(raw, s.opts.Defaults, s.opts.Maximums)
	if err == nil {
		err = checkHostCallerID(j, spec.hostFunctions)
	}
	if err != nil {
		s.respond(j, nil, ErrorObject(err))
		return
	}
	if s.compileJob(j, spec, nil) {
		s.enqueueRun(j)
	}
}

// prepareRun decodes a run's params on the calling goroutine and, when the
// module is already compiled, obtains it there too (ready: the caller
// queues or runs the job). Otherwise the compile goes on in a goroutine
// of its own, which queues the job; or the job was answered (bad params).
func (s *Server) prepareRun(j *job) (ready bool) {
	defer func() {
		if p := recover(); p != nil {
			ready = false
			s.answerPanic(j, p)
		}
	}()
	raw := j.params
	j.params = nil // the decoded form replaces it
	spec, err := decodeRun(raw, s.opts.Defaults, s.opts.Maximums)
	if err == nil {
		err = checkHostCallerID(j, spec.hostFunctions)
	}
	if err != nil {
		s.respond(j, nil, ErrorObject(err))
		return false
	}
	mod, ok := s.cachedModule(spec.source) // by id, or by the wire literal of its wat or wasm
	if !ok && spec.source.Encoded != nil {
		// A literal not seen before: decoded here (a small message), the
		// module may still be known by its bytes.
		if err := decodeEncoded(&spec.source); err != nil {
			s.respond(j, nil, ErrorObject(err))
			return false
		}
		mod, ok = s.cachedModule(spec.source)
	}
	if !ok {
		s.goJob(func() {
			defer s.recoverJob(j)
			if s.compileJob(j, spec, nil) {
				s.enqueueRun(j)
			}
		})
		return false
	}
	return s.compileJob(j, spec, mod)
}

// cachedModule returns src's module if the engine has it compiled, having
// read, converted and compiled nothing; false when only Compile can tell.
func (s *Server) cachedModule(src protocol.Source) (Module, bool) {
	c, ok := s.eng.(cachedCompiler)
	if !ok {
		return nil, false
	}
	return c.CompileCached(src)
}

// compileJob obtains the job's module (mod, when the cache gave it
// already), answering the job if that fails.
func (s *Server) compileJob(j *job, spec *runSpec, mod Module) bool {
	if err := s.compileRun(j, spec, mod); err != nil {
		var pe *ParamError
		if !errors.As(err, &pe) {
			s.count(string(protocol.KindOf(err)))
		}
		s.respond(j, nil, ErrorObject(s.explainCancel(err)))
		return false
	}
	return true
}

// compileRun obtains the module of a run (unless the cache gave it: mod)
// and decodes its args for the export's parameter types.
func (s *Server) compileRun(j *job, spec *runSpec, mod Module) error {
	if j.ctx.Err() != nil {
		return cancelledError()
	}
	if mod == nil && spec.source.Encoded != nil && spec.source.WAT == "" && spec.source.Wasm == nil {
		// Not looked up yet (a large run, prepared in its own goroutine):
		// by its literal first, then decoded.
		if m, ok := s.cachedModule(spec.source); ok {
			mod = m
		} else if err := decodeEncoded(&spec.source); err != nil {
			return err
		}
	}
	if g, ok := s.eng.(grantChecker); ok {
		src := spec.source
		if mod != nil { // by its id: nothing to read or convert again
			src = protocol.Source{ID: mod.Info().ID}
		}
		if err := g.CheckGrant(src, spec.caps); err != nil {
			return err // a WASI module without the grant: refused before compiling
		}
	}
	var err error
	if mod == nil {
		if mod, _, err = s.eng.Compile(j.ctx, spec.source); err != nil {
			return err
		}
	}
	j.spec, j.mod = spec, mod
	wasiDefaults(spec, mod.Info())
	if exp, ok := mod.Info().Export(spec.function); ok && exp.Kind == "func" {
		if j.args, err = decodeArgs(spec.args, exp.Params); err != nil {
			return err
		}
	}
	spec.args = nil
	return s.preparePluginRun(j)
}

func cancelledError() error {
	return &protocol.Error{Kind: protocol.KindCancelled, Message: "run cancelled by the caller"}
}

// recoverJob answers a job whose goroutine panicked with an internal error.
func (s *Server) recoverJob(j *job) {
	if p := recover(); p != nil {
		s.answerPanic(j, p)
	}
}

func (s *Server) answerPanic(j *job, p any) {
	s.log.Error("panic while executing a request", "method", j.method, "panic", p, "stack", string(debug.Stack()))
	if j.method == MethodRun {
		s.count("internal")
	}
	s.respond(j, nil, protocolError(CodeInternalError, "internal error: %v", p))
}

// execute runs one job and sends its one response, whatever happens.
func (s *Server) execute(j *job) {
	defer s.recoverJob(j)
	queued := time.Since(j.queuedAt)
	s.mu.Lock()
	s.stats.queuedMicros += queued.Microseconds()
	s.mu.Unlock()
	var res any
	var err error
	if j.exec != nil {
		res, err = j.exec(queued)
	} else {
		res, err = s.executeRun(j, queued)
	}
	if err != nil {
		if countable(err) {
			s.count(string(protocol.KindOf(err)))
		}
		s.respond(j, nil, ErrorObject(s.explainCancel(err)))
		return
	}
	s.count("ok")
	s.respond(j, res, nil)
}

func (s *Server) executeRun(j *job, queued time.Duration) (*protocol.RunResult, error) {
	if j.ctx.Err() != nil {
		return nil, cancelledError()
	}
	spec := j.spec
	logs := logWire{left: spec.limits.LogBytes}
	run := protocol.Run{
		Function: spec.function, Args: j.args, Limits: spec.limits, Capabilities: spec.caps,
		Log:           func(line string) { s.notifyLog(j.id, &logs, "", line) },
		HostFunctions: spec.hostFunctions,
	}
	var output *outputWire
	if spec.caps.WASI != nil {
		output = s.newOutputWire(j.id, spec.limits.OutputBytes)
		run.Output = output.write
		defer output.flush() // before the response, which the caller sends
	}
	run.Host = s.hostCaller(j, hostSite{fns: spec.hostFunctions, from: spec.hostCall, output: output})
	res, err := s.eng.Run(s.engineContext(j), j.mod, run)
	if err != nil {
		return nil, err
	}
	return &protocol.RunResult{
		WASIResult:      wasiResult(res),
		Values:          protocol.EncodeValues(res.Values),
		FuelConsumed:    res.FuelConsumed,
		PeakMemoryBytes: res.PeakMemoryBytes,
		ElapsedMicros:   res.Elapsed.Microseconds(),
		QueuedMicros:    queued.Microseconds(),
		ModuleID:        j.mod.Info().ID,
		LogLines:        logs.sent,
		LogTruncated:    res.LogTruncated || logs.dropped,
		LogDropped:      res.LogDropped,
	}, nil
}

// CompileResultOf describes a compiled module as `compile` returns it.
func CompileResultOf(mod *protocol.ModuleInfo, info protocol.CompileInfo) *protocol.CompileResult {
	r := &protocol.CompileResult{ModuleID: mod.ID, Imports: []protocol.ImportInfo{}, Exports: []protocol.ExportInfo{},
		Cached: info.Cached, CompileMicros: info.Elapsed.Microseconds()}
	for _, imp := range mod.Imports {
		r.Imports = append(r.Imports, protocol.ImportInfo(imp))
	}
	for _, exp := range mod.Exports {
		r.Exports = append(r.Exports, protocol.ExportInfo(exp))
	}
	return r
}

func (s *Server) count(outcome string) {
	s.mu.Lock()
	s.stats.runs[outcome]++
	s.mu.Unlock()
}
