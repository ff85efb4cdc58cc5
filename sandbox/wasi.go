package sandbox

// WASI preview1 guests. The implementation is wasmtime's own (it passes
// the official test suite), configured so that the guest sees exactly what
// the run grants: its arguments and environment, stdin as bytes, stdout and
// stderr streamed to the caller through capi.go, in-memory read-only files
// and operator-allowed directories, and nothing else. Two functions are
// ours: poll_oneoff, because wasmtime's sleeps without looking at the
// run's deadline or cancellation and keeps every subscription until the
// run ends, and random_get (wasi_fuel.go); the calls whose work the guest
// pays for are forwarded to wasmtime's (wasi_fuel.go).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/cgo"
	"sort"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox/internal/wasmbin"
)

// WASI grants WASI preview1 to a run: the protocol's grant, as it is.
type WASI = protocol.WASI

// Dir is a host directory preopened for a WASI guest.
type Dir = protocol.Dir

// Output is what a WASI guest wrote to stdout and stderr, each at most
// limits.OutputBytes (Truncated says whether anything was dropped).
type Output struct {
	Stdout    []byte
	Stderr    []byte
	Truncated bool
}

// The stream names of Request.Output.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// GrantError is a WASI grant the engine refuses before any store exists
// (protocol.WASI.Check's problems, and a directory that is not an allowed,
// existing one). The sidecar answers it as invalid params (-32602).
type GrantError = protocol.GrantError

// wasiRun is the WASI state of one run.
type wasiRun struct {
	ctx    context.Context
	grant  *WASI
	argv   []string
	envK   []string
	envV   []string
	root   string    // private tree holding the files, removed at close; "" without files
	tree   *preopen  // root, opened; nil without files (wasi_preopens.go)
	dirs   []preopen // the grant's dirs, opened and checked
	seeded bool      // random_get follows the run's seed

	fds      descriptors // host descriptors held (wasi_fds.go)
	out      *outputSink
	handle   cgo.Handle
	monoBase time.Time // wasmtime's monotonic zero, give or take microseconds

	// What the fuel fence needs (wasi_fuel.go).
	engine         *Engine
	mem            *wasmtime.Memory   // the guest's "memory", once looked up
	argvBytes      uint64             // args_get's copy: every argument and its NUL
	envBytes       uint64             // environ_get's: every "K=V" and its NUL
	argvEntries    uint64             // how many arguments, argv[0] included
	envEntries     uint64             // how many "K=V"
	stdioMoved     [3]bool            // fd 1 or 2 no longer the guest's stdout or stderr (stdioWrite)
	longestPreopen uint64             // the longest preopened guest path
	shim           *wasmtime.Instance // forwards to wasmtime's functions; made on first use
}

// prepareWASI validates the grant of a store of m and lays out its files.
// No store exists yet. The caller closes the result.
func (e *Engine) prepareWASI(ctx context.Context, m *Module, caps Capabilities, l limits.Limits) (*wasiRun, error) {
	g := caps.WASI
	if err := g.Check(); err != nil {
		return nil, err
	}
	w := &wasiRun{ctx: ctx, grant: g, seeded: caps.Random, engine: e}
	w.out = newOutputSink(l.OutputBytes, nil) // each call gives its own receiver (store.call)
	argv0 := g.Argv0
	if argv0 == "" {
		argv0 = m.ID
	}
	w.argv = append([]string{argv0}, g.Args...)
	w.argvEntries, w.envEntries = uint64(len(w.argv)), uint64(len(g.Env))
	for _, a := range w.argv {
		w.argvBytes += uint64(len(a)) + 1
	}
	keys := make([]string, 0, len(g.Env))
	for k := range g.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		w.envK, w.envV = append(w.envK, k), append(w.envV, g.Env[k])
		w.envBytes += uint64(len(k)+len(g.Env[k])) + 2
	}
	preopens := len(g.Dirs)
	if len(g.Files) > 0 {
		preopens++ // the files tree
	}
	if preopens > e.cfg.MaxOpenFiles {
		return nil, &GrantError{Field: protocol.WASIField + ".dirs",
			Problem: fmt.Sprintf("%d preopens (the dirs and the files tree) are more than this sidecar's store may hold open: %d (--max-open-files)", preopens, e.cfg.MaxOpenFiles)}
	}
	for i, d := range g.Dirs {
		f, err := e.openGrantedDir(d.Host)
		if err != nil {
			w.close()
			return nil, &GrantError{Field: fmt.Sprintf("%s.dirs[%d].host", protocol.WASIField, i), Problem: err.Error()}
		}
		w.dirs = append(w.dirs, preopen{f: f, guest: d.Guest, writable: d.Writable})
		w.longestPreopen = max(w.longestPreopen, uint64(len(d.Guest)))
	}
	if len(g.Files) > 0 {
		if err := w.layOutFiles(g.Files, l); err != nil {
			w.close()
			return nil, err
		}
	}
	return w, nil
}

