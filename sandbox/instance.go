package sandbox

// Long-lived instances. A one-shot Run builds a store, runs one export and
// frees it; an Instance keeps its store between calls, so a module's
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
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox/internal/wasmbin"
)

// Documented defaults of the instance settings of Config.
const (
	// DefaultMaxInstances bounds the live instances of an engine.
	DefaultMaxInstances = 64
	// DefaultInstanceIdle is how long an instance may go without a call
	// before it is evicted.
	DefaultInstanceIdle = 10 * time.Minute
	// DefaultVarBytes bounds a plugin instance's vars (keys and values).
	DefaultVarBytes = 1 << 20
	// MaxVarBytes is the largest VarBytes an instance may ask for.
	MaxVarBytes = 64 << 20
)

// InitializeExport is the export a reactor module (a WASI reactor, a Go
// c-shared module, a plugin built as a library) needs called once before
// anything else. Instantiate calls it, fenced like a call.
const InitializeExport = "_initialize"

// StartExport is a WASI command's entry point (its main). Instantiation
// never runs it: a plugin's _start runs when it is called, once.
const StartExport = "_start"

// InstanceRequest describes a long-lived instance.
type InstanceRequest struct {
	Module       *Module
	Capabilities Capabilities
	// Limits: MemoryBytes, TableElements, Instances and Memories hold for
	// the instance's whole life. Fuel, Timeout, LogBytes and OutputBytes
	// fence instantiation (the start function and _initialize) and are the
	// defaults of every call.
	Limits limits.Limits
	// Config is what a plugin's config_get reads. Ignored for modules that
	// are not plugins.
	Config map[string]string
	// VarBytes bounds a plugin's vars: the sum of the lengths of every key
	// and value. Zero: DefaultVarBytes; at most MaxVarBytes.
	VarBytes uint64
	// Log and Output receive what the guest logs and writes during
	// instantiation, as CallRequest's do during a call.
	Log    func(level LogLevel, line string)
	Output func(stream string, data []byte)
}

// LogLevel is the level of a plugin's log line (log_trace … log_error);
// lines from host::log have no level ("").
type LogLevel string

// The levels of the Extism log functions.
const (
	LogTrace LogLevel = "trace"
	LogDebug LogLevel = "debug"
	LogInfo  LogLevel = "info"
	LogWarn  LogLevel = "warn"
	LogError LogLevel = "error"
)

// CallLimits are the per-call fences. A zero field takes the instance's
// default (InstanceRequest.Limits).
type CallLimits struct {
	Fuel        uint64
	Timeout     time.Duration
	LogBytes    uint64
	OutputBytes uint64
}

// CallRequest is one call on an instance.
type CallRequest struct {
	Function string
	Args     []Value
	// Input is what a plugin function reads (Extism's input). Only for
	// plugin functions; nil is empty input.
	Input  []byte
	Limits CallLimits
	// Log receives each accepted log line, on the guest's thread, before
	// Call returns; it must not block. Output likewise for WASI writes.
	Log    func(level LogLevel, line string)
	Output func(stream string, data []byte)
}

// CallResult is what a call that returned produces.
type CallResult struct {
	Result
	// PluginOutput is the bytes a plugin function set as its output (nil
	// for other functions), at most the call's outputBytes.
	PluginOutput []byte
	// PluginOutputTruncated says the plugin set more than outputBytes and
	// only that prefix is in PluginOutput.
	PluginOutputTruncated bool
	// Queued is how long the call waited for the calls before it.
	Queued time.Duration
}

// ErrInstanceClosed matches every *InstanceClosedError with errors.Is.
var ErrInstanceClosed = errors.New("instance closed")

// InstanceClosedError is the error of a call on an instance that was
// released, evicted or closed by a failed call.
type InstanceClosedError struct {
	Instance string
	Reason   string // e.g. "released", "closed after timeout in a call of \"spin\""
}

func (e *InstanceClosedError) Error() string {
	return fmt.Sprintf("instance %s is closed: %s", protocol.Escape(e.Instance), e.Reason)
}

// Is makes errors.Is(err, ErrInstanceClosed) true.
func (e *InstanceClosedError) Is(target error) bool { return target == ErrInstanceClosed }

// ErrTooManyInstances is wrapped by the error Instantiate returns when the
// engine already holds Config.MaxInstances live instances.
var ErrTooManyInstances = errors.New("too many instances")

