package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// childPool starts an engine's compile children and sees each one end. It
// keeps one spare child, started ahead of need, so that a new module pays
// for writing and reading pipes rather than for starting and warming a
// process. openChildPool starts the first spare; Close stops keeping one,
// kills every child it started that is still running (a compile holding
// one reports it cancelled), waits for them and for its goroutines, and
// returns the first error met in ending them.
//
// A compile takes a child (take) and says when it is over (compileEnded);
// the next spare starts spareRefillDelay after the last compile ends,
// unless one is running then (its end tries again), or at once beside a
// compile when the machine has a core to spare for it (beside).
type childPool struct {
	oneShot bool // Config.OneShot: no spare after the first compile
	beside  bool // a spare may start while a compile runs (take)

	ctx    context.Context // done at Close: kills the children compiles hold
	cancel context.CancelFunc

	exeOnce sync.Once // the children's program, found once (executable)
	exe     string
	exeErr  error

	mu          sync.Mutex
	spare       *childProc // started ahead of need, waiting for a request
	starting    bool       // a spare is being started
	claimed     bool       // a compile waits for the spare being started
	started     sync.Cond  // on mu: starting became false
	noSpares    bool       // closed, or a one-shot engine's spare taken
	closed      bool
	compiles    int           // compiles between take and compileEnded
	refill      *time.Timer   // compileEnded's
	refillDelay time.Duration // spareRefillDelay (tests change it)
	err         error         // the first error in ending a child

	// wg counts the pool's goroutines and its children not yet waited
	// for: each is added (under mu, the pool not closed) before it
	// starts, so Close's Wait sees every one.
	wg     sync.WaitGroup
	starts atomic.Int64 // compile children started (tests)
}

// spareRefillDelay is how long after a compile the next spare starts
// (without beside). The caller of the compile still has work to do (load
// the module, run it, answer), and the spare's start-up would share the
// cores with it: on 2 cores under load, the next spare started as the
// compile ended made the first run of a cold start about 1 ms slower. A
// new module arriving before the spare is started starts its own child,
// as it would have to without the delay had it arrived at once.
const spareRefillDelay = 5 * time.Millisecond

// openChildPool returns a pool whose first spare is being started.
func openChildPool(oneShot, beside bool) *childPool {
	p := &childPool{oneShot: oneShot, beside: beside, refillDelay: spareRefillDelay}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.started.L = &p.mu
	p.refillSpare()
	return p
}

// take returns the spare child, or starts one. A compile that finds the
// spare still being started (the first module after a start usually does)
// waits for that start rather than starting a second child: a second start
// takes as long, and the two would share the cores (measured on 2 cores: a
// third of cold starts did this, each about 1 ms slower). Only one compile
// waits so; others start their own. The next spare starts at once when the
// machine has a core to spare for it beside the compiles and the sidecar
// (beside); otherwise after this compile is over (compileEnded), since its
// start-up (about 4 ms of CPU) would slow the compile a caller waits for:
// measured on 2 cores, a first run 2-3 ms slower after a restart. A
// one-shot pool keeps no spare after its first compile. The caller calls
// compileEnded when its compile is over, whatever take returned.
func (p *childPool) take() (*childProc, error) {
	p.mu.Lock()
	p.compiles++
	if p.spare == nil && p.starting && !p.claimed {
		p.claimed = true
		for p.starting { // a fork and exec: bounded, not worth a ctx
			p.started.Wait()
		}
		p.claimed = false
	}
	if p.closed {
		p.mu.Unlock()
		return nil, errors.New("the engine is closed")
	}
	if p.oneShot {
		p.noSpares = true
	}
	c := p.spare
	p.spare = nil
	if c == nil {
		p.wg.Add(1) // the child started below
	}
	p.mu.Unlock()
	if p.beside {
		p.refillSpare()
	}
	if c == nil {
		var err error
		if c, err = p.start(); err != nil {
			return nil, err
		}
	}
	c.unwatch = context.AfterFunc(p.ctx, func() { c.kill(errCancelled) })
	return c, nil
}

// compileEnded starts a spare child spareRefillDelay after a compile
// ended, unless a compile is running by then (its end tries again).
func (p *childPool) compileEnded() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.compiles--
	if p.noSpares {
		return
	}
	// Each run of the timer's function is counted in wg: a pending one
	// that Stop cancels is pushed back instead.
	if p.refill == nil || !p.refill.Stop() {
		p.wg.Add(1)
	}
	if p.refill == nil {
		p.refill = time.AfterFunc(p.refillDelay, p.refillIfIdle)
		return
	}
	p.refill.Reset(p.refillDelay)
}

// refillIfIdle is the refill timer's function.
func (p *childPool) refillIfIdle() {
	defer p.wg.Done()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.compiles == 0 {
		p.startSpare()
	}
}

// refillSpare starts a spare child unless one is there or being started,
// or the pool keeps no more spares.
func (p *childPool) refillSpare() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.startSpare()
}