// attach configures store's WASI context.
func (w *wasiRun) attach(store *wasmtime.Store) error {
	cfg := wasmtime.NewWasiConfig()
	defer cfg.Close() // a no-op once SetWasi consumed it
	cfg.SetArgv(w.argv)
	cfg.SetEnv(w.envK, w.envV)
	w.handle = cgo.NewHandle(wasiSink(w.out))
	setWasiStdio(cfg, w.grant.Stdin, w.handle)
	// wasmtime opens each preopen at once, through the descriptor opened
	// and checked before (wasi_preopens.go); ours is closed after.
	if w.tree != nil {
		err := cfg.PreopenDir(w.tree.procPath(), "/", wasmtime.DIR_READ, wasmtime.FILE_READ)
		w.tree.close()
		if err != nil {
			return &Error{Kind: KindHost, Message: "preopening the files tree failed"}
		}
	}
	for i := range w.dirs {
		d := &w.dirs[i]
		dp, fp := wasmtime.DIR_READ, wasmtime.FILE_READ
		if d.writable {
			dp, fp = dp|wasmtime.DIR_WRITE, fp|wasmtime.FILE_WRITE
		}
		err := cfg.PreopenDir(d.procPath(), d.guest, dp, fp)
		d.close()
		if err != nil {
			return &Error{Kind: KindHost, Message: fmt.Sprintf("preopening %s at %s failed", protocol.Quote(w.grant.Dirs[i].Host), protocol.Quote(d.guest))}
		}
	}
	preopens := len(w.dirs)
	if w.tree != nil {
		preopens++
	}
	w.fds = descriptors{budget: &w.engine.fds, max: int64(w.engine.cfg.MaxOpenFiles)}
	if !w.fds.preopened(preopens) {
		return &Error{Kind: KindHost, Message: "the sidecar's guests hold as many open files as it allows (RLIMIT_NOFILE less its reserve); try again when runs have ended"}
	}
	store.SetWasi(cfg)
	// wasmtime has its own copies now: an instance keeps none of ours for
	// its life (HostBytes counts wasmtime's against the memory cap).
	w.grant, w.argv, w.envK, w.envV = nil, nil, nil, nil
	// wasmtime's monotonic clock starts when SetWasi builds the context;
	// reading ours just after puts our zero a few µs later, so an absolute
	// monotonic sleep ends at or just after the guest's target.
	w.monoBase = time.Now()
	return nil
}

// close frees what the run held. Call after the store has been closed.
func (w *wasiRun) close() {
	if w == nil {
		return
	}
	w.out.finish()
	if w.handle != 0 {
		w.handle.Delete()
		w.handle = 0
	}
	w.fds.release()
	if w.tree != nil {
		w.tree.close()
	}
	for i := range w.dirs {
		w.dirs[i].close()
	}
	if w.root != "" {
		os.RemoveAll(w.root)
		w.root = ""
	}
}