// Instance is a module instantiated once and called many times. Its
// methods are safe for concurrent use.
type Instance struct {
	id     string
	e      *Engine
	module *Module
	limits limits.Limits
	r      *run         // store, fence, wasm instance: touched only by the turn's holder
	boot   Result       // what instantiation (start function, _initialize) consumed
	plugin *pluginState // nil unless the module is an Extism plugin
	// oneShot: made by CallOnce for one call, like a run. It takes no slot
	// of MaxInstances, is not counted in InstanceStats and cannot be
	// looked up.
	oneShot bool

	// Looked up once at instantiation (export lookups cost, per call).
	denied []*wasmtime.Global // the rewriter's refusal records
	mems   []*wasmtime.Memory // every memory of the module
	tables []*wasmtime.Table  // every table, with its element size
	elem   []uint64

	mu       sync.Mutex
	busy     bool    // a turn is held
	waiting  []*Turn // turns in arrival order, each told its verdict once
	closed   *InstanceClosedError
	cancel   func()      // cancels the call in progress, if any
	idle     *time.Timer // evicts the instance when it fires
	freed    bool        // the store has been freed
	lastCall time.Time
}

// ID is the instance's name: "inst-" + a random part chosen once per
// engine + "-" + a counter, so it is unique within the engine's life and
// not reused by a later process (a parent holding an id across a sidecar
// restart gets "no such instance", not somebody else's instance).
func (in *Instance) ID() string { return in.id }

// Module is the module the instance runs.
func (in *Instance) Module() *Module { return in.module }

// IsPlugin says whether the module imports the Extism ABI.
func (in *Instance) IsPlugin() bool { return in.plugin != nil }

// Instantiation is what instantiation consumed: fuel, memory, elapsed time and
// log lines of the start function and _initialize.
func (in *Instance) Instantiation() Result { return in.boot }

// Limits are the instance's limits (the per-call defaults among them).
func (in *Instance) Limits() limits.Limits { return in.limits }

// instanceTable is the engine's registry of live instances.
type instanceTable struct {
	max  int
	idle time.Duration

	mu     sync.Mutex
	live   map[string]*Instance
	prefix string // the random part of the ids, chosen on first use
	// gone names recently closed instances with why (at most
	// closedRemembered, oldest first in goneOrder).
	gone      map[string]string
	goneOrder []string
	next      uint64
	created   uint64
	evicted   uint64
	closed    bool
}

// InstanceStats is a snapshot of an engine's instances.
type InstanceStats struct {
	Live    int    `json:"live"`
	Max     int    `json:"max"`
	Created uint64 `json:"created"`
	Evicted uint64 `json:"evicted"`
}

// InstanceStats reports the live instances and how many were evicted.
func (e *Engine) InstanceStats() InstanceStats {
	t := &e.instances
	t.mu.Lock()
	defer t.mu.Unlock()
	return InstanceStats{Live: len(t.live), Max: t.max, Created: t.created, Evicted: t.evicted}
}

// LookupInstance returns the live instance named id, or an error saying it
// does not exist (never created here, or closed and forgotten).
func (e *Engine) LookupInstance(id string) (*Instance, error) {
	t := &e.instances
	t.mu.Lock()
	defer t.mu.Unlock()
	if in, ok := t.live[id]; ok && in != nil {
		return in, nil
	}
	if reason, ok := t.gone[id]; ok {
		return nil, &InstanceClosedError{Instance: id, Reason: reason}
	}
	return nil, &InstanceClosedError{Instance: id, Reason: "no such instance (never created, or already closed)"}
}

// reserve claims a slot for a new instance.
func (t *instanceTable) reserve() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return "", newError(KindHost, "the engine is closed")
	}
	if len(t.live) >= t.max {
		return "", &Error{Kind: KindHost, err: ErrTooManyInstances,
			Message: fmt.Sprintf("too many instances: %d are live (the maximum is %d); release one", len(t.live), t.max)}
	}
	id := t.nextIDLocked()
	t.live[id] = nil // the slot; filled by add
	return id, nil
}

// name returns a fresh id without claiming a slot, for a one-shot
// instance (CallOnce): it is bounded by its caller's concurrency, like a
// run, so a plugin run is not refused because instantiate's slots are
// taken, and does not take one from an instantiate.
func (t *instanceTable) name() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return "", newError(KindHost, "the engine is closed")
	}
	return t.nextIDLocked(), nil
}

