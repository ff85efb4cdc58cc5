package sandbox

import "time"

// NewInProcessEngine is NewEngine whose compiles run in this process,
// without the compile fence: for the fuzz target, where a child process
// per input would make fuzzing a hundred times slower. The work done is
// the child's own (compileRequest).
func NewInProcessEngine(cfg Config) (*Engine, error) {
	e, err := NewEngine(cfg)
	if e != nil {
		e.children.Close() // no child is ever needed
		e.compileInProcess = true
	}
	return e, err
}

// ModuleInfo is what the rewrite learnt about m.
func ModuleInfo(m *Module) any { return m.info }

// CompilesRunning is the number of compile slots taken.
func CompilesRunning(e *Engine) int { return len(e.compileSlots) }

// ChildStarts is the number of compile children e has started.
func ChildStarts(e *Engine) int64 { return e.children.starts.Load() }

// SetSpareRefillDelay changes how long after a compile e starts its next
// spare (spareRefillDelay, compilechild_pool.go).
func SetSpareRefillDelay(e *Engine, d time.Duration) {
	e.children.mu.Lock()
	defer e.children.mu.Unlock()
	e.children.refillDelay = d
}

// SpareReady reports whether e has a spare child waiting.
func SpareReady(e *Engine) bool {
	e.children.mu.Lock()
	defer e.children.mu.Unlock()
	return e.children.spare != nil
}

// EvictNow runs the idle timer's function at once, as a timer that fired
// just before a call would.
func EvictNow(in *Instance) { in.evict() }

// SetGuestDescriptorLimit sets how many host descriptors all of e's
// guests may hold (normally RLIMIT_NOFILE less a reserve).
func SetGuestDescriptorLimit(e *Engine, n int64) { e.fds.limit = n }