// instantiate links the module with wasmtime's WASI, our poll_oneoff and
// random_get and the fuel fence's shadows (wasi_fuel.go) shadowing
// wasmtime's, and the granted host functions.
func (s *store) instantiateWASI() (*wasmtime.Instance, error) {
	linker := wasmtime.NewLinker(s.wt.Engine)
	defer linker.Close()
	if err := linker.DefineWasi(); err != nil {
		return nil, err
	}
	linker.AllowShadowing(true)
	i32 := wasmtime.NewValType(wasmtime.KindI32)
	poll := wasmtime.NewFuncType([]*wasmtime.ValType{i32, i32, i32, i32}, []*wasmtime.ValType{i32})
	if err := linker.FuncNew(WASIModule, "poll_oneoff", poll, s.guarded(WASIModule+"::poll_oneoff", s.pollOneoff)); err != nil {
		return nil, err
	}
	rnd := wasmtime.NewFuncType([]*wasmtime.ValType{i32, i32}, []*wasmtime.ValType{i32})
	if err := linker.FuncNew(WASIModule, "random_get", rnd, s.guarded(WASIModule+"::random_get", s.randomGet)); err != nil {
		return nil, err
	}
	if err := s.linkShadows(linker); err != nil {
		return nil, err
	}
	var host []Import
	for _, imp := range s.module.Imports {
		if imp.Module != WASIModule {
			host = append(host, imp)
		}
	}
	if len(host) > 0 {
		externs := s.hostImports(host)
		for i, imp := range host {
			if err := linker.Define(s.wt, imp.Module, imp.Name, externs[i]); err != nil {
				return nil, err
			}
		}
	}
	return linker.Instantiate(s.wt, s.module.wt)
}

// guestExit is a proc_exit whose status was already read from wasmtime's
// error (which reading frees), passed on as a plain Go error.
type guestExit struct{ code int }

func (e *guestExit) Error() string { return fmt.Sprintf("the guest exited with status %d", e.code) }

// wasiExitStatus reports whether err is the guest's proc_exit, and its
// status. It frees wasmtime's error when it is one.
func wasiExitStatus(err error) (int, bool) {
	var ge *guestExit
	if errors.As(err, &ge) {
		return ge.code, true
	}
	var werr *wasmtime.Error
	if errors.As(err, &werr) {
		if code, ok := werr.ExitStatus(); ok {
			werr.Close()
			return int(code), true
		}
	}
	return 0, false
}

// exitAfterDenial says whether a guest that exited with code did so because
// a memory or table growth was denied: a failing exit after a denial is
// reported as memory_limit_exceeded (with the output), as a trap after one
// is. A guest that coped and exited 0 has a result.
func (s *store) exitAfterDenial(code int) bool {
	info := s.module.info
	return code != 0 && (s.getGlobalIf(info.GrowsMemory || info.GrowsTable, wasmbin.ExportMemDeniedBytes) > 0 ||
		s.getGlobalIf(info.GrowsTable, wasmbin.ExportTableDenied) > 0)
}

// output ends the run's output (forwarding what is pending) and returns
// what the guest wrote, or nil for a run without WASI.
func (w *wasiRun) output() *Output {
	if w == nil {
		return nil
	}
	return w.out.finish()
}

// preview1 constants used by our functions.
const (
	errnoSuccess = 0
	errnoFault   = 21
	errnoInval   = 28

	subscriptionSize = 48
	eventSize        = 32
	eventClock       = 0
	clockRealtime    = 0
	clockMonotonic   = 1
	subAbstime       = 1
)

func errno(n int32) ([]wasmtime.Val, *wasmtime.Trap) {
	return []wasmtime.Val{wasmtime.ValI32(n)}, nil
}

// memory is the bytes of the guest's exported "memory", as WASI requires
// (nil without one). The export is looked up once: a guest's memories
// never change.
func (w *wasiRun) memory(c *wasmtime.Caller) []byte {
	if w.mem == nil {
		ext := c.GetExport("memory")
		if ext == nil || ext.Memory() == nil {
			return nil
		}
		w.mem = ext.Memory()
	}
	return w.mem.UnsafeData(c)
}

func inBounds(mem []byte, ptr, n uint64) bool { return ptr+n <= uint64(len(mem)) }