func (t *instanceTable) nextIDLocked() string {
	if t.prefix == "" {
		t.prefix = randomIDPart()
	}
	t.next++
	return "inst-" + t.prefix + "-" + strconv.FormatUint(t.next, 10)
}

// randomIDPart is 48 random bits in hex: two engines (two sidecar
// processes) name their instances differently.
func randomIDPart() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

func (t *instanceTable) add(in *Instance) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.live[in.id] = in
	t.created++
}

// closedRemembered is how many closed instances LookupInstance still
// names with the reason they closed; older ones are "no such instance".
const closedRemembered = 4096

// remove forgets a live instance; reason, if set, is remembered for
// LookupInstance (bounded by closedRemembered).
func (t *instanceTable) remove(id, reason string, evicted bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.live, id)
	if evicted {
		t.evicted++
	}
	if reason == "" {
		return
	}
	if t.gone == nil {
		t.gone = map[string]string{}
	}
	if len(t.goneOrder) >= closedRemembered {
		delete(t.gone, t.goneOrder[0])
		t.goneOrder = t.goneOrder[1:]
	}
	t.gone[id] = reason
	t.goneOrder = append(t.goneOrder, id)
}

// closeAll closes every instance (Engine.Close) and refuses new ones.
func (t *instanceTable) closeAll() {
	t.mu.Lock()
	t.closed = true
	all := make([]*Instance, 0, len(t.live))
	for _, in := range t.live {
		if in != nil {
			all = append(all, in)
		}
	}
	t.mu.Unlock()
	for _, in := range all {
		in.shut("the engine closed", false)
		in.waitFreed()
	}
}

