package mcpserver

// The machinery of the package's tests: a recording engine over the fake
// engine of internal/rpctest (with a WASI program and a plugin of its
// own), a server on pipes with the Go SDK's client at the other end, and
// a raw line-by-line client for what an SDK client would never send.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/internal/rpctest"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

// hang bounds every wait of a test: a hang fails, nothing is timed.
const hang = time.Minute

// engine is the fake engine, recording what it is asked. Its module
// compiled from the WAT "plugin" is a plugin (rpctest.PluginModule);
// every other is rpctest's. A run of "_start" is a WASI program: it
// writes each argument to stdout (one that starts "2>" to stderr; one
// "zeros:N", N NUL bytes) and stdin to stderr, one output call each, each
// stream cut at limits.outputBytes as the engine's, and exits with the
// number of its arguments. A run of "nullog:N" logs N lines of 100 NULs.
type engine struct {
	*rpctest.Instances

	mu      sync.Mutex
	sources []protocol.Source
	runs    []protocol.Run
	onces   []protocol.InstanceRequest
	ended   []error // what each run returned, in the order they ended
}

func newEngine() *engine { return &engine{Instances: rpctest.NewInstances(8)} }

var pluginModule = &pluginMod{}

type pluginMod struct{}

func (*pluginMod) Info() *protocol.ModuleInfo { return rpctest.PluginModule }

func (e *engine) Compile(ctx context.Context, src protocol.Source) (rpc.Module, protocol.CompileInfo, error) {
	e.mu.Lock()
	e.sources = append(e.sources, src)
	e.mu.Unlock()
	if src.WAT == "plugin" {
		return pluginModule, protocol.CompileInfo{}, nil
	}
	return e.Instances.Compile(ctx, src)
}

func (e *engine) Run(ctx context.Context, mod rpc.Module, run protocol.Run) (*protocol.RunOutcome, error) {
	e.mu.Lock()
	e.runs = append(e.runs, run)
	e.mu.Unlock()
	var res *protocol.RunOutcome
	var err error
	if run.Function == "_start" && run.Capabilities.WASI != nil {
		res = &protocol.RunOutcome{ExitCode: len(run.Capabilities.WASI.Args), Output: &protocol.Output{}}
		for _, a := range run.Capabilities.WASI.Args {
			stream, to := "stdout", &res.Output.Stdout
			if rest, ok := strings.CutPrefix(a, "2>"); ok {
				stream, to, a = "stderr", &res.Output.Stderr, rest
			}
			data := zeros(a)
			if room := int(run.Limits.OutputBytes) - len(*to); run.Limits.OutputBytes != 0 && len(data) > room {
				data, res.Output.Truncated = data[:room], true
			}
			if run.Output != nil {
				run.Output(stream, data)
			}
			*to = append(*to, data...)
		}
		if run.Output != nil && len(run.Capabilities.WASI.Stdin) > 0 {
			run.Output("stderr", run.Capabilities.WASI.Stdin)
		}
		res.Output.Stderr = append(res.Output.Stderr, run.Capabilities.WASI.Stdin...)
	} else if n, ok := strings.CutPrefix(run.Function, "nullog:"); ok {
		lines, _ := strconv.Atoi(n)
		for range lines {
			run.Log(strings.Repeat("\x00", 100))
		}
		res = &protocol.RunOutcome{LogLines: lines}
	} else {
		res, err = e.Instances.Run(ctx, mod, run)
	}
	e.mu.Lock()
	e.ended = append(e.ended, err)
	e.mu.Unlock()
	return res, err
}

// zeros is arg as a guest's output: "zeros:N" is N NUL bytes.
func zeros(arg string) []byte {
	if n, ok := strings.CutPrefix(arg, "zeros:"); ok {
		k, _ := strconv.Atoi(n)
		return make([]byte, k)
	}
	return []byte(arg)
}

// CallOnce: "count" outputs the input upper-cased and logs it, "fail" is
// a plugin error, "block" waits for its context, "zeros" outputs as many
// NUL bytes as its input says (cut at limits.outputBytes) and logs a line
// of 100.
func (e *engine) CallOnce(ctx context.Context, _ rpc.Module, req protocol.InstanceRequest, call protocol.Call) (*protocol.CallOutcome, error) {
	e.mu.Lock()
	e.onces = append(e.onces, req)
	e.mu.Unlock()
	switch call.Function {
	case "count":
		call.Log("info", "input "+string(call.Input))
		return &protocol.CallOutcome{Plugin: true, PluginOutput: []byte(strings.ToUpper(string(call.Input))),
			RunOutcome: protocol.RunOutcome{LogLines: 1}}, nil
	case "fail":
		msg, rc := "no "+string(call.Input), int32(1)
		return nil, &protocol.Error{Kind: protocol.KindPluginError, Message: "plugin error: " + msg,
			Data: protocol.ErrorData{Message: &msg, ReturnCode: &rc}}
	case "zeros":
		out := zeros("zeros:" + string(call.Input))
		cut := len(out) > int(req.Limits.OutputBytes)
		if cut {
			out = out[:req.Limits.OutputBytes]
		}
		call.Log("info", strings.Repeat("\x00", 100))
		return &protocol.CallOutcome{Plugin: true, PluginOutput: out, PluginOutputTruncated: cut,
			RunOutcome: protocol.RunOutcome{LogLines: 1}}, nil
	case "block":
		e.Started <- "block"
		<-ctx.Done()
		return nil, &protocol.Error{Kind: protocol.KindCancelled, Message: "cancelled"}
	}
	return nil, &protocol.Error{Kind: protocol.KindExport, Message: "no function " + call.Function}
}

