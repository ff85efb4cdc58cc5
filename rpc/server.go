package rpc

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/sourcegraph/jsonrpc2"
	"golang.org/x/sync/errgroup"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// Engine is what the server needs from the sandbox. *sandbox.Engine
// implements it; tests may use a fake.
type Engine interface {
	Compile(ctx context.Context, src sandbox.Source) (*sandbox.Module, sandbox.CompileInfo, error)
	Run(ctx context.Context, req sandbox.Request) (*sandbox.Result, error)
	CacheStats() sandbox.CacheStats
}

// Options configure a Server. Zero fields take the documented defaults.
type Options struct {
	Framing         Framing       // default content-length
	MaxConcurrency  int           // runs executing at once; default runtime.NumCPU()
	MaxQueue        int           // runs waiting; default 1024
	MaxMessageBytes int64         // default 64 MiB
	Defaults        limits.Limits // default limits.Defaults()
	Maximums        limits.Limits // default limits.DefaultMaximums()
	Logger          *slog.Logger  // sidecar diagnostics (stderr); default discards
	Version         string        // reported by initialize
	// OutputHighWater is how many bytes may wait for a parent that is not
	// reading before workers stop taking new runs. Default 64 MiB.
	OutputHighWater int64
	// DrainTimeout bounds how long the server waits, at the end, for the
	// parent to read what it is owed. Default 1 s.
	DrainTimeout time.Duration
}

// Documented defaults of Options.
const (
	DefaultMaxQueue        = 1024
	DefaultMaxMessageBytes = 64 << 20
	DefaultOutputHighWater = 64 << 20
	DefaultDrainTimeout    = time.Second
)