// pollOneoff is preview1's poll_oneoff. When every subscription is a
// realtime or monotonic clock it sleeps here, until the earliest one is
// due, the run's deadline passes or the run is cancelled, whichever comes
// first; in the last two cases the guest is stopped as the epoch fence
// would stop it. Subscriptions on descriptors are answered at once
// (pollDescriptors): every descriptor a run can have (stdin bytes, the
// output streams, files) is always ready, so nothing waits.
func (s *store) pollOneoff(c *wasmtime.Caller, args []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	in, out := uint64(uint32(args[0].I32())), uint64(uint32(args[1].I32()))
	n, neventsPtr := uint64(uint32(args[2].I32())), uint64(uint32(args[3].I32()))
	mem := s.wasi.memory(c)
	if n == 0 || n > maxSubscriptions || in%8 != 0 || out%8 != 0 || neventsPtr%4 != 0 { // wasmtime's checks too, and our bound
		return errno(errnoInval)
	}
	if !inBounds(mem, in, n*subscriptionSize) || !inBounds(mem, out, n*eventSize) || !inBounds(mem, neventsPtr, 4) {
		return errno(errnoFault)
	}
	if !consumeFuel(c, n*subscriptionFuel) {
		return nil, fuelTrap()
	}
	// Two passes over the guest's subscriptions, nothing allocated per
	// subscription (there may be millions): find the earliest, sleep, then
	// report every clock that is due.
	now := time.Now()
	due := func(mem []byte, i uint64) (userdata uint64, at time.Time, clock bool) {
		return s.clockDue(mem[in+i*subscriptionSize:][:subscriptionSize], now)
	}
	var earliest time.Time
	for i := uint64(0); i < n; i++ {
		_, at, clock := due(mem, i)
		if !clock {
			return s.pollDescriptors(c, in, out, n, neventsPtr, now)
		}
		if i == 0 || at.Before(earliest) {
			earliest = at
		}
	}
	if time.Until(earliest) >= time.Millisecond {
		s.wasi.out.flush() // what the guest wrote before sleeping is seen now
	}
	if stop := s.sleepUntil(earliest); stop != stopNone {
		return nil, s.stopGuest(stop)
	}
	mem = s.wasi.memory(c) // the same memory: the guest could not run meanwhile
	woke := time.Now()
	var events uint32
	for i := uint64(0); i < n; i++ {
		userdata, at, _ := due(mem, i)
		if at.After(woke) && !at.Equal(earliest) {
			continue
		}
		ev := mem[out+uint64(events)*eventSize:][:eventSize]
		clear(ev)
		binary.LittleEndian.PutUint64(ev, userdata)
		ev[10] = eventClock
		events++
	}
	binary.LittleEndian.PutUint32(mem[neventsPtr:], events)
	return errno(errnoSuccess)
}

// clockDue reads subscription s: when it is a realtime or monotonic clock,
// its userdata and when it is due, measured from now.
func (s *store) clockDue(sub []byte, now time.Time) (userdata uint64, at time.Time, clock bool) {
	id := binary.LittleEndian.Uint32(sub[16:])
	if sub[8] != eventClock || (id != clockRealtime && id != clockMonotonic) {
		return 0, time.Time{}, false
	}
	timeout := binary.LittleEndian.Uint64(sub[24:])
	switch flags := binary.LittleEndian.Uint16(sub[40:]); {
	case flags&subAbstime == 0:
		at = addNanos(now, timeout)
	case id == clockRealtime:
		at = now.Add(time.Unix(0, int64(min(timeout, math.MaxInt64))).Sub(now))
	default:
		at = addNanos(s.wasi.monoBase, timeout)
	}
	return binary.LittleEndian.Uint64(sub), at, true
}

// addNanos is t + ns, saturating far in the future.
func addNanos(t time.Time, ns uint64) time.Time {
	if ns > math.MaxInt64 {
		ns = math.MaxInt64
	}
	return t.Add(time.Duration(ns))
}

// sleepUntil waits until due, the run's deadline or its cancellation, and
// says which stopped it (stopNone: due came first).
func (s *store) sleepUntil(due time.Time) stopReason {
	wait := time.Until(due)
	if wait <= 0 {
		return stopNone
	}
	left := s.fence.remaining()
	stop := stopNone
	if left <= wait {
		wait, stop = left, stopTimedOut
	}
	if wait <= 0 {
		return stop
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		// The timer fired at or after the fence's deadline when that was
		// the nearer, so the epoch callback agrees it has passed.
		return stop
	case <-s.wasi.ctx.Done():
		return stopCancelled
	}
}

// entryPoint is the export a request calls: the one named, else a WASI
// command's _start, else "run".
func entryPoint(m *Module, fn string) string {
	if fn != "" {
		return fn
	}
	if e, ok := m.Export("_start"); ok && e.Kind == "func" {
		return "_start"
	}
	return "run"
}
