package sandbox

// The pooling instance allocator (issue 24).
//
// With wasmtime's default allocator every store that instantiates a module
// with a linear memory reserves a 4 GiB region, protects it and unmaps it
// again when the store ends; the unmapping flushes the TLBs of every CPU
// the process runs on. That cost a run of a module with a memory 5–7
// times the whole round trip of one without. The pooling allocator
// reserves the slots of every memory and table the engine can hold at
// once when the engine is built, and a store that ends gives its slots
// back without unmapping anything: the first KeepResident bytes of each
// memory and table are zeroed in place (memset), the rest handed back
// to the kernel (madvise), and a module's data image stays mapped in the
// slots it used (copy-on-write) for its next instance.
//
// The pool has a fixed size, so the engine accounts for it itself: before
// a store exists it takes from the pool exactly what the store can come to
// hold (storeNeed: known from the module and the capabilities), from one
// of two shares. Runs (Run, and a one-shot plugin run) take from the runs'
// share and wait while it is short (until cancelled or their deadline,
// without their caller's run slot: take); long-lived instances take
// from the instances' share and are refused (ErrTooManyInstances) when it
// is short, as when MaxInstances are live. A run that declares host
// functions takes from the instances' share, waiting: it may hold its
// store while its caller answers, and the caller's answer may need a run
// (takeSlots). A store gives back what it took
// after it is closed. Wasmtime itself never finds its pool empty.
//
// Each share holds its count of typical stores (a memory, the plugin
// kernel's, a GC heap; one table) plus room for one store at the largest
// the maximums allow: Config.MaxRuns typical runs (or one fewer and the
// largest), Config.MaxInstances typical instances. Every memory slot is
// 4 GiB of address space plus a 32 MiB guard (memoryReservation,
// memoryGuard: what the compiled code assumes), so the pool's reservation
// is about 4 GiB per memory it can hold: 228 slots, 0.9 TiB, for the
// sidecar's defaults (2 runs, 64 instances, 16 memories per store). Only
// what stores use becomes resident.
//
// The pool is off for a OneShot engine (one store gains nothing from
// reuse), when Config.NoPool says so, and when its address space cannot
// be reserved (a ulimit -v, strict overcommit, more than maxPoolReserve):
// then every store allocates for itself as before, and PoolInfo says why.

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox/internal/wasmbin"
)

// The memory layout the compiled code assumes; both are wasmtime's
// defaults on 64-bit hosts, set explicitly (wasmtimeConfig) so the
// compile child and the sidecar cannot drift apart. A 4 GiB reservation
// lets Cranelift drop the bounds checks of 32-bit memories.
const (
	memoryReservation = 4 << 30
	memoryGuard       = 32 << 20
)

// Pool settings that follow from wasm rather than from the limits.
const (
	// DefaultKeepResident is Config.KeepResident's default: the first 128
	// KiB of each memory and table are zeroed in place when a store ends
	// (a C guest's stack and data, a plugin's memory and the kernel's
	// fit); what lies past them is given back to the kernel.
	DefaultKeepResident = 128 << 10

	// wasmMaxTables and wasmMaxMemories are wasm's own limits per module
	// (wasmparser), and wasmMaxTableMin the largest initial table size:
	// wasmtime checks every module it loads against the pool's per-module
	// limits, so those are set to what wasm allows and the run limits
	// decide (checkStaticCaps), as without a pool.
	wasmMaxTables    = 100
	wasmMaxMemories  = 100
	wasmMaxTableMin  = 10_000_000
	poolInstanceSize = 1 << 30 // a bound on one instance's VMContext; instances live on the heap

	// maxPoolReserve bounds the pool's address space: a quarter of the 128
	// TiB a process has on x86-64 and arm64 Linux.
	maxPoolReserve = 32 << 40

	// warmSlots is how many slots that no store uses keep a module's image
	// mapped for its next instance (wasmtime's max_unused_warm_slots).
	warmSlots = 16
)