// Instantiate creates a long-lived instance of req.Module: the same checks
// as Run (imports, static caps), a store of its own, then the start
// function and _initialize, fenced by req.Limits like a call. A failure
// here leaves no instance behind.
func (e *Engine) Instantiate(ctx context.Context, req InstanceRequest) (*Instance, error) {
	return e.instantiate(ctx, req, false)
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
	m := req.Module
	plugin := isPlugin(m)
	caps := m
	l := req.Limits
	if plugin {
		if err := checkPluginImports(m, req.Capabilities); err != nil {
			return nil, err
		}
		caps = withoutPluginImports(m)
		if l.MemoryBytes < kernelInitialBytes {
			return nil, &Error{Kind: KindMemoryLimitExceeded, Resource: ResourceMemory, Limit: l.MemoryBytes, Requested: kernelInitialBytes,
				Message: fmt.Sprintf("the plugin kernel's initial memory of %d bytes exceeds the cap of %d bytes", kernelInitialBytes, l.MemoryBytes)}
		}
		l.MemoryBytes -= kernelInitialBytes // what the plugin's own memories and tables may start with
	}
	if err := checkRunImports(caps, req.Capabilities); err != nil {
		return nil, err
	}
	if err := checkStaticCaps(m.info, l); err != nil {
		if plugin && err.Resource == ResourceMemory {
			err.Limit = req.Limits.MemoryBytes
			err.Requested += kernelInitialBytes
			err.Message += fmt.Sprintf(" (with the plugin kernel's %d bytes)", kernelInitialBytes)
		}
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
	in := &Instance{id: id, e: e, module: m, limits: req.Limits, oneShot: oneShot}
	if err := in.start(ctx, req, plugin); err != nil {
		in.forget("", false)
		return nil, err
	}
	// The table knows the instance before its idle timer runs: an eviction
	// before add took the reserved slot out and add then put the closed
	// instance back, live for ever. The timer is set under in.mu, which
	// evict takes first.
	in.lastCall = time.Now()
	if !oneShot {
		e.instances.add(in)
	}
	in.mu.Lock()
	in.idle = time.AfterFunc(e.instances.idle, in.evict)
	in.mu.Unlock()
	return in, nil
}

// start builds the store and runs the instance's initialisation. On error
// everything it built is freed.
func (in *Instance) start(ctx context.Context, req InstanceRequest, plugin bool) (err error) {
	e, m := in.e, in.module
	runReq := Request{Module: m, Limits: req.Limits, Capabilities: req.Capabilities, Output: req.Output}
	r := &run{req: runReq, module: m, random: splitmix64{req.Capabilities.Seed}}
	in.r = r
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	instances := int64(req.Limits.Instances)
	memories := int64(req.Limits.Memories)
	if plugin {
		in.plugin = newPluginState(in, maps.Clone(req.Config), req.VarBytes)
		r.plugin = in.plugin
		instances++ // the kernel
		memories++  // the kernel's memory
	}
	if req.Capabilities.WASI != nil {
		w, err := e.prepareWASI(ctx, &runReq)
		if err != nil {
			return err
		}
		r.wasi = w
		instances++ // the poll_oneoff helper (wasi.go)
	}
	if r.slots, err = e.takeSlots(ctx, m.info, plugin, r.wasi != nil, req.Limits.TableElements, !in.oneShot); err != nil {
		return err
	}
	r.store = wasmtime.NewStore(e.wt)
	l := req.Limits
	r.store.Limiter(int64(l.MemoryBytes), int64(l.TableElements), instances, -1, memories)
	if r.wasi != nil {
		if err := r.wasi.attach(r.store); err != nil {
			return err
		}
	}
	f, ferr := installFence(r.store, l.Timeout)
	if ferr != nil {
		return &Error{Kind: KindHost, Message: ferr.Error(), err: ferr}
	}
	r.fence = f
	res, _, err := in.fenced(ctx, "instantiation", CallRequest{Log: req.Log, Output: req.Output}, in.callLimits(CallLimits{}), func() ([]Value, error) {
		return nil, in.instantiate()
	})
	if res != nil {
		in.boot = *res
	}
	return err
}

// instantiate links and instantiates the module, sets the in-module caps,
// then runs the start function and _initialize. Inside fenced.
func (in *Instance) instantiate() error {
	r := in.r
	if in.plugin != nil {
		if err := in.plugin.instantiateKernel(r.store); err != nil {
			return err
		}
	}
	var inst *wasmtime.Instance
	var err error
	if r.wasi != nil {
		inst, err = r.instantiateWASI()
	} else {
		inst, err = wasmtime.NewInstance(r.store, r.module.wt, r.hostImports())
	}
	if err != nil {
		return err
	}
	r.instance = inst
	info := r.module.info
	if info.GrowsMemory || info.GrowsTable {
		r.setGlobal(wasmbin.ExportMemCapBytes, int64(in.guestCap()))
	}
	if info.GrowsTable {
		r.setGlobal(wasmbin.ExportTableCap, int64(in.limits.TableElements))
	}
	in.bindExports()
	if info.HasStart {
		if _, err := inst.GetFunc(r.store, wasmbin.ExportStart).Call(r.store); err != nil {
			return err
		}
	}
	if exp, ok := r.module.Export(InitializeExport); ok && exp.Kind == "func" && len(exp.Params) == 0 && len(exp.Results) == 0 {
		if _, err := inst.GetFunc(r.store, InitializeExport).Call(r.store); err != nil {
			return err
		}
	}
	return nil
}

// guestCap is the byte cap of the module's own memories and tables: the
// instance's cap less what the plugin kernel holds.
func (in *Instance) guestCap() uint64 {
	if in.plugin == nil {
		return in.limits.MemoryBytes
	}
	return in.limits.MemoryBytes - in.plugin.kernelBytes
}

func (in *Instance) callLimits(cl CallLimits) limits.Limits {
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
	return l
}

// CallOnce instantiates req, makes one call and releases the instance: a
// plugin function (or any export) without a long-lived instance, the
// one-shot path for a run with input.
func (e *Engine) CallOnce(ctx context.Context, req InstanceRequest, call CallRequest) (*CallResult, error) {
	in, err := e.instantiate(ctx, req, true)
	if err != nil {
		return nil, err
	}
	defer in.Release()
	return in.Call(ctx, call)
}

// Call runs one call, after every call that reached Call before it. A
// trap or fence (fuel, timeout, memory, cancellation) closes the instance;
// a plugin error (plugin_error) does not.
func (in *Instance) Call(ctx context.Context, req CallRequest) (*CallResult, error) {
	return in.Enqueue().Call(ctx, req)
}

// Turn is a place in an instance's queue of calls. A server takes turns in
// the order requests arrive and runs them later, on workers.
type Turn struct {
	in      *Instance
	ready   chan struct{} // closed once the verdict is in; nil: granted at once
	verdict bool          // granted (true) or the instance closed; set under in.mu before ready closes
	granted bool          // the turn is held (and not yet handed on)
	used    bool          // Call ran, or Abandon gave the turn back
	err     error
	queued  time.Time
}

// Enqueue takes the next place in the instance's queue. The turn must be
// used by Call or given back with Abandon.
func (in *Instance) Enqueue() *Turn {
	t := &Turn{in: in, queued: time.Now()}
	in.mu.Lock()
	defer in.mu.Unlock()
	switch {
	case in.closed != nil:
		t.err, t.used = in.closed, true
	case !in.busy:
		in.busy, t.granted = true, true // evict sees busy: the idle timer runs on
	default:
		t.ready = make(chan struct{})
		in.waiting = append(in.waiting, t)
	}
	return t
}

// closedChan is a channel that is always ready.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Ready returns a channel that is closed once Call would not wait for the
// turn: the calls before it are done, or the instance closed (Call then
// fails at once). A server waits on it (or polls it) instead of holding a
// worker in Call.
func (t *Turn) Ready() <-chan struct{} {
	if t.ready == nil {
		return closedChan
	}
	return t.ready
}

// grant tells a waiting turn its verdict. Call with in.mu held.
func (t *Turn) grant(ok bool) {
	t.verdict = ok
	close(t.ready)
}

// wait blocks until the turn comes, the instance closes or ctx ends.
func (t *Turn) wait(ctx context.Context) error {
	if t.err != nil || t.granted {
		return t.err
	}
	select {
	case <-t.ready:
		t.granted = t.takeVerdict()
		if !t.granted {
			return t.in.closedErr()
		}
		return nil
	case <-ctx.Done():
		t.Abandon()
		return cancelledError()
	}
}

// Abandon gives the turn back without calling (for a request cancelled
// while queued). After Call, or a second time, it does nothing.
func (t *Turn) Abandon() {
	if t.used {
		return
	}
	t.used = true
	in := t.in
	if t.ready != nil && !t.granted {
		in.mu.Lock()
		for i, w := range in.waiting {
			if w == t {
				in.waiting = append(in.waiting[:i], in.waiting[i+1:]...)
				in.mu.Unlock()
				return
			}
		}
		// No longer waiting, so the verdict is in.
		t.granted = t.verdict
		in.mu.Unlock()
	}
	if t.granted {
		t.granted = false
		in.release()
	}
}

// takeVerdict reads the verdict of a turn whose ready channel closed.
func (t *Turn) takeVerdict() bool {
	t.in.mu.Lock()
	defer t.in.mu.Unlock()
	return t.verdict
}

// Call waits for the turn and runs req.
func (t *Turn) Call(ctx context.Context, req CallRequest) (*CallResult, error) {
	if t.used && t.err == nil {
		return nil, newError(KindHost, "a turn can be used once")
	}
	if err := t.wait(ctx); err != nil {
		t.used = true
		return nil, err
	}
	in := t.in
	t.granted, t.used = false, true
	defer in.release()
	if err := in.closedErr(); err != nil { // closed while this turn was held, unused
		return nil, err
	}
	queued := time.Since(t.queued)
	res, err := in.call(ctx, req)
	if res != nil {
		res.Queued = queued
	}
	return res, err
}

// release hands the turn to the next waiting call, or frees the store when
// the instance closed meanwhile.
func (in *Instance) release() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.cancel = nil
	if in.closed != nil {
		in.busy = false
		in.freeLocked()
		return
	}
	in.lastCall = time.Now()
	if len(in.waiting) > 0 {
		next := in.waiting[0]
		in.waiting = in.waiting[1:]
		next.grant(true)
		return
	}
	in.busy = false // the idle timer, never stopped by a call, sees lastCall
}