func (e *engine) lastRun() protocol.Run {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runs[len(e.runs)-1]
}

func (e *engine) lastSource() protocol.Source {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sources[len(e.sources)-1]
}

// pipes starts srv on a pair of pipes and returns the client's ends.
// Cleanup closes the client's input and waits for Serve to return.
func pipes(t testing.TB, srv *Server) (toServer io.WriteCloser, fromServer io.ReadCloser) {
	t.Helper()
	sr, cw := io.Pipe()
	cr, sw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- srv.Serve(context.Background(), sr, sw)
		sw.Close()
	}()
	t.Cleanup(func() {
		cw.Close()
		go io.Copy(io.Discard, cr) // what is still owed
		select {
		case err := <-done:
			// The client's session, closed first (cleanups run last in,
			// first out), closes the pipe the server writes to: a write
			// then still owed (e.g. to a call the client cancelled) meets
			// the closed pipe, as the binary's would meet EPIPE.
			if err != nil && !errors.Is(err, io.ErrClosedPipe) {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(hang):
			t.Errorf("Serve did not return after the input ended")
		}
	})
	return cw, cr
}

// session is a Go SDK client session with a server of eng under opts.
func session(t *testing.T, eng rpc.Engine, opts Options, clientOpts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	srv, err := New(eng, opts)
	if err != nil {
		t.Fatal(err)
	}
	toServer, fromServer := pipes(t, srv)
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, clientOpts)
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.IOTransport{Reader: fromServer, Writer: toServer}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// callTool calls a tool with args and returns the result and its
// structured output decoded.
func callTool(t *testing.T, cs *mcp.ClientSession, name string, args any) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res, structured(t, res)
}

func structured(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	var out map[string]any
	b, err := json.Marshal(res.StructuredContent)
	if err == nil {
		err = json.Unmarshal(b, &out)
	}
	if err != nil || out == nil {
		t.Fatalf("structured content %v: %v", res.StructuredContent, err)
	}
	return out
}

// errorKind is the kind of a failed result (and "" for a success).
func errorKind(t *testing.T, res *mcp.CallToolResult, out map[string]any) string {
	t.Helper()
	e, _ := out["error"].(map[string]any)
	if res.IsError != (e != nil) {
		t.Fatalf("isError %v, structured %v", res.IsError, out)
	}
	if e == nil {
		return ""
	}
	kind, _ := e["kind"].(string)
	return kind
}

// validates checks v (JSON) against the tool's schema.
func validates(t *testing.T, schema any, v any) error {
	t.Helper()
	b, err := json.Marshal(schema)
	if err != nil {
		t.Fatal(err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	r, err := s.Resolve(nil)
	if err != nil {
		t.Fatalf("schema does not resolve: %v\n%s", err, b)
	}
	var inst any
	b, _ = json.Marshal(v)
	if err := json.Unmarshal(b, &inst); err != nil {
		t.Fatal(err)
	}
	return r.Validate(inst)
}

// rawClient speaks to a server line by line.
type rawClient struct {
	t testing.TB
	w io.Writer
	r *bufio.Reader
}

func newRawClient(t testing.TB, srv *Server) *rawClient {
	toServer, fromServer := pipes(t, srv)
	c := &rawClient{t: t, w: toServer, r: bufio.NewReaderSize(fromServer, 1<<20)}
	c.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if m := c.read(); m["id"] != float64(0) || m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return c
}

// readLine returns the next message as it was written.
func (c *rawClient) readLine() []byte {
	c.t.Helper()
	line, err := c.r.ReadBytes('\n')
	if err != nil {
		c.t.Fatalf("reading: %v", err)
	}
	return line
}

func (c *rawClient) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.w, line+"\n"); err != nil {
		c.t.Fatalf("writing: %v", err)
	}
}

// read returns the next message (a hang fails the test through the
// pipe's cleanup, not a timer: reads here are always of something owed).
func (c *rawClient) read() map[string]any {
	c.t.Helper()
	line, err := c.r.ReadBytes('\n')
	if err != nil {
		c.t.Fatalf("reading: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		c.t.Fatalf("a line that is not JSON: %q", line)
	}
	return m
}