func (o Options) withDefaults() (Options, error) {
	if o.Framing == "" {
		o.Framing = FramingContentLength
	}
	if o.MaxConcurrency == 0 {
		o.MaxConcurrency = runtime.NumCPU()
	}
	if o.MaxQueue == 0 {
		o.MaxQueue = DefaultMaxQueue
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.Defaults == (limits.Limits{}) {
		o.Defaults = limits.Defaults()
	}
	if o.Maximums == (limits.Limits{}) {
		o.Maximums = limits.DefaultMaximums()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.OutputHighWater == 0 {
		o.OutputHighWater = DefaultOutputHighWater
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	switch {
	case o.Framing != FramingContentLength && o.Framing != FramingNDJSON:
		return o, fmt.Errorf("framing: %q is not content-length or ndjson", o.Framing)
	case o.MaxConcurrency < 1:
		return o, errors.New("max-concurrency: must be >= 1")
	case o.MaxQueue < 1:
		return o, errors.New("max-queue: must be >= 1")
	case o.MaxMessageBytes < 1024:
		return o, errors.New("max-message-bytes: must be >= 1024")
	}
	if err := o.Maximums.Validate(limits.HardMaximums()); err != nil {
		return o, fmt.Errorf("max-%v", err)
	}
	if err := o.Defaults.Validate(o.Maximums); err != nil {
		return o, fmt.Errorf("default-%v", err)
	}
	return o, nil
}

// ErrExitWithoutShutdown is returned by Serve when `exit` came before
// `shutdown`; the process should exit 1, as in LSP.
var ErrExitWithoutShutdown = errors.New("exit without shutdown")

// Server serves one connection. Create with NewServer, then call Serve once.
type Server struct {
	eng   Engine
	opts  Options
	log   *slog.Logger
	start time.Time
	out   *outbox

	mu       sync.Mutex
	work     *sync.Cond      // signalled when the queue or the running set changes
	queue    *list.List      // *job, FIFO
	jobs     map[string]*job // queued and running, by id key
	running  int             // jobs taken by a worker and not yet answered
	replying int             // responses being handed to the outbox
	closing  bool            // input ended or exit: no new work, workers stop
	shutdown bool            // shutdown requested: no new work, in-flight work finishes
	exitErr  error
	stats    counters

	exited   chan struct{}
	exitOnce sync.Once
	workers  errgroup.Group
	helpers  sync.WaitGroup // shutdown waiters
}

type counters struct {
	requests     uint64
	runs         map[string]uint64
	queuedMicros int64
}

// job is one run or compile request, from arrival to its response.
type job struct {
	conn     *jsonrpc2.Conn
	id       jsonrpc2.ID
	key      string
	method   string
	run      *runSpec
	compile  sandbox.Source
	ctx      context.Context
	cancel   context.CancelFunc
	enqueued time.Time
	elem     *list.Element // set while queued
	replied  bool          // guarded by the worker that owns the job
}

// NewServer validates opts and returns a server over eng.
func NewServer(eng Engine, opts Options) (*Server, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{eng: eng, opts: o, log: o.Logger, start: time.Now(),
		queue: list.New(), jobs: map[string]*job{}, exited: make(chan struct{}),
		stats: counters{runs: map[string]uint64{}}}
	s.work = sync.NewCond(&s.mu)
	return s, nil
}

// Serve reads requests from in and writes responses to out until the input
// ends (it returns nil), `exit` arrives (nil, or ErrExitWithoutShutdown)
// or the framing breaks (a *FramingError). Every request read gets exactly
// one response before Serve returns, as long as out accepts writes.
func (s *Server) Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	s.out = newOutbox(out, s.opts.Framing)
	var (
		endMu  sync.Mutex
		endErr error // why the input ended, written by the read loop
	)
	st := &stream{
		in:    newFrameReader(in, s.opts.Framing, s.opts.MaxMessageBytes),
		out:   s.out,
		input: in,
		warn:  func(msg string, args ...any) { s.log.Warn(msg, args...) },
		onEnd: func(err error) {
			endMu.Lock()
			endErr = err
			endMu.Unlock()
			s.drain()
		},
	}
	for i := 0; i < s.opts.MaxConcurrency; i++ {
		s.workers.Go(func() error { s.worker(); return nil })
	}
	conn := jsonrpc2.NewConn(ctx, st, handler{s, st}, jsonrpc2.SetLogger(slogAdapter{s.log}))
	inputEnded := false
	select {
	case <-conn.DisconnectNotify(): // onEnd has drained
		inputEnded = true
	case <-s.exited:
		s.drain()
	case <-ctx.Done():
		s.drain()
	}
	conn.Close() // also closes the input, ending the read loop
	if err := s.out.close(s.opts.DrainTimeout); err != nil {
		s.log.Warn("output not fully written", "error", err)
	}
	if inputEnded {
		endMu.Lock()
		defer endMu.Unlock()
		var fe *FramingError
		if errors.As(endErr, &fe) {
			return fe
		}
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exitErr
}

// drain stops taking work, cancels what is queued (answering it) and what
// runs (its worker answers), and waits for the workers. Idempotent.
func (s *Server) drain() {
	s.mu.Lock()
	s.closing = true
	var cancelled []*job
	for e := s.queue.Front(); e != nil; e = e.Next() {
		j := e.Value.(*job)
		j.elem = nil
		delete(s.jobs, j.key)
		cancelled = append(cancelled, j)
	}
	s.queue.Init()
	for _, j := range s.jobs {
		j.cancel()
	}
	s.work.Broadcast()
	s.mu.Unlock()
	for _, j := range cancelled {
		s.replyCancelled(j)
	}
	s.workers.Wait()
	s.helpers.Wait()
}

// handler adapts the server to jsonrpc2. Handle runs on the read loop, so
// it never blocks: runs and compiles are queued for the workers.
type handler struct {
	s  *Server
	st *stream
}

func (h handler) Handle(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	s := h.s
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("panic while handling a request", "method", req.Method, "panic", p, "stack", string(debug.Stack()))
			if !req.Notif {
				reply(conn, req.ID, nil, protocolError(CodeInternalError, "internal error: %v", p))
			}
		}
	}()
	s.mu.Lock()
	s.stats.requests++
	s.mu.Unlock()
	var id json.RawMessage
	if !req.Notif {
		id, _ = req.ID.MarshalJSON()
	}
	params, ok := h.st.takeParams(req.Method, id)
	if !ok { // jsonrpc2 no longer calls us before reading the next message
		panic("rpc: the handled message is not the one the stream read last")
	}
	if req.Notif {
		s.notification(req.Method, params)
		return
	}
	switch req.Method {
	case MethodInitialize:
		reply(conn, req.ID, s.initializeResult(), nil)
	case MethodStats:
		reply(conn, req.ID, s.statsResult(), nil)
	case MethodRun, MethodCompile:
		s.enqueue(conn, req, params)
	case MethodShutdown:
		s.beginShutdown(conn, req.ID)
	default:
		if hook, ok := testMethods[req.Method]; ok {
			hook()
		}
		reply(conn, req.ID, nil, protocolError(CodeMethodNotFound, "unknown method %q", req.Method))
	}
}

// testMethods are extra methods compiled in by fault-injection builds
// (build tag sandboxd_faults); empty in release builds.
var testMethods = map[string]func(){}

func (s *Server) notification(method string, params json.RawMessage) {
	switch method {
	case MethodExit:
		s.exitOnce.Do(func() {
			s.mu.Lock()
			if !s.shutdown {
				s.exitErr = ErrExitWithoutShutdown
			}
			s.mu.Unlock()
			close(s.exited)
		})
	case MethodCancel:
		var p CancelParams
		if params == nil || json.Unmarshal(params, &p) != nil {
			s.log.Warn("ignoring $/cancelRequest without a valid id")
			return
		}
		s.cancel(p.ID)
	default:
		s.log.Warn("ignoring notification", "method", method)
	}
}

func idKey(id jsonrpc2.ID) string { return id.String() }

// enqueue decodes a run or compile request and queues it, or answers it
// at once when it is invalid, a duplicate, or the queue is full.
func (s *Server) enqueue(conn *jsonrpc2.Conn, req *jsonrpc2.Request, raw json.RawMessage) {
	ctx, cancel := context.WithCancel(context.Background())
	j := &job{conn: conn, id: req.ID, key: idKey(req.ID), method: req.Method, ctx: ctx, cancel: cancel, enqueued: time.Now()}
	var err error
	if req.Method == MethodRun {
		j.run, err = decodeRun(raw, s.opts.Defaults, s.opts.Maximums)
	} else {
		j.compile, err = decodeCompile(raw)
	}
	if err != nil {
		cancel()
		reply(conn, req.ID, nil, ErrorObject(err))
		return
	}
	s.mu.Lock()
	var refuse *jsonrpc2.Error
	switch {
	case s.closing || s.shutdown:
		refuse = protocolError(CodeInvalidRequest, "server is shutting down")
	case s.jobs[j.key] != nil:
		refuse = protocolError(CodeInvalidRequest, "id %s is already used by a request in flight", j.key)
	case s.waiting() >= s.opts.MaxQueue:
		refuse = busyError(s.waiting(), s.opts.MaxQueue)
	}
	if refuse == nil {
		j.elem = s.queue.PushBack(j)
		s.jobs[j.key] = j
		s.work.Signal()
	}
	s.mu.Unlock()
	if refuse != nil {
		cancel()
		reply(conn, req.ID, nil, refuse)
	}
}

// waiting is how many queued jobs have no idle worker to take them. A job
// handed to an idle worker that has not woken yet is not waiting. Call
// with s.mu held.
func (s *Server) waiting() int {
	idle := s.opts.MaxConcurrency - s.running
	return max(0, s.queue.Len()-idle)
}

// cancel ends the named job: a queued one is answered now, a running one
// is interrupted and answered by its worker. Unknown ids are ignored.
func (s *Server) cancel(id jsonrpc2.ID) {
	s.mu.Lock()
	j := s.jobs[idKey(id)]
	if j == nil {
		s.mu.Unlock()
		return
	}
	queued := j.elem != nil
	if queued {
		s.queue.Remove(j.elem)
		j.elem = nil
		delete(s.jobs, j.key)
		s.work.Broadcast()
	}
	s.mu.Unlock()
	j.cancel()
	if queued {
		s.replyCancelled(j)
	}
}

func (s *Server) replyCancelled(j *job) {
	j.cancel()
	if j.method == MethodRun {
		s.count(string(sandbox.KindCancelled))
	}
	reply(j.conn, j.id, nil, ErrorObject(s.explainCancel(&sandbox.Error{Kind: sandbox.KindCancelled, Message: "run cancelled by the caller"})))
}

// explainCancel rewords a cancellation that the sidecar itself caused (its
// input ended, or exit arrived) so the parent does not blame itself.
func (s *Server) explainCancel(err error) error {
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Kind != sandbox.KindCancelled {
		return err
	}
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if !closing {
		return err
	}
	return &sandbox.Error{Kind: sandbox.KindCancelled, Usage: se.Usage,
		Message: "run cancelled: the sidecar is exiting (its input ended or exit arrived)"}
}

func (s *Server) count(outcome string) {
	s.mu.Lock()
	s.stats.runs[outcome]++
	s.mu.Unlock()
}

// worker executes queued jobs one at a time until the server closes.
func (s *Server) worker() {
	for {
		s.out.waitBelow(s.opts.OutputHighWater)
		j := s.next()
		if j == nil {
			return
		}
		s.execute(j) // responds, which also ends the job's accounting
		j.cancel()
	}
}

// next takes the oldest queued job, or returns nil once the server closes.
func (s *Server) next() *job {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.queue.Len() == 0 && !s.closing {
		s.work.Wait()
	}
	if s.queue.Len() == 0 {
		return nil
	}
	j := s.queue.Remove(s.queue.Front()).(*job)
	j.elem = nil
	s.running++
	return j
}

// execute runs one job and sends its one response, whatever happens.
func (s *Server) execute(j *job) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("panic while executing a request", "method", j.method, "panic", p, "stack", string(debug.Stack()))
			if !j.replied {
				if j.method == MethodRun {
					s.count("internal")
				}
				s.respond(j, nil, protocolError(CodeInternalError, "internal error: %v", p))
			}
		}
	}()
	queued := time.Since(j.enqueued)
	s.mu.Lock()
	s.stats.queuedMicros += queued.Microseconds()
	s.mu.Unlock()
	if j.method == MethodCompile {
		s.executeCompile(j)
		return
	}
	res, err := s.executeRun(j, queued)
	if err != nil {
		var pe *ParamError
		if !errors.As(err, &pe) {
			s.count(string(sandbox.KindOf(err)))
		}
		s.respond(j, nil, ErrorObject(s.explainCancel(err)))
		return
	}
	s.count("ok")
	s.respond(j, res, nil)
}

