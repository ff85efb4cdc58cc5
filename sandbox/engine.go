package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/limits"
)

// WasmtimeVersion is the version of the wasmtime-go module this package is
// built and tested against (capi_test.go checks the build matches).
const WasmtimeVersion = "v39.0.1"

// Config configures an Engine. The zero value is valid: every zero field
// takes the documented default.
type Config struct {
	// Tick is the period of the global epoch ticker, the granularity of
	// deadlines and cancellation. Default 1ms. A guest overshoots its
	// deadline by at most one tick plus scheduling delay.
	Tick time.Duration
	// CacheEntries bounds the compiled-module cache by count. Default
	// 256; CacheOff (any negative value) keeps no module, so every
	// source is compiled and ids are never known.
	CacheEntries int
	// CacheBytes bounds the cache by the summed compiled size of its
	// modules (Module.CompiledSize, the length of wasmtime's serialized
	// form) plus the texts and binaries each is known by (cache.go).
	// Default 512 MiB.
	CacheBytes int64
	// CacheDir, if set, keeps every compiled module in that directory too,
	// so a restarted process loads modules it compiled before instead of
	// compiling them. The files are machine code the engine loads, so
	// NewEngine refuses a directory that is not trusted (trusted.go: it
	// and each directory above it owned by the process's user or root and
	// not writable by group or others, a parent may be sticky like /tmp),
	// and a file in it that is not a regular file owned by that user or
	// root and writable only by its owner is not loaded: the module is
	// compiled again and the file replaced.
	CacheDir string
	// MaxModuleBytes bounds the size of a module's bytes (wasm or WAT, and
	// the wasm a WAT text becomes). Default 64 MiB.
	MaxModuleBytes int
	// CompileTimeout and CompileMemoryBytes are the compile limits of a
	// Source that sets none. Defaults limits.DefaultCompileTimeout and
	// limits.DefaultCompileMemoryBytes.
	CompileTimeout     time.Duration
	CompileMemoryBytes uint64
	// MaxCompiles bounds the compiles running at once, each a child
	// process on one core; more wait (cancellably) for a slot. Default
	// half the CPUs, at least 1, so compiles never take every core from
	// the runs.
	MaxCompiles int
	// ModulePathDirs, if not empty, restricts Source.Path to files inside
	// these directories (symlinks resolved, on the opened file). Empty:
	// any regular file the process can read, as for the CLI.
	ModulePathDirs []string
	// WASIDirs are the host directories a WASI run may preopen, each with
	// everything under it (serve --allow-dir). None by default.
	WASIDirs []string
	// MaxOpenFiles bounds the host descriptors one WASI store holds: its
	// preopens and the files and directories its guest has open (past
	// it, path_open answers EMFILE). Default DefaultMaxOpenFiles. All
	// guests together hold at most the process's RLIMIT_NOFILE less a
	// reserve for the sidecar's own work (a quarter, at least 256; past
	// it ENFILE).
	MaxOpenFiles int
	// MaxInstances bounds the live long-lived instances (instance.go).
	// Default DefaultMaxInstances.
	MaxInstances int
	// InstanceIdle is how long an instance may go without a call before
	// it is evicted. Default DefaultInstanceIdle.
	InstanceIdle time.Duration
	// OneShot marks an engine that compiles about one module in its life
	// (the CLI's run and call). It starts a spare compile child when
	// opened, as every engine does, and its first compile uses it (waiting
	// for its start if need be, as every engine's does), but no spare
	// follows: a long-lived engine (serve) keeps one spare ready for the
	// next new module, which a one-shot engine would start only to kill at
	// Close. A later compile starts its own child. Default false. A
	// one-shot engine has no instance pool.
	OneShot bool
	// MaxRuns is how many runs (Run, and one-shot plugin runs) hold a
	// store at once; more wait, cancellably, for one to end. With
	// MaxInstances and Maximums it sizes the instance pool (pool.go).
	// Default DefaultMaxRuns(); the sidecar gives its --max-concurrency.
	MaxRuns int
	// Maximums are the largest limits a run or an instance will ask for
	// (the sidecar's --max-* flags): Memories and TableElements size the
	// pool. A run whose store needs more than its share of the pool, or
	// more table elements than max(TableElements, 10,000,000), is refused.
	// Default limits.DefaultMaximums().
	Maximums limits.Limits
	// KeepResident is how many bytes at the start of each pooled linear
	// memory and table stay resident when a store ends, zeroed in place
	// rather than given back to the kernel and faulted in again by the next
	// store. Default DefaultKeepResident.
	KeepResident uint64
	// NoPool makes every store allocate its memories and tables for
	// itself, as wasmtime does by default. Default false.
	NoPool bool
}

