package sandbox

// WASI preview1 guests. The implementation is wasmtime's own (it passes
// the official test suite), configured so that the guest sees exactly what
// the run grants: its arguments and environment, stdin as bytes, stdout and
// stderr streamed to the caller through capi.go, in-memory read-only files
// and operator-allowed directories, and nothing else. This file is a run's
// WASI state, from the grant to the guest's exit status; the rest is one
// concern a file:
//
//	wasi_imports.go    the preview1 functions, their signatures, the grant check before compiling
//	wasi_link.go       linking a guest: wasmtime's preview1 with ours over it
//	wasi_fuel.go       the fuel fence: prices, the shadowed functions, a shadowed call
//	wasi_shim.go       forwarding a paid call to wasmtime's own function
//	wasi_poll.go       poll_oneoff, ours: sleeps meet the fence, descriptors are ready
//	wasi_random.go     random_get, ours: checked, paid, seeded
//	wasi_stdio.go      fd_write to stdout and stderr, ours
//	wasi_transfer.go   big transfers in slices, the fence checked between them
//	wasi_open.go       path_open: nothing that can block
//	wasi_fds.go        host descriptors counted; fd_close, fd_renumber, fd_sync
//	wasi_preopens.go   the granted directories and the files tree
//	wasi_output.go     the output sink: budgets, coalescing, streaming
//	wasi_errors.go     errnos, and WASI errors that are the guest's traps

import (
	"context"
	"errors"
	"fmt"
	"os"
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
	monoBase time.Time // wasmtime's monotonic zero, give or take microseconds

	// What the fuel fence needs (wasi_fuel.go).
	engine         *Engine
	mem            *wasmtime.Memory   // the guest's "memory", once looked up
	argvBytes      uint64             // args_get's copy: every argument and its NUL
	envBytes       uint64             // environ_get's: every "K=V" and its NUL
	argvEntries    uint64             // how many arguments, argv[0] included
	envEntries     uint64             // how many "K=V"
	stdio          stdioFds           // the descriptors of the guest's stdout and stderr (wasi_stdio.go)
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
	setWasiStdin(cfg, w.grant.Stdin)
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

// output ends the run's output (forwarding what is pending) and returns
// what the guest wrote, or nil for a run without WASI.
func (w *wasiRun) output() *Output {
	if w == nil {
		return nil
	}
	return w.out.finish()
}

// memory is the bytes of the guest's exported "memory", as WASI requires
// (nil without one). The export is looked up once: a guest's memories
// never change.
func (w *wasiRun) memory(c *wasmtime.Caller) []byte {
	if w.mem == nil {
		if w.mem = callerMemory(c, "memory"); w.mem == nil {
			return nil
		}
	}
	return w.mem.UnsafeData(c)
}

func inBounds(mem []byte, ptr, n uint64) bool { return ptr+n <= uint64(len(mem)) }

// u32 is argument i as the unsigned 32-bit value WASI means.
func u32(a []wasmtime.Val, i int) uint64 { return uint64(uint32(a[i].I32())) }

// guestExit is a proc_exit whose status was already read from wasmtime's
// error (which reading frees), passed on as a plain Go error.
type guestExit struct{ code int }

func (e *guestExit) Error() string { return fmt.Sprintf("the guest exited with status %d", e.code) }

// wasiExitStatus reports whether err is the guest's proc_exit, and its
// status. It frees wasmtime's error when it is one.
func wasiExitStatus(err error) (int, bool) {
	if err == nil { // every call asks: spare it errors.As's two allocations
		return 0, false
	}
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