func (s *Server) executeRun(j *job, queued time.Duration) (*RunResult, error) {
	if j.ctx.Err() != nil {
		return nil, &sandbox.Error{Kind: sandbox.KindCancelled, Message: "run cancelled by the caller"}
	}
	spec := j.run
	mod, _, err := s.eng.Compile(j.ctx, spec.source)
	if err != nil {
		return nil, err
	}
	var args []sandbox.Value
	if exp, ok := mod.Export(spec.function); ok && exp.Kind == "func" {
		if args, err = decodeArgs(spec.args, exp.Params); err != nil {
			return nil, err
		}
	}
	seq := 0
	res, err := s.eng.Run(j.ctx, sandbox.Request{
		Module: mod, Function: spec.function, Args: args, Limits: spec.limits, Capabilities: spec.caps,
		Log: func(line string) {
			s.notifyLog(j.id, seq, line)
			seq++
		},
	})
	if err != nil {
		return nil, err
	}
	return &RunResult{
		Values:          EncodeValues(res.Values),
		FuelConsumed:    res.FuelConsumed,
		PeakMemoryBytes: res.PeakMemoryBytes,
		ElapsedMicros:   res.Elapsed.Microseconds(),
		QueuedMicros:    queued.Microseconds(),
		ModuleID:        mod.ID,
		LogLines:        res.LogLines,
		LogTruncated:    res.LogTruncated,
	}, nil
}