// storeNeed is what one store can take from the pool.
type storeNeed struct {
	instances, memories, tables, gcHeaps int
}

func (a storeNeed) plus(b storeNeed) storeNeed {
	return storeNeed{a.instances + b.instances, a.memories + b.memories, a.tables + b.tables, a.gcHeaps + b.gcHeaps}
}

func (a storeNeed) minus(b storeNeed) storeNeed {
	return storeNeed{a.instances - b.instances, a.memories - b.memories, a.tables - b.tables, a.gcHeaps - b.gcHeaps}
}

func (a storeNeed) times(n int) storeNeed {
	return storeNeed{a.instances * n, a.memories * n, a.tables * n, a.gcHeaps * n}
}

// within reports whether a fits in b.
func (a storeNeed) within(b storeNeed) bool {
	return a.instances <= b.instances && a.memories <= b.memories && a.tables <= b.tables && a.gcHeaps <= b.gcHeaps
}

// kernelMemories and kernelTables are the Extism kernel's (extism_kernel.wat);
// the WASI shim defines neither (it imports the guest's memory).
// pool_test.go checks both against the modules.
const (
	kernelMemories = 1
	kernelTables   = 0
)

// needOf is what a store of module info takes: an instance, the memories
// and tables it defines, the kernel's with a plugin, the shim instance with
// WASI, and one memory and GC heap for the GC heap wasmtime makes for a
// module that uses externref (counted for every store: which modules do
// is wasmtime's decision, made per function).
func needOf(info *wasmbin.Info, plugin, wasi bool) storeNeed {
	n := storeNeed{instances: 1, memories: len(info.Memories) + 1, tables: len(info.Tables), gcHeaps: 1}
	if plugin {
		n.instances++
		n.memories += kernelMemories
		n.tables += kernelTables
	}
	if wasi {
		n.instances++
	}
	return n
}

// typicalStore is the unit the shares are sized in: a plugin with WASI
// and one memory and table of its own.
var typicalStore = storeNeed{instances: 3, memories: 3, tables: 1, gcHeaps: 1}

// largestStore is the most one store can take under max.
func largestStore(max limits.Limits) storeNeed {
	return storeNeed{instances: 3, memories: int(min(max.Memories, wasmMaxMemories)) + 2, tables: wasmMaxTables + kernelTables, gcHeaps: 1}
}

// shareSize is a share for n typical stores, or n-1 and the largest.
func shareSize(n int, max limits.Limits) storeNeed {
	return typicalStore.times(n).plus(largestStore(max).minus(typicalStore))
}

// ErrInstancePoolShort is the refusal of an instance that the instances'
// share of the pool has no room for, with fewer than MaxInstances live. It
// is an ErrTooManyInstances too.
var ErrInstancePoolShort = fmt.Errorf("%w: the instances' share of the engine's pool is short", ErrTooManyInstances)

// poolShare is the part of the pool that runs, or instances, take from.
type poolShare struct {
	name string // "runs" or "instances", for messages
	// holders says who holds it, for a timeout's message.
	holders string

	mu      sync.Mutex
	size    storeNeed
	used    storeNeed
	waiting []*poolWaiter // in arrival order: a large need is not overtaken for ever
}

type poolWaiter struct {
	need  storeNeed
	ready chan struct{} // closed once need was taken for the waiter
}

