// Package sandboxd is a Go client of the sandboxd sidecar: it spawns
// `sandboxd serve` (or speaks over any pipe pair), pipelines requests,
// routes each run's log notifications to its caller and turns run errors
// into *Error values carrying the kind.
//
// It serves the project's integration tests and benchmarks, and Go
// programs that prefer a process boundary to linking wasmtime.
package sandboxd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/sandboxd/sandboxd/rpc"
)

// Client is a connection to one sidecar. It is safe for concurrent use;
// concurrent calls are pipelined over the one pipe.
type Client struct {
	conn   *jsonrpc2.Conn
	nextID atomic.Uint64

	mu   sync.Mutex
	logs map[uint64]func(rpc.LogParams) // by run request id

	cmd    *exec.Cmd
	closed atomic.Bool
}

// Options for Start.
type Options struct {
	Args   []string  // extra `serve` flags
	Stderr io.Writer // the sidecar's stderr; default os.Stderr
	NDJSON bool      // use --framing=ndjson
}

// Start spawns `binary serve` and connects to it.
func Start(ctx context.Context, binary string, opts Options) (*Client, error) {
	args := append([]string{"serve"}, opts.Args...)
	if opts.NDJSON {
		args = append(args, "--framing=ndjson")
	}
	cmd := exec.Command(binary, args...)
	cmd.Stderr = opts.Stderr
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", binary, err)
	}
	c := New(ctx, stdout, stdin, opts.NDJSON)
	c.cmd = cmd
	return c, nil
}

// Process returns the sidecar process, if Start spawned it.
func (c *Client) Process() *os.Process {
	if c.cmd == nil {
		return nil
	}
	return c.cmd.Process
}

type pipe struct {
	io.Reader
	io.WriteCloser
}

// New speaks to a sidecar over r (its stdout) and w (its stdin).
func New(ctx context.Context, r io.Reader, w io.WriteCloser, ndjson bool) *Client {
	var codec jsonrpc2.ObjectCodec = jsonrpc2.VSCodeObjectCodec{}
	if ndjson {
		codec = jsonrpc2.PlainObjectCodec{}
	}
	c := &Client{logs: map[uint64]func(rpc.LogParams){}}
	c.conn = jsonrpc2.NewConn(ctx, jsonrpc2.NewBufferedStream(pipe{r, w}, codec), jsonrpc2.HandlerWithError(c.handle))
	return c
}

// handle receives the server's notifications, in order, on the read loop:
// a run's logs are therefore all delivered before its response.
func (c *Client) handle(_ context.Context, _ *jsonrpc2.Conn, req *jsonrpc2.Request) (any, error) {
	if req.Method != rpc.NotifyLog || req.Params == nil {
		return nil, nil
	}
	var p rpc.LogParams
	if err := json.Unmarshal(*req.Params, &p); err != nil || p.ID.IsString {
		return nil, nil
	}
	c.mu.Lock()
	fn := c.logs[p.ID.Num]
	c.mu.Unlock()
	if fn != nil {
		fn(p)
	}
	return nil, nil
}

// Error is an error response from the sidecar.
type Error struct {
	Code    int64
	Message string
	Data    json.RawMessage
}

func (e *Error) Error() string { return fmt.Sprintf("sandboxd: %s (code %d)", e.Message, e.Code) }

// Kind is data.kind of a run error ("" for protocol errors).
func (e *Error) Kind() string {
	var d struct {
		Kind string `json:"kind"`
	}
	_ = json.Unmarshal(e.Data, &d)
	return d.Kind
}

// ErrClosed is returned by calls on a closed client or a dead sidecar.
var ErrClosed = errors.New("sandboxd: connection closed")

// Call sends one request and waits for its response. If ctx ends first the
// request is cancelled with $/cancelRequest and Call still waits (briefly)
// for the server's answer, which is then returned.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	_, err := c.call(ctx, method, params, result, nil)
	return err
}

func (c *Client) call(ctx context.Context, method string, params, result any, onLog func(rpc.LogParams)) (uint64, error) {
	id := c.nextID.Add(1)
	if onLog != nil {
		c.mu.Lock()
		c.logs[id] = onLog
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			delete(c.logs, id)
			c.mu.Unlock()
		}()
	}
	w, err := c.conn.DispatchCall(context.Background(), method, params, jsonrpc2.PickID(jsonrpc2.ID{Num: id}))
	if err != nil {
		return id, ErrClosed
	}
	err = w.Wait(ctx, result)
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		_ = c.conn.Notify(context.Background(), rpc.MethodCancel, rpc.CancelParams{ID: jsonrpc2.ID{Num: id}})
		grace, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = w.Wait(grace, result)
	}
	return id, convert(err)
}

func convert(err error) error {
	var je *jsonrpc2.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &je):
		e := &Error{Code: je.Code, Message: je.Message}
		if je.Data != nil {
			e.Data = *je.Data
		}
		return e
	case errors.Is(err, jsonrpc2.ErrClosed):
		return ErrClosed
	}
	return err
}

// RunParams are the params of a run; see docs/protocol.md.
type RunParams = rpc.RunParams

// Run calls `run`. onLog, if set, receives the run's log lines in order
// before Run returns.
func (c *Client) Run(ctx context.Context, p RunParams, onLog func(seq int, line string)) (*rpc.RunResult, error) {
	var res rpc.RunResult
	var fn func(rpc.LogParams)
	if onLog != nil {
		fn = func(lp rpc.LogParams) { onLog(lp.Seq, lp.Line) }
	}
	if _, err := c.call(ctx, rpc.MethodRun, p, &res, fn); err != nil {
		return nil, err
	}
	return &res, nil
}

// Compile calls `compile`.
func (c *Client) Compile(ctx context.Context, m rpc.ModuleSpec) (*rpc.CompileResult, error) {
	var res rpc.CompileResult
	if err := c.Call(ctx, rpc.MethodCompile, rpc.CompileParams{Module: m}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Stats calls `stats`.
func (c *Client) Stats(ctx context.Context) (*rpc.StatsResult, error) {
	var res rpc.StatsResult
	if err := c.Call(ctx, rpc.MethodStats, nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Close performs the shutdown/exit handshake and, for a spawned sidecar,
// waits for it to exit (killing it after 5 s). Idempotent.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	shutdownErr := c.Call(ctx, rpc.MethodShutdown, nil, nil)
	_ = c.conn.Notify(ctx, rpc.MethodExit, nil)
	c.conn.Close()
	if c.cmd == nil {
		return shutdownErr
	}
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		if shutdownErr != nil {
			return shutdownErr
		}
		return err
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		return errors.New("sandboxd: sidecar did not exit; killed")
	}
}

// Str returns a pointer to s, for ModuleSpec fields.
func Str(s string) *string { return &s }