// Documented defaults of Config.
const (
	DefaultTick           = time.Millisecond
	DefaultCacheEntries   = 256
	DefaultCacheBytes     = 512 << 20
	DefaultMaxModuleBytes = 64 << 20
)

// CacheOff as Config.CacheEntries turns the in-memory cache off.
const CacheOff = -1

// DefaultMaxCompiles is the default of Config.MaxCompiles.
func DefaultMaxCompiles() int { return max(1, runtime.NumCPU()/2) }

// DefaultMaxRuns is the default of Config.MaxRuns: four per CPU, at least
// 16.
func DefaultMaxRuns() int { return max(16, 4*runtime.NumCPU()) }

func (c Config) withDefaults() (Config, error) {
	if c.Tick == 0 {
		c.Tick = DefaultTick
	}
	if c.CacheEntries == 0 {
		c.CacheEntries = DefaultCacheEntries
	}
	if c.CacheBytes == 0 {
		c.CacheBytes = DefaultCacheBytes
	}
	if c.MaxModuleBytes == 0 {
		c.MaxModuleBytes = DefaultMaxModuleBytes
	}
	if c.CacheEntries < 0 {
		c.CacheEntries = CacheOff
	}
	if c.CompileTimeout == 0 {
		c.CompileTimeout = limits.DefaultCompileTimeout
	}
	if c.CompileMemoryBytes == 0 {
		c.CompileMemoryBytes = limits.DefaultCompileMemoryBytes
	}
	if c.MaxCompiles == 0 {
		c.MaxCompiles = DefaultMaxCompiles()
	}
	if c.MaxInstances == 0 {
		c.MaxInstances = DefaultMaxInstances
	}
	if c.InstanceIdle == 0 {
		c.InstanceIdle = DefaultInstanceIdle
	}
	if c.MaxOpenFiles == 0 {
		c.MaxOpenFiles = DefaultMaxOpenFiles
	}
	if c.MaxRuns == 0 {
		c.MaxRuns = DefaultMaxRuns()
	}
	if c.Maximums == (limits.Limits{}) {
		c.Maximums = limits.DefaultMaximums()
	}
	if c.KeepResident == 0 {
		c.KeepResident = DefaultKeepResident
	}
	if err := c.Maximums.Validate(limits.HardMaximums()); err != nil {
		return c, fmt.Errorf("maximums: %w", err)
	}
	switch {
	case c.Tick < 100*time.Microsecond || c.Tick > time.Second:
		return c, fmt.Errorf("tick: %v is outside [100µs, 1s]", c.Tick)
	case c.CompileTimeout < 0:
		return c, errors.New("compile timeout: must be >= 0")
	case c.MaxCompiles < 0:
		return c, errors.New("max compiles: must be >= 0")
	case c.CacheBytes < 0:
		return c, errors.New("cache bytes: must be >= 0")
	case c.MaxModuleBytes < 0:
		return c, errors.New("max module bytes: must be >= 0")
	case c.MaxInstances < 0:
		return c, errors.New("max instances: must be >= 0")
	case c.InstanceIdle < 0:
		return c, errors.New("instance idle: must be >= 0")
	case c.MaxOpenFiles < 0:
		return c, errors.New("max open files: must be >= 0")
	case c.MaxRuns < 0:
		return c, errors.New("max runs: must be >= 0")
	case c.KeepResident > 1<<30:
		return c, errors.New("keep resident: must be at most 1 GiB")
	case c.MaxInstances+c.MaxRuns > MaxGuestThreads:
		return c, fmt.Errorf("max instances + max runs (the sidecar's --max-instances + --max-concurrency): %d, at most %d: each may hold an OS thread while its guest runs or waits for its caller, and Go allows 10,000",
			c.MaxInstances+c.MaxRuns, MaxGuestThreads)
	}
	return c, nil
}

// MaxGuestThreads bounds Config.MaxInstances + Config.MaxRuns: a guest
// that runs, sleeps in WASI or waits for the parent's answer to a host
// call holds its OS thread (wasmtime's call of it is a cgo call), and a
// Go program dies past 10,000 threads (red team: 10,500 runs waiting on
// a parent that never answered killed the sidecar).
const MaxGuestThreads = 8192