// startSpare is refillSpare with p.mu held.
func (p *childPool) startSpare() {
	if p.spare != nil || p.starting || p.noSpares {
		return
	}
	p.starting = true
	p.wg.Add(2) // the goroutine, and the child it starts
	go func() {
		defer p.wg.Done()
		c, err := p.start() // if it fails, take starts one and reports why
		p.mu.Lock()
		p.starting = false
		p.started.Broadcast()
		keep := err == nil && !p.noSpares
		if keep {
			p.spare = c
		}
		p.mu.Unlock()
		if err == nil && !keep {
			c.discard()
		}
	}()
}

// Close stops keeping a spare and ends every child the pool started: the
// spare, and any a compile still holds (killed, so the compile returns
// cancelled). It waits for them and for the pool's goroutines, and returns
// the first error met in ending a child. Idempotent.
func (p *childPool) Close() error {
	p.mu.Lock()
	p.closed, p.noSpares = true, true
	if p.refill != nil && p.refill.Stop() {
		p.wg.Done() // the run it cancelled
	}
	spare := p.spare
	p.spare = nil
	p.mu.Unlock()
	p.cancel()
	if spare != nil {
		spare.discard()
	}
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// ended records that a child the pool started was waited for. An exit
// status or a signal is how children end; any other error from Wait is
// kept for Close.
func (p *childPool) ended(pid int, waitErr error) {
	var exit *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exit) {
		p.mu.Lock()
		if p.err == nil {
			p.err = fmt.Errorf("waiting for compile child %d: %w", pid, waitErr)
		}
		p.mu.Unlock()
	}
	p.wg.Done()
}

// start starts a compile child, which the caller has added to p.wg.
func (p *childPool) start() (*childProc, error) {
	c, err := p.exec()
	if err != nil {
		p.wg.Done()
		return nil, err
	}
	p.starts.Add(1)
	return c, nil
}

func (p *childPool) exec() (*childProc, error) {
	exe, err := p.executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	// The child inherits nothing from the parent's environment: it needs
	// no secrets to compile, and no backtraces should reach its stderr.
	cmd.Env = []string{compileChildEnv + "=" + compileChildProtocol, "RUST_BACKTRACE=0", "RUST_LIB_BACKTRACE=0", "GOMAXPROCS=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c := &childProc{pool: p, cmd: cmd, stderr: &headBuffer{max: 8 << 10}}
	cmd.Stderr = c.stderr
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if c.stdout, err = cmd.StdoutPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return c, nil
}

// executable is the program re-executed as compile child: this one.
func (p *childPool) executable() (string, error) {
	if IsCompileChild() {
		// A program that does not dispatch the mode would otherwise start
		// children of children.
		return "", errors.New("this process is a compile child that did not dispatch the mode (call sandbox.CompileChildMain first in main)")
	}
	p.exeOnce.Do(func() { p.exe, p.exeErr = os.Executable() })
	return p.exe, p.exeErr
}

// childProc is a started compile child. The compile that took it ends it:
// kill, then reap or wait.
type childProc struct {
	pool   *childPool
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	stderr *headBuffer

	killOnce sync.Once
	why      error       // the reason of the kill, once killOnce has run
	unwatch  func() bool // stops the pool's Close from killing it (take)
}

// kill kills the child for reason, unless it was killed before or settle
// was called: the first reason stays.
func (c *childProc) kill(reason error) {
	c.killOnce.Do(func() {
		c.why = reason
		_ = c.cmd.Process.Kill()
	})
}

// settle forbids any later kill and returns the reason of the one there
// was, or nil.
func (c *childProc) settle() error {
	c.killOnce.Do(func() {})
	return c.why
}

// reap waits for the child, killed, in the background, and for wrote (the
// goroutine writing its request) to be closed.
func (c *childProc) reap(wrote <-chan struct{}) {
	c.unwatch()
	go func() { // counted in the pool's wg as the child
		err := c.cmd.Wait()
		<-wrote
		c.pool.ended(c.cmd.Process.Pid, err)
	}()
}

// wait waits for the child to exit and for wrote to be closed, and
// returns how it exited.
func (c *childProc) wait(wrote <-chan struct{}) error {
	c.unwatch()
	err := c.cmd.Wait()
	<-wrote
	c.pool.wg.Done() // the error is the compile's to report
	return err
}

// discard ends a child that was given no request: EOF on its stdin ends
// it, a kill makes sure.
func (c *childProc) discard() {
	_ = c.stdin.Close()
	_ = c.cmd.Process.Kill()
	c.pool.ended(c.cmd.Process.Pid, c.cmd.Wait())
}

// headBuffer keeps the first max bytes written to it (a child's stderr:
// enough to classify its death, never unbounded).
type headBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *headBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if room := t.max - len(t.b); room > 0 {
		t.b = append(t.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (t *headBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
