package mcpserver

import (
	"context"
	"errors"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/internal/jsonscan"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

// A tool is one MCP tool: its definition (name, description, input and
// output schemas) and what a call of it does.
//
// Extension point: a new tool is a further entry of Server.tools whose
// run reads its arguments from the call (args.go), runs through the
// engine under the call's limits (Server.limits, withSlot) and answers an
// outcome (a failure: failed, whose output is every tool's error).
type tool struct {
	def    *mcp.Tool
	fields []string // the members its arguments may have
	run    func(ctx context.Context, c *call) outcome
}

// call is one tool call being served.
type call struct {
	args     *object
	progress *progress // nil: the client gave no progress token
}

// outcome is what a call answers: the structured output (which the
// output schema describes), a text for clients that read only text,
// within maxTextBytes (answer.go), and whether it failed.
type outcome struct {
	output any
	text   string
	failed bool
}

// tools lists the server's tools (tools/list gives them by name).
func (s *Server) tools() []*tool {
	ts := []*tool{s.wasiTool(), s.exportTool()}
	if s.inst != nil {
		ts = append(ts, s.pluginTool())
	}
	if len(s.languages) > 0 {
		ts = append(ts, s.snippetTool())
		if s.inst != nil {
			ts = append(ts, s.sessionTools()...)
		}
	}
	return ts
}

// handler serves calls of t. Bad arguments and every failure of the run
// are answered as the tool's output with isError; a panic too, logged
// with its stack, so the server keeps serving. A call ends when the
// client cancels it or when serving ends (serving: Serve's context).
func (s *Server) handler(serving context.Context, t *tool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(serving, cancel)()
		defer func() {
			if p := recover(); p != nil {
				s.opts.Logger.Error("tool call panicked", "tool", t.def.Name, "panic", p, "stack", string(debug.Stack()))
				res, err = failure(&toolError{Kind: string(protocol.KindHost), Message: "the server failed in this call (its log says how)"}), nil
			}
		}()
		raw := []byte(req.Params.Arguments)
		if len(raw) == 0 || string(raw) == "null" {
			raw = []byte("{}")
		}
		if !jsonscan.Valid(raw) { // the SDK decoded it as far as a raw message
			return failure(invalid(inputErr("", "not valid JSON"))), nil
		}
		args, err := readObject("", raw, t.fields)
		if err != nil {
			te, _ := s.errorOf(err)
			return failure(te), nil
		}
		c := &call{args: args, progress: s.newProgress(ctx, req)}
		o := t.run(ctx, c)
		c.progress.finish()
		return result(o), nil
	}
}

// result is the MCP form of an outcome. The output is encoded once,
// with the rest of the result, by the SDK (our own types: they always
// encode).
func result(o outcome) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: o.text}},
		StructuredContent: o.output,
		IsError:           o.failed,
	}
}

// failedOutput is the structured output of every failed call: the
// error, and for a WASI guest that had started, its output until it
// stopped.
type failedOutput struct {
	Stdout          *protocol.Bytes `json:"stdout,omitempty"`
	Stderr          *protocol.Bytes `json:"stderr,omitempty"`
	OutputTruncated *bool           `json:"outputTruncated,omitempty"`
	Error           *toolError      `json:"error"`
}

// failure is the result of a call that failed with e.
func failure(e *toolError) *mcp.CallToolResult { return result(failed(e, nil)) }

// failed is the outcome of a call that failed with e; partial is a WASI
// guest's output until it stopped, if it had started.
func failed(e *toolError, partial *protocol.WASIOutput) outcome {
	e = e.bounded()
	out := failedOutput{Error: e}
	text := newText(e.text())
	if partial != nil {
		truncated := partial.OutputTruncated
		out.Stdout, out.Stderr, out.OutputTruncated = &partial.Stdout, &partial.Stderr, &truncated
		streamsText(text, partial.Stdout, partial.Stderr, " until it stopped")
	}
	return outcome{output: out, text: text.String(), failed: true}
}

// fail is the outcome of a call that failed with err (errorOf).
func (s *Server) fail(err error) outcome {
	return failed(s.errorOf(err))
}

// toolError is the error member of a failed call's output.
type toolError struct {
	// Kind is one of the table of kinds (protocol.Kinds(): timeout,
	// fuel_exhausted, trap, ...), or invalid_params for arguments the
	// server refused, or busy.
	Kind    string `json:"kind"`
	Message string `json:"message"`
	// Field names the refused argument (invalid_params).
	Field string `json:"field,omitempty"`
	// Data are the kind's details as the sidecar sends them in an error's
	// data (docs/protocol.md): the budget, the trap code and frames, ...
	Data *protocol.ErrorData `json:"data,omitempty"`
}