func (s *Server) executeCompile(j *job) {
	mod, info, err := s.eng.Compile(j.ctx, j.compile)
	if err != nil {
		s.respond(j, nil, ErrorObject(err))
		return
	}
	s.respond(j, CompileResultOf(mod, info), nil)
}

// CompileResultOf describes a compiled module as `compile` returns it.
func CompileResultOf(mod *sandbox.Module, info sandbox.CompileInfo) *CompileResult {
	r := &CompileResult{ModuleID: mod.ID, Imports: []ImportInfo{}, Exports: []ExportInfo{},
		Cached: info.Cached, CompileMicros: info.Elapsed.Microseconds()}
	for _, imp := range mod.Imports {
		r.Imports = append(r.Imports, ImportInfo(imp))
	}
	for _, exp := range mod.Exports {
		r.Exports = append(r.Exports, ExportInfo(exp))
	}
	return r
}

// respond sends the job's one response, from the worker itself when the
// output is idle. The id is released first, so a parent may reuse it as
// soon as it reads the response.
func (s *Server) respond(j *job, result any, rerr *jsonrpc2.Error) {
	j.replied = true
	body, err := responseBody(j.id, result, rerr)
	if err != nil {
		s.log.Error("encoding a response", "error", err)
		body, _ = responseBody(j.id, nil, protocolError(CodeInternalError, "internal error: %v", err))
	}
	// Stats and the id are up to date before the parent can read the
	// response; shutdown's reply waits until this one is on its way.
	s.mu.Lock()
	delete(s.jobs, j.key)
	s.running--
	s.replying++
	s.mu.Unlock()
	s.out.sendDirect(body)
	s.mu.Lock()
	s.replying--
	s.work.Broadcast()
	s.mu.Unlock()
}