func (in *Instance) closedErr() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed == nil {
		return nil
	}
	return in.closed
}

// Release closes the instance: queued calls fail with "released", a call
// in progress is cancelled, and the store is freed once nothing runs.
// Idempotent.
func (in *Instance) Release() { in.shut("released", false) }

// evict is the idle timer's. Calls neither stop nor re-arm the timer (a
// timer armed anew at every call made the Go runtime wake an idle thread
// per call to watch it); it fires at most once per idle period, and
// re-arms itself for the rest of the period when a call ran meanwhile.
func (in *Instance) evict() {
	in.mu.Lock()
	if in.closed != nil {
		in.mu.Unlock()
		return
	}
	if in.busy { // a call's end sets lastCall: look again one period later
		in.idle.Reset(in.e.instances.idle)
		in.mu.Unlock()
		return
	}
	if left := in.e.instances.idle - time.Since(in.lastCall); left > 0 {
		in.idle.Reset(left)
		in.mu.Unlock()
		return
	}
	idleFor := time.Since(in.lastCall).Round(time.Millisecond)
	in.shutLocked(fmt.Sprintf("evicted after %v without a call", idleFor))
	reason := in.closed.Reason
	in.mu.Unlock()
	in.forget(reason, true)
}

// forget takes the instance out of the engine's table (a one-shot
// instance was never in it).
func (in *Instance) forget(reason string, evicted bool) {
	if !in.oneShot {
		in.e.instances.remove(in.id, reason, evicted)
	}
}