// take takes need from the share. With wait it waits for it while the
// share is short, until ctx ends (cancelled) or for at most deadline (a
// timeout saying it waited for the pool), and reports how long it
// waited; without, a short share is an error. It waits through the
// protocol.SlotYield ctx carries: a caller that holds a run slot gives it
// back meanwhile, since the stores it waits for may belong to runs that
// need a slot to finish (a run that declares hostFunctions holds its
// store, without a slot, while its parent answers).
func (s *poolShare) take(ctx context.Context, need storeNeed, wait bool, deadline time.Duration) (time.Duration, error) {
	s.mu.Lock()
	if !need.within(s.size) {
		s.mu.Unlock()
		return 0, &Error{Kind: KindHost, Message: fmt.Sprintf("a store of this module needs %s, more than the engine's pool holds for %s (%s)",
			describeNeed(need), s.name, describeNeed(s.size))}
	}
	if len(s.waiting) == 0 && s.used.plus(need).within(s.size) {
		s.used = s.used.plus(need)
		s.mu.Unlock()
		return 0, nil
	}
	if !wait {
		free, waiting := s.size.minus(s.used), len(s.waiting)
		s.mu.Unlock()
		if waiting > 0 { // room may be free, but it is theirs first
			return 0, &Error{Kind: KindHost, err: ErrInstancePoolShort, Message: fmt.Sprintf(
				"too many instances: runs that declare hostFunctions are waiting for the instances' share of the engine's pool (%d), ahead of this one; release an instance or try again later", waiting)}
		}
		return 0, &Error{Kind: KindHost, err: ErrInstancePoolShort, Message: fmt.Sprintf(
			"too many instances: the instances' share of the engine's pool has %s free, this one needs %s; release one", describeNeed(free), describeNeed(need))}
	}
	w := &poolWaiter{need: need, ready: make(chan struct{})}
	s.waiting = append(s.waiting, w)
	s.mu.Unlock()
	start := time.Now()
	waitCtx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	got := false
	err := protocol.SlotYieldOf(ctx)(waitCtx, func() {
		select {
		case <-w.ready:
			got = true
		case <-waitCtx.Done():
		}
	})
	waited := time.Since(start)
	if got && err == nil {
		return waited, nil
	}
	s.mu.Lock()
	select {
	case <-w.ready: // taken for us meanwhile: give it back
		s.used = s.used.minus(need)
	default:
		for i, o := range s.waiting {
			if o == w {
				s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
				break
			}
		}
	}
	s.wakeLocked()
	ahead := len(s.waiting)
	s.mu.Unlock()
	if ctx.Err() != nil {
		return waited, cancelledError()
	}
	ms := uint64(deadline / time.Millisecond)
	return waited, &Error{Kind: KindTimeout, TimeoutMs: ms, Message: fmt.Sprintf(
		"deadline of %d ms exceeded while waiting for room in the engine's pool (its %s' share, %s; %d more waiting)",
		ms, s.name, s.holders, ahead)}
}

// give returns need, taken by take, once the store holding it is closed.
func (s *poolShare) give(need storeNeed) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.used = s.used.minus(need)
	s.wakeLocked()
}

// wakeLocked hands what is free to the waiters, in order, while the first
// one fits.
func (s *poolShare) wakeLocked() {
	for len(s.waiting) > 0 && s.used.plus(s.waiting[0].need).within(s.size) {
		w := s.waiting[0]
		s.waiting = s.waiting[1:]
		s.used = s.used.plus(w.need)
		close(w.ready)
	}
}

func describeNeed(n storeNeed) string {
	return fmt.Sprintf("%d wasm instances, %d linear memories, %d tables", n.instances, n.memories, n.tables)
}

// poolSlots is what one store took from a share; release gives it back.
// The zero value (no pool) releases nothing.
type poolSlots struct {
	share *poolShare
	need  storeNeed
}

// release gives the slots back. Call it after the store is closed, once.
func (p *poolSlots) release() {
	if p.share != nil {
		p.share.give(p.need)
		p.share = nil
	}
}

// enginePool is the engine's pool: its settings and its two shares.
type enginePool struct {
	settings  poolSettings
	runs      poolShare
	instances poolShare
}

// poolSettings are the wasmtime pooling allocator's settings (setPooling,
// capi.go).
type poolSettings struct {
	instances, memories, tables, gcHeaps      int
	memoriesPerModule, tablesPerModule        int
	warmSlots                                 int
	tableElements, memoryBytes, instanceBytes uint64
	memoryKeepResident, tableKeepResident     uint64
}