// responseBody encodes a response in one pass. (jsonrpc2's own encoder
// marshals and then compacts the whole message again.)
func responseBody(id jsonrpc2.ID, result any, rerr *jsonrpc2.Error) ([]byte, error) {
	idJSON, err := id.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var payload []byte
	key := `,"result":`
	if rerr != nil {
		key = `,"error":`
		payload, err = json.Marshal(rerr)
	} else {
		payload, err = json.Marshal(result)
	}
	if err != nil {
		return nil, err
	}
	body := make([]byte, 0, len(payload)+len(idJSON)+32)
	body = append(body, `{"jsonrpc":"2.0","id":`...)
	body = append(body, idJSON...)
	body = append(body, key...)
	body = append(body, payload...)
	return append(body, '}'), nil
}

// notifyLog queues one log notification of a run. It never blocks.
func (s *Server) notifyLog(id jsonrpc2.ID, seq int, line string) {
	body, err := json.Marshal(logNotification{JSONRPC: "2.0", Method: NotifyLog, Params: LogParams{ID: id, Seq: seq, Line: line}})
	if err != nil {
		s.log.Error("encoding a log notification", "error", err)
		return
	}
	s.out.send(body)
}

type logNotification struct {
	JSONRPC string    `json:"jsonrpc"`
	Method  string    `json:"method"`
	Params  LogParams `json:"params"`
}

// reply sends one response. It never blocks on the parent (the outbox
// queues), and uses a background context so that a cancelled request is
// still answered.
func reply(conn *jsonrpc2.Conn, id jsonrpc2.ID, result any, rerr *jsonrpc2.Error) {
	ctx := context.Background()
	if rerr != nil {
		_ = conn.ReplyWithError(ctx, id, rerr)
		return
	}
	_ = conn.Reply(ctx, id, result)
}

// beginShutdown refuses new work and answers once in-flight work is done.
func (s *Server) beginShutdown(conn *jsonrpc2.Conn, id jsonrpc2.ID) {
	s.mu.Lock()
	s.shutdown = true
	s.mu.Unlock()
	s.helpers.Add(1)
	go func() {
		defer s.helpers.Done()
		s.mu.Lock()
		for s.running > 0 || s.replying > 0 || s.queue.Len() > 0 {
			s.work.Wait()
		}
		s.mu.Unlock()
		reply(conn, id, nil, nil)
	}()
}

func (s *Server) initializeResult() *InitializeResult {
	types := make([]string, len(sandbox.ValueTypes))
	for i, t := range sandbox.ValueTypes {
		types[i] = string(t)
	}
	return &InitializeResult{
		ServerInfo: ServerInfo{Name: "sandboxd", Version: s.opts.Version},
		Engine:     EngineInfo{Wasmtime: sandbox.WasmtimeVersion},
		Capabilities: ServerCaps{
			HostFunctions: sandbox.HostFunctions,
			ValueTypes:    types,
			Framing:       string(s.opts.Framing),
		},
		Limits:         LimitsInfo{Defaults: limitsMap(s.opts.Defaults), Maximums: limitsMap(s.opts.Maximums)},
		MaxConcurrency: s.opts.MaxConcurrency,
		MaxQueue:       s.opts.MaxQueue,
	}
}

func (s *Server) statsResult() *StatsResult {
	cache := s.eng.CacheStats()
	s.mu.Lock()
	defer s.mu.Unlock()
	runs := map[string]uint64{}
	for _, k := range sortedKinds() {
		runs[k] = s.stats.runs[k]
	}
	if n := s.stats.runs["internal"]; n > 0 {
		runs["internal"] = n
	}
	return &StatsResult{
		Runs:              runs,
		InFlight:          s.running,
		Queued:            s.waiting(),
		QueuedMicrosTotal: s.stats.queuedMicros,
		Cache:             CacheInfo(cache),
		UptimeMs:          time.Since(s.start).Milliseconds(),
		Requests:          s.stats.requests,
	}
}

// slogAdapter routes jsonrpc2's own diagnostics to the sidecar's logger.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Printf(format string, v ...any) {
	a.l.Warn(fmt.Sprintf(format, v...))
}
