package snippet

import (
	"context"
	"sync"

	"github.com/sandboxd/sandboxd/sandbox"
)

// sparePool keeps up to size interpreters of one language started, so a
// one-shot evaluation skips the interpreter's start (12 M fuel and tens
// of milliseconds for JavaScript). A spare has never run a snippet: it is
// a fresh state. The Runner owns the refill goroutine (Runner.refill):
// one at a time per pool, started after an evaluation that could take a
// spare (Runner.afterEval), ended by Close.
type sparePool struct {
	size  int
	start func(context.Context) (*sandbox.Instance, error)

	mu      sync.Mutex
	ready   []*sandbox.Instance
	filling bool
	drained bool
}

func newSparePool(size int, start func(context.Context) (*sandbox.Instance, error)) *sparePool {
	return &sparePool{size: size, start: start}
}

// take returns a spare, or nil when none is ready.
func (p *sparePool) take() *sandbox.Instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ready) == 0 {
		return nil
	}
	in := p.ready[len(p.ready)-1]
	p.ready = p.ready[:len(p.ready)-1]
	return in
}

// startFilling says whether the caller should run fill: no fill runs and
// spares are missing.
func (p *sparePool) startFilling() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.filling || p.drained || len(p.ready) >= p.size {
		return false
	}
	p.filling = true
	return true
}

// fill starts spares until there are size of them, ctx is done or a
// start fails (the next take tries again).
func (p *sparePool) fill(ctx context.Context) {
	defer func() {
		p.mu.Lock()
		p.filling = false
		p.mu.Unlock()
	}()
	for ctx.Err() == nil {
		p.mu.Lock()
		enough := p.drained || len(p.ready) >= p.size
		p.mu.Unlock()
		if enough {
			return
		}
		in, err := p.start(ctx)
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.drained {
			p.mu.Unlock()
			in.Release()
			return
		}
		p.ready = append(p.ready, in)
		p.mu.Unlock()
	}
}

// drain releases every spare; the pool takes no more.
func (p *sparePool) drain() {
	p.mu.Lock()
	ready := p.ready
	p.ready, p.drained = nil, true
	p.mu.Unlock()
	for _, in := range ready {
		in.Release()
	}
}

// count is how many spares are ready.
func (p *sparePool) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}