// reserveBytes is the address space the pool maps when the engine is
// built: every memory slot with its guard, and every table slot.
func (p poolSettings) reserveBytes() (memories, tables uint64) {
	memories = uint64(p.memories+2) * (memoryReservation + memoryGuard)
	page := uint64(syscall.Getpagesize())
	tables = uint64(p.tables) * ((p.tableElements*8 + page - 1) / page * page)
	return memories, tables
}

// newEnginePool sizes the pool for cfg.
func newEnginePool(cfg Config) *enginePool {
	runs, instances := shareSize(cfg.MaxRuns, cfg.Maximums), shareSize(cfg.MaxInstances, cfg.Maximums)
	total := runs.plus(instances)
	p := &enginePool{
		runs:      poolShare{name: "runs", size: runs, holders: "held by the runs in progress"},
		instances: poolShare{name: "instances", size: instances, holders: "held by live instances and by runs that declare hostFunctions, while their parent answers"},
		settings: poolSettings{
			instances: total.instances, memories: total.memories, tables: total.tables, gcHeaps: total.gcHeaps,
			memoriesPerModule: wasmMaxMemories, tablesPerModule: wasmMaxTables, warmSlots: warmSlots,
			tableElements: max(cfg.Maximums.TableElements, wasmMaxTableMin), memoryBytes: memoryReservation,
			instanceBytes: poolInstanceSize, memoryKeepResident: cfg.KeepResident, tableKeepResident: cfg.KeepResident,
		},
	}
	return p
}