// shut closes the instance for reason. The running call, if any, is
// cancelled (unless it is the one closing the instance) and frees the
// store when it ends; otherwise the store is freed now.
func (in *Instance) shut(reason string, evicted bool) {
	in.mu.Lock()
	done := in.closed != nil
	if !done {
		in.shutLocked(reason)
	}
	in.mu.Unlock()
	if !done {
		in.forget(reason, evicted)
	}
}

func (in *Instance) shutLocked(reason string) {
	in.closed = &InstanceClosedError{Instance: in.id, Reason: reason}
	if in.idle != nil {
		in.idle.Stop()
	}
	for _, w := range in.waiting {
		w.grant(false)
	}
	in.waiting = nil
	if in.busy {
		if in.cancel != nil {
			in.cancel()
		}
	} else {
		in.freeLocked()
	}
}

// closeAfter closes the instance from inside its own call, which frees the
// store when it releases the turn.
func (in *Instance) closeAfter(reason string) { in.shut(reason, false) }

func (in *Instance) freeLocked() {
	if in.freed {
		return
	}
	in.freed = true
	in.r.close()
}

// waitFreed waits until the store is freed (Engine.Close).
func (in *Instance) waitFreed() {
	for {
		in.mu.Lock()
		freed := in.freed
		in.mu.Unlock()
		if freed {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// call runs req while holding the turn.
func (in *Instance) call(ctx context.Context, req CallRequest) (*CallResult, error) {
	m := in.module
	if req.Function == "" {
		return nil, &Error{Kind: KindExport, Message: "no function named; the module exports " + funcNames(m)}
	}
	pluginFn := in.plugin != nil && isPluginFunction(m, req.Function)
	if err := checkSignature(m, req.Function, req.Args); err != nil {
		return nil, err
	}
	if req.Input != nil && !pluginFn {
		what := "the module is not an Extism plugin"
		if in.plugin != nil {
			what = protocol.PluginFunctionShape
		}
		return nil, &Error{Kind: KindExport, Function: req.Function,
			Message: fmt.Sprintf("input: %s is not a plugin function (%s)", protocol.Quote(req.Function), what)}
	}
	if err := validCallLimits(req.Limits); err != nil {
		return nil, err
	}
	// An input larger than the whole memory cap can never be held: refuse
	// it before the kernel is touched, so the instance, whose state this
	// call never reached, stays open.
	if n := uint64(len(req.Input)); pluginFn && n > in.limits.MemoryBytes {
		return nil, &Error{Kind: KindMemoryLimitExceeded, Resource: ResourceMemory, Limit: in.limits.MemoryBytes, Requested: n,
			Message: fmt.Sprintf("the input of %d bytes exceeds the plugin's memory cap of %d bytes", n, in.limits.MemoryBytes)}
	}
	l := in.callLimits(req.Limits)
	var output []byte
	var truncated bool
	var exit *guestExit // the plugin function ended in proc_exit
	what := "a call of " + protocol.Quote(req.Function)
	res, closeReason, err := in.fenced(ctx, what, req, l, func() ([]Value, error) {
		r := in.r
		if pluginFn {
			if err := in.plugin.setInput(r.store, req.Input); err != nil {
				return nil, err
			}
		}
		exp, _ := m.Export(req.Function)
		values, err := callFunction(r.store, r.instance, req.Function, req.Args, exp.Results)
		if !pluginFn {
			return values, err
		}
		// The return code: the i32 result, 0 for a function without one
		// (Extism's rule), or the status of a proc_exit, which Extism's
		// SDKs read as the return code (0: success, with the output set so
		// far). A failing exit after a denied growth is the denial's.
		var rc int32
		if err != nil {
			code, exited := wasiExitStatus(err)
			if !exited {
				return nil, err
			}
			exit = &guestExit{code: code}
			if r.exitAfterDenial(code) {
				return nil, exit
			}
			rc = int32(code)
		} else if len(values) == 1 {
			rc = values[0].I32()
		}
		var perr *Error
		output, perr = in.plugin.result(r.store, req.Function, rc, l.OutputBytes)
		if perr != nil {
			if fn := protocol.Quote(req.Function); exit != nil && perr.Message == fmt.Sprintf("plugin function %s returned %d", fn, rc) {
				perr.Message = fmt.Sprintf("plugin function %s exited with status %d", fn, rc)
			}
			return values, perr
		}
		if uint64(len(output)) > l.OutputBytes {
			output, truncated = output[:l.OutputBytes], true
		}
		if exit != nil {
			return values, exit
		}
		return values, nil
	})
	switch {
	case closeReason != "":
	case exit != nil: // a plugin_error by proc_exit: the guest ended itself
		closeReason = fmt.Sprintf("closed after the guest exited with status %d in %s", exit.code, what)
	case pluginFn && req.Function == StartExport && (err == nil || KindOf(err) == KindPluginError):
		// A WASI command's main runs once: after it the runtime may have
		// run its destructors (wasi-libc) or refuse to start again (Go),
		// so the instance is done, as Extism's runtime treats it (it
		// starts the next call on a fresh instance).
		closeReason = fmt.Sprintf("closed after %q ran (a WASI command's main runs once per instance; instantiate again to run it again)", StartExport)
	}
	if closeReason != "" {
		in.closeAfter(closeReason)
	}
	if err != nil {
		return nil, err
	}
	return &CallResult{Result: *res, PluginOutput: output, PluginOutputTruncated: truncated}, nil
}

func validCallLimits(cl CallLimits) error {
	l := limits.Defaults()
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
		return &Error{Kind: KindHost, Message: "limits." + err.Error(), err: err}
	}
	return nil
}

// fenced runs body under a fresh set of per-call fences (fuel, deadline,
// cancellation, log and output budgets) and classifies how it ended. A
// trap or fence closes the instance, naming what (e.g. "closed after
// timeout in a call of \"spin\""); a plugin_error is returned with the
// result and keeps it. what names the activity for that reason.
func (in *Instance) fenced(ctx context.Context, what string, req CallRequest, l limits.Limits, body func() ([]Value, error)) (res *Result, closeReason string, err error) {
	r := in.r
	if ctx.Err() != nil {
		return nil, "", cancelledError()
	}
	r.req.Limits = l
	r.req.Function = req.Function
	r.hostTrap = ""
	logf := req.Log
	r.log = logSink{budget: l.LogBytes}
	if logf != nil {
		r.log.forward = func(line string) { logf("", line) }
	}
	if in.plugin != nil {
		in.plugin.beginCall(logf)
	}
	if r.wasi != nil {
		r.wasi.ctx = ctx
		r.wasi.out.restart(l.OutputBytes, req.Output)
	}
	if err := r.store.SetFuel(l.Fuel); err != nil {
		return nil, "", &Error{Kind: KindHost, Message: "setting fuel: " + cleanMessage(err.Error()), err: err}
	}
	for _, g := range in.denied { // a refusal an earlier call coped with is not this call's
		g.Set(r.store, wasmtime.ValI64(0))
	}
	r.fence.rearm(l.Timeout)
	r.store.SetEpochDeadline(1)
	in.e.ticker.acquire()
	defer in.e.ticker.release()
	f := r.fence
	// Release stops the call through the fence; a WASI guest asleep in
	// poll_oneoff waits on a context, so it gets one that Release cancels.
	stop := f.cancel
	if r.wasi != nil {
		wasiCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		r.wasi.ctx = wasiCtx
		stop = func() { f.cancel(); cancel() }
	}
	in.mu.Lock()
	in.cancel = stop
	released := in.closed != nil // Release came before the cancel func was set
	in.mu.Unlock()
	if released {
		stop()
	}
	cancelDone := make(chan struct{})
	stopWatching := context.AfterFunc(ctx, func() { f.cancel(); close(cancelDone) })
	defer func() {
		if !stopWatching() {
			<-cancelDone
		}
	}()
	r.started = time.Now()

	values, err := body()
	elapsed := time.Since(r.started)
	in.mu.Lock()
	in.cancel = nil
	in.mu.Unlock()
	usage := in.usage()
	res = &Result{Values: values, Usage: usage, Elapsed: elapsed, LogLines: r.log.lines, LogTruncated: r.log.truncated,
		Output: r.wasi.output()}
	var pe *Error
	if errors.As(err, &pe) && pe.Kind == KindPluginError {
		pe.Usage = &usage
		return res, "", pe
	}
	exitCode, exited := wasiExitStatus(err)
	if err != nil && (!exited || r.exitAfterDenial(exitCode)) {
		se := in.classify(err)
		se.Usage = &usage
		se.Output = r.wasi.output()
		releaseWasmtimeError(err)
		return nil, fmt.Sprintf("closed after %s in %s", se.Kind, what), se
	}
	if exited { // the guest ended itself: its state is final
		res.ExitCode = exitCode
		return res, fmt.Sprintf("closed after the guest exited with status %d in %s", exitCode, what), nil
	}
	return res, "", nil
}

// classify adds what only an instance knows (the plugin kernel's memory
// and the plugin host functions' own refusals) to the run's verdict.
func (in *Instance) classify(err error) *Error {
	r := in.r
	if r.fence.reason() == stopCancelled {
		return cancelledError()
	}
	if p := in.plugin; p != nil {
		if p.denied > 0 {
			l := in.limits
			return &Error{Kind: KindMemoryLimitExceeded, Resource: ResourceMemory, Limit: l.MemoryBytes, Requested: p.denied,
				Message: fmt.Sprintf("memory growth to %d bytes denied: the cap is %d bytes (the plugin's memories, tables and kernel memory together)", p.denied, l.MemoryBytes)}
		}
		if p.trap != nil {
			return p.trap
		}
	}
	return r.classify(err)
}

// restart readies a WASI output sink for an instance's next call. Only
// between calls.
func (s *outputSink) restart(budget uint64, forward func(stream string, data []byte)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reset(budget, forward)
}

// bindExports looks up, once, what every call reads or resets: the
// rewriter's refusal globals and every memory and table (the sum the cap
// bounds).
func (in *Instance) bindExports() {
	r := in.r
	info := r.module.info
	global := func(name string) {
		if ext := r.instance.GetExport(r.store, name); ext != nil && ext.Global() != nil {
			in.denied = append(in.denied, ext.Global())
		}
	}
	if info.GrowsMemory || info.GrowsTable {
		global(wasmbin.ExportMemDeniedBytes)
	}
	if info.GrowsTable {
		global(wasmbin.ExportTableDenied)
	}
	for i := 0; i < info.ImportedMemories+len(info.Memories); i++ {
		if ext := r.instance.GetExport(r.store, wasmbin.MemoryExportName(i)); ext != nil && ext.Memory() != nil {
			in.mems = append(in.mems, ext.Memory())
		}
	}
	for i := 0; i < info.ImportedTables+len(info.Tables); i++ {
		if ext := r.instance.GetExport(r.store, wasmbin.TableExportName(i)); ext != nil && ext.Table() != nil {
			in.tables = append(in.tables, ext.Table())
			in.elem = append(in.elem, r.module.tableElemBytes(i))
		}
	}
}

// guestBytes is what the module's memories and tables hold now (never
// shrinking, so also their peak), as the cap counts it.
func (in *Instance) guestBytes(s wasmtime.Storelike) uint64 {
	var n uint64
	for _, m := range in.mems {
		n += uint64(m.DataSize(s))
	}
	for i, t := range in.tables {
		n += t.Size(s) * in.elem[i]
	}
	return n
}

// usage is the call's fuel and the instance's memory, kernel included.
func (in *Instance) usage() Usage {
	r := in.r
	var u Usage
	if left, err := r.store.GetFuel(); err == nil {
		u.FuelConsumed = r.req.Limits.Fuel - left
	}
	if r.instance == nil {
		return r.usage()
	}
	u.PeakMemoryBytes = in.guestBytes(r.store)
	if in.plugin != nil {
		u.PeakMemoryBytes += in.plugin.kernelBytes
	}
	return u
}