// Engine compiles and runs modules. It owns one wasmtime engine, the
// compile cache and the epoch ticker. It is safe for concurrent use; every
// Run gets its own store.
type Engine struct {
	cfg      Config
	pathDirs []string // ModulePathDirs, resolved
	wt       *wasmtime.Engine
	cache    *moduleCache
	store    *artefactStore // nil without CacheDir
	// openStored opens the files of CompileStored's stores: nil for
	// openTrustedFile, or a test's.
	openStored   func(path string, uid int) (*os.File, os.FileInfo, error)
	flight       compileFlight
	compileSlots chan struct{} // one token per compile running (MaxCompiles)
	ticker       *epochTicker

	children *childPool // the compile children, a spare among them (compilechild_pool.go)

	stopCompiles     context.CancelFunc
	closeOnce        sync.Once
	compileInProcess bool // tests only (export_test.go): no child process

	wasiRoots []string   // Config.WASIDirs, resolved once (wasi_preopens.go)
	fds       fdBudget   // descriptors held by all guests (wasi_fds.go)
	private   privateDir // the files trees' directory (wasi_preopens.go)

	instances instanceTable // long-lived instances (instance.go)
	kernelMod kernelModule  // the Extism kernel, compiled on first use (extism.go)
	hostTypes hostFuncTypes // the host functions' types (host.go)
	declTypes declaredTypes // the types of the parent's host functions (host_parent.go)

	wasi engineWASI // what WASI stores share: linkers, the shim (wasi_link.go)

	pool   *enginePool // nil: every store allocates for itself (pool.go)
	noPool string      // why there is no pool
	// callers bounds, when there is no pool, the runs that may wait for
	// their caller's answer to a host call (pool.go, takeSlots).
	callers *poolShare
}

// NewEngine builds the wasmtime engine and starts the (idle) ticker.
// Close stops it.
func NewEngine(cfg Config) (*Engine, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	pathDirs, err := resolveDirs(cfg.ModulePathDirs)
	if err != nil {
		return nil, err
	}
	wasiRoots := resolveRoots(cfg.WASIDirs)
	var store *artefactStore
	if cfg.CacheDir != "" {
		if store, err = openArtefactStore(cfg.CacheDir); err != nil {
			return nil, err
		}
		if err := checkOwnTrees(cfg.CacheDir, wasiRoots); err != nil {
			return nil, err
		}
	}
	quietRustBacktraces()
	base, stop := context.WithCancel(context.Background())
	e := &Engine{
		cfg:          cfg,
		pathDirs:     pathDirs,
		wasiRoots:    wasiRoots,
		fds:          fdBudget{limit: guestFDLimit()},
		cache:        newModuleCache(max(cfg.CacheEntries, 0), cfg.CacheBytes),
		store:        store,
		flight:       compileFlight{base: base, calls: map[string]*flightCall{}},
		compileSlots: make(chan struct{}, cfg.MaxCompiles),
		stopCompiles: stop,
	}
	// The first new module need not wait for a process start. The spare
	// starts before the wasmtime engine is built: the child's exec and
	// start-up are the longest part of a cold start's first compile.
	e.children = openChildPool(cfg.OneShot, runtime.NumCPU() > cfg.MaxCompiles+1)
	wcfg := wasmtimeConfig()
	e.usePool(wcfg)
	e.wt = wasmtime.NewEngineWithConfig(wcfg)
	e.ticker = newEpochTicker(e.wt, cfg.Tick)
	e.instances = instanceTable{max: cfg.MaxInstances, idle: cfg.InstanceIdle, live: map[string]*Instance{}}
	return e, nil
}

// Close kills the compiles in flight and waits for them, closes every
// instance (cancelling their calls and waiting for them), ends the compile
// children (returning the first error met doing so) and stops the ticker.
// Runs in flight must have returned. Idempotent.
func (e *Engine) Close() (err error) {
	e.closeOnce.Do(func() {
		e.stopCompiles()
		e.flight.wg.Wait()
		e.instances.closeAll()
		err = e.children.Close()
		e.ticker.close()
		e.removePrivateDir()
	})
	return err
}