// KindInvalidParams is the kind of a call whose arguments were refused
// before anything ran (the sidecar's -32602).
const KindInvalidParams = "invalid_params"

func (e *toolError) text() string { return e.Kind + ": " + e.Message }

// invalid is the error of refused arguments.
func invalid(e *inputError) *toolError {
	return &toolError{Kind: KindInvalidParams, Message: e.Error(), Field: e.Field}
}

// errorOf is what a failed compile or run says to the caller: its kind
// and details, or a parameter problem. A WASI guest's output until it
// stopped is taken out of the details (the tools give it beside them).
func (s *Server) errorOf(err error) (*toolError, *protocol.WASIOutput) {
	var ie *inputError
	if errors.As(err, &ie) {
		return invalid(ie), nil
	}
	if te, ok := sessionError(err); ok {
		return te, nil
	}
	var pe *rpc.ParamError // a grant the engine refused
	if errors.As(err, &pe) {
		return invalid(grantField(pe.Field, pe.Problem)), nil
	}
	var ge *protocol.GrantError
	if errors.As(err, &ge) {
		return invalid(grantField(ge.Field, ge.Problem)), nil
	}
	oe, ok := protocol.AsError(err)
	if !ok {
		// Not an outcome: the engine's own failure. Its text may name
		// host paths; the log keeps it, the caller gets the kind.
		s.opts.Logger.Error("engine error", "error", err)
		return &toolError{Kind: string(protocol.KindHost), Message: "the engine failed (the server's log says how)"}, nil
	}
	data := oe.Data
	data.Kind = string(oe.Kind)
	out := data.WASIOutput
	data.WASIOutput = nil
	return &toolError{Kind: string(oe.Kind), Message: oe.Message, Data: &data}, out
}

// grantField is a grant problem the engine names by its sidecar path
// (capabilities.wasi.dirs[0].host) named as the tools' arguments name it
// (dirs[0].host: run_wasi's arguments are the grant's members).
//
// The engine quotes a files key whole in the field; a key of megabytes
// would make the answer that large twice over, so the field is clipped.
func grantField(field, problem string) *inputError {
	if f, ok := strings.CutPrefix(field, protocol.WASIField+"."); ok {
		field = f
	}
	field = protocol.Cut(field, maxFieldBytes)
	return &inputError{Field: field, Problem: problem}
}

// maxFieldBytes bounds a field path an answer repeats.
const maxFieldBytes = 256

// usage is what a run consumed, in every successful output.
type usage struct {
	FuelConsumed    uint64 `json:"fuelConsumed"`
	PeakMemoryBytes uint64 `json:"peakMemoryBytes"`
	ElapsedMicros   int64  `json:"elapsedMicros"`
}

func usageOf(r *protocol.RunOutcome) usage {
	return usage{FuelConsumed: r.FuelConsumed, PeakMemoryBytes: r.PeakMemoryBytes, ElapsedMicros: r.Elapsed.Microseconds()}
}

// run compiles src and runs fn with the module in a run slot: the path
// every tool takes to the engine. Waiting for a slot ends with ctx.
func (s *Server) run(ctx context.Context, src protocol.Source, fn func(mod rpc.Module) error) error {
	mod, _, err := s.eng.Compile(ctx, src)
	if err != nil {
		return pathProblem(src, err)
	}
	return s.withSlot(ctx, func() error { return fn(mod) })
}

// withSlot runs fn in a run slot, once the output waiting for the client
// is below its high water (backpressure.go); waiting for either ends with
// ctx.
func (s *Server) withSlot(ctx context.Context, fn func() error) error {
	if err := s.slots.Acquire(ctx, 1); err != nil {
		return &protocol.Error{Kind: protocol.KindCancelled, Message: "cancelled while waiting for a run slot"}
	}
	defer s.slots.Release(1)
	if err := s.out.wait(ctx); err != nil {
		return &protocol.Error{Kind: protocol.KindCancelled, Message: "cancelled while waiting for the client to read its output"}
	}
	return fn()
}

// pathProblem is a module file the engine would not read (outside the
// allowed directories once its links are resolved, not a regular file,
// missing) as the caller's invalid_params naming module.path; the engine
// reports it as a host error, its word for the sidecar's parent.
func pathProblem(src protocol.Source, err error) error {
	oe, ok := protocol.AsError(err)
	if src.Path != "" && ok && oe.Kind == protocol.KindHost && strings.HasPrefix(oe.Message, "module file "+strconv.Quote(src.Path)+": ") {
		return inputErr("module.path", "%s", oe.Message)
	}
	return err
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