// reserve checks that the pool's address space can be mapped, the way
// wasmtime will map it, and gives it back: wasmtime aborts the process
// when it cannot build its pool, so an engine that could not falls back
// to allocating per store.
func (p poolSettings) reserve() error {
	memories, tables := p.reserveBytes()
	if memories+tables > maxPoolReserve {
		return fmt.Errorf("the pool would reserve %d GiB of address space, more than %d GiB", (memories+tables)>>30, uint64(maxPoolReserve)>>30)
	}
	for _, r := range []struct {
		what  string
		bytes uint64
		prot  int
	}{{"linear memories", memories, syscall.PROT_NONE}, {"tables", tables, syscall.PROT_READ | syscall.PROT_WRITE}} {
		if r.bytes == 0 {
			continue
		}
		b, err := syscall.Mmap(-1, 0, int(r.bytes), r.prot, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
		if err != nil {
			return fmt.Errorf("reserving %d GiB of address space for the %s: %v", r.bytes>>30, r.what, err)
		}
		if err := syscall.Munmap(b); err != nil {
			return fmt.Errorf("unmapping the %s' probe: %v", r.what, err)
		}
	}
	return nil
}

// PoolInfo describes the engine's instance pool.
type PoolInfo struct {
	// Enabled is false when every store allocates for itself; Reason
	// then says why.
	Enabled bool
	Reason  string
	// The pool's size: wasm instances, linear memories (each reserving
	// 4 GiB of address space), tables, and the address space reserved.
	Instances, Memories, Tables int
	ReservedBytes               uint64
	// KeepResident is Config.KeepResident.
	KeepResident uint64
	// RunsInUse and InstancesInUse are the linear memory slots the two
	// shares have handed out; RunsWaiting the runs waiting for the runs'
	// share.
	RunsInUse, InstancesInUse, RunsWaiting int
}

// PoolInfo describes the pool and what is in use.
func (e *Engine) PoolInfo() PoolInfo {
	p := e.pool
	if p == nil {
		return PoolInfo{Reason: e.noPool}
	}
	s := p.settings
	m, t := s.reserveBytes()
	p.runs.mu.Lock()
	runs, waiting := p.runs.used.memories, len(p.runs.waiting)
	p.runs.mu.Unlock()
	p.instances.mu.Lock()
	inst := p.instances.used.memories
	p.instances.mu.Unlock()
	return PoolInfo{Enabled: true, Instances: s.instances, Memories: s.memories, Tables: s.tables, ReservedBytes: m + t,
		KeepResident: s.memoryKeepResident, RunsInUse: runs, InstancesInUse: inst, RunsWaiting: waiting}
}

// usePool sets the instance pool on cfg, unless the engine has no use
// for one or its address space cannot be reserved (e.noPool says why).
func (e *Engine) usePool(cfg *wasmtime.Config) {
	if e.cfg.OneShot {
		e.noPool = "a one-shot engine holds one store at a time"
		return
	}
	if e.cfg.NoPool {
		e.noPool = "Config.NoPool"
		e.boundCallers()
		return
	}
	p := newEnginePool(e.cfg)
	if err := p.settings.reserve(); err != nil {
		e.noPool = err.Error()
		e.boundCallers()
		return
	}
	if err := setPooling(cfg, p.settings); err != nil {
		e.noPool = err.Error()
		e.boundCallers()
		return
	}
	e.pool = p
}

// boundCallers bounds, for an engine without a pool, the runs that declare
// host functions as the pool's instances' share would: at most
// MaxInstances at once; the others wait as for the pool, without their
// run slot and within their deadline.
func (e *Engine) boundCallers() {
	e.callers = &poolShare{name: "runs that declare hostFunctions", size: storeNeed{instances: e.cfg.MaxInstances},
		holders: "held by runs that declare hostFunctions, while their parent answers"}
}

// takeSlots takes what a store of module info can come to hold (with the
// plugin kernel, with the WASI shim) from the pool: from the instances'
// share for a long-lived instance, refused when it is short, else from the
// runs' share, waiting while it is short until ctx ends or for at most
// deadline. A run that may wait for its caller (awaitsCaller: it declares
// host functions) takes from the instances' share too, waiting: while it
// waits it holds its store without a core, as an instance does, and from
// the runs' share it would starve the runs its caller's handler sends
// (with MaxRuns 1, each would wait for it until its deadline). It reports
// how long it waited, which counts against the run's deadline. Call it
// before the store is made; give the slots back (release) after it is
// closed. Without a pool it takes nothing.
func (e *Engine) takeSlots(ctx context.Context, info *wasmbin.Info, plugin, wasi bool, l limits.Limits, longLived, awaitsCaller bool) (poolSlots, time.Duration, error) {
	p := e.pool
	if p == nil {
		if !awaitsCaller || e.callers == nil {
			return poolSlots{}, 0, nil
		}
		// The pool's instances' share bounds these runs when there is one;
		// without, each would hold an OS thread while its parent answers
		// (the guest's thread is pinned inside the import), and a parent
		// sending 10,000 of them crashed the sidecar on Go's thread limit
		// (TestRunsAwaitingTheirCallerAreBoundedWithoutAPool).
		need := storeNeed{instances: 1}
		waited, err := e.callers.take(ctx, need, true, l.Timeout)
		if err != nil {
			return poolSlots{}, waited, err
		}
		return poolSlots{share: e.callers, need: need}, waited, nil
	}
	if l.TableElements > p.settings.tableElements {
		return poolSlots{}, 0, &Error{Kind: KindHost, Message: fmt.Sprintf("limits.tableElements: must be <= %d (the engine's maximum)", p.settings.tableElements)}
	}
	need := needOf(info, plugin, wasi)
	share, wait := &p.runs, true
	switch {
	case longLived:
		share, wait = &p.instances, false
	case awaitsCaller && need.within(p.instances.size): // size is fixed at start
		share = &p.instances
	}
	waited, err := share.take(ctx, need, wait, l.Timeout)
	if err != nil {
		return poolSlots{}, waited, err
	}
	return poolSlots{share: share, need: need}, waited, nil
}