// wasmtimeConfig chooses the engine's settings. Each is set explicitly so
// behaviour does not drift with wasmtime's defaults:
//
//   - fuel metering and epoch interruption: two of the three fences;
//   - Cranelift at Speed, as in the original design;
//   - proposals on: the ones toolchains emit today and that our memory.grow
//     instrumentation decodes — bulk memory, reference types, multi-value,
//     SIMD, tail calls and multi-memory (bounded per run by the memories
//     limit);
//   - proposals off: threads/shared memory (a second thread would escape the
//     per-store fences), memory64 (the caps and the host ABI assume 32-bit
//     addresses), relaxed SIMD (its results differ across hosts), GC and
//     function references (a GC heap is outside the memory cap) and wide
//     arithmetic (not decoded by the instrumentation);
//   - NaN canonicalisation off, so NaN payloads survive bit-exactly;
//   - parallel compilation off: a compile child uses one core, and
//     Config.MaxCompiles bounds how many run at once;
//   - each linear memory reserves 4 GiB of address space and a 32 MiB
//     guard (the bounds checks Cranelift can drop follow from them), and
//     a module's data is mapped copy-on-write from an image rather than
//     copied in at every instantiation.
//
// The compile child builds its engine with the same function, so the
// modules it serializes load in the parent's engine. The instance pool
// (pool.go) is set on top of it in the parent only: it does not change
// the compiled code.
func wasmtimeConfig() *wasmtime.Config {
	c := wasmtime.NewConfig()
	setMemoryLayout(c, memoryReservation, memoryGuard)
	c.SetMemoryInitCOWSet(true)
	c.SetParallelCompilation(false)
	c.SetConsumeFuel(true)
	c.SetEpochInterruption(true)
	c.SetCraneliftOptLevel(wasmtime.OptLevelSpeed)
	c.SetCraneliftNanCanonicalization(false)
	c.SetWasmThreads(false)
	c.SetWasmBulkMemory(true)
	c.SetWasmReferenceTypes(true)
	c.SetWasmMultiValue(true)
	c.SetWasmSIMD(true)
	c.SetWasmRelaxedSIMD(false)
	c.SetWasmTailCall(true)
	c.SetWasmMultiMemory(true)
	c.SetWasmMemory64(false)
	c.SetWasmFunctionReferences(false)
	c.SetWasmGC(false)
	c.SetWasmWideArithmetic(false)
	return c
}

// quietRustBacktraces keeps Rust backtraces away from users. wasmtime
// captures one for every error it creates when RUST_LIB_BACKTRACE (or,
// failing it, RUST_BACKTRACE) asks: slow (it would tax every trap), and
// the text must never reach a user; cleanMessage strips any that remain.
// An operator who set RUST_LIB_BACKTRACE explicitly keeps that choice. A
// panic inside wasmtime (a bug: it aborts the process) prints its message
// to stderr, and with RUST_BACKTRACE set also the host's stack; stderr is
// the parent's, so that is always off. Rust reads both once, at first
// use, so this runs once, before the first engine is made (never while
// another thread may be reading the environment).
var quietRustBacktraces = sync.OnceFunc(func() {
	if _, set := os.LookupEnv("RUST_LIB_BACKTRACE"); !set {
		os.Setenv("RUST_LIB_BACKTRACE", "0")
	}
	os.Setenv("RUST_BACKTRACE", "0")
})

// epochTicker increments the engine's epoch every period while at least one
// run is in flight. It is one timer, armed by the first run in flight and
// re-armed from its own callback only while runs remain: an idle engine
// has no timer and makes no wake-ups. The last run out leaves the timer
// armed, and its next tick disarms it: stopping it at every release and
// arming it again at the next run made the Go runtime wake an idle thread
// to watch the new timer, once per run; now back-to-back short runs arm
// it at most once per period. Each store's epoch callback (capi.go) turns
// ticks into its own deadline and cancellation checks.
type epochTicker struct {
	engine *wasmtime.Engine
	period time.Duration

	mu     sync.Mutex
	active int
	armed  bool // the timer is pending or its callback is running
	closed bool
	timer  *time.Timer
	ticks  atomic.Uint64 // for tests and diagnostics
}

func newEpochTicker(engine *wasmtime.Engine, period time.Duration) *epochTicker {
	t := &epochTicker{engine: engine, period: period}
	t.timer = time.AfterFunc(time.Hour, t.tick)
	t.timer.Stop()
	return t
}

// acquire marks a run in flight; release ends it.
func (t *epochTicker) acquire() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.active++
	if !t.armed && !t.closed {
		t.armed = true
		t.timer.Reset(t.period)
	}
}

func (t *epochTicker) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.active-- // with none left, the next tick disarms the timer
}

// tick runs on the timer's goroutine.
func (t *epochTicker) tick() {
	t.engine.IncrementEpoch()
	t.ticks.Add(1)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.active > 0 && !t.closed {
		t.timer.Reset(t.period)
		return
	}
	t.armed = false
}

// close stops the ticker for good. Runs in flight must have returned.
func (t *epochTicker) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	t.timer.Stop()
}

// describeFuncType renders a signature as "(i32, i32) -> (i64)".
func describeFuncType(params, results []string) string {
	return "(" + strings.Join(params, ", ") + ") -> (" + strings.Join(results, ", ") + ")"
}
