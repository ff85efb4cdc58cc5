package mcpserver

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

// run_export: one exported function of a module, called with typed
// arguments, its results typed. The module may import only what the
// call grants (host::log, host::random, host::now_ns); a module that
// imports WASI is run_wasi's.

var exportFields = []string{"module", "function", "args", "capabilities", "limits"}

// exportOutput is run_export's structured output when the function
// returned (failedOutput when it did not).
type exportOutput struct {
	Values       []protocol.WireValue `json:"values"`
	Log          []string             `json:"log"`
	LogTruncated bool                 `json:"logTruncated"`
	usage
}

func (s *Server) exportTool() *tool {
	return &tool{
		def: &mcp.Tool{
			Name:  "run_export",
			Title: "Call a wasm function",
			Description: "Calls one exported function of a WebAssembly module in sandboxd, under fuel, deadline and memory " +
				"limits, and returns its results. Arguments are typed by the export's signature: i32 as a number, i64 as a " +
				"decimal string (or a number), f32 and f64 as numbers (or \"NaN\", \"Infinity\"). The module imports nothing " +
				"unless the call grants it (capabilities: host::log lines come back in log). The module is WAT text, " +
				"base64 wasm, or " + pathNote(s.opts.ModuleDirs),
			InputSchema:  s.exportInputSchema(),
			OutputSchema: exportOutputSchema(),
			Annotations:  annotations(true),
		},
		fields: exportFields,
		run:    s.runExport,
	}
}

func (s *Server) runExport(ctx context.Context, c *call) outcome {
	fail := s.fail
	l, src, err := s.limitsAndSource(c.args, nil)
	if err != nil {
		return fail(err)
	}
	var fn string
	if err := c.args.string("function", &fn); err != nil {
		return fail(err)
	}
	if fn == "" {
		return fail(inputErr("function", "is required: the name of an exported function"))
	}
	var rawArgs [][]byte
	err = c.args.array("args", rpc.MaxArgs, func(field string, v []byte) error {
		switch kindOf(v) {
		case "number", "string", "object":
		default: // what no parameter type reads, whatever the export
			return inputErr(field, "must be a number, a string or {\"type\", \"value\"}, got %s", got(v))
		}
		rawArgs = append(rawArgs, v)
		return nil
	})
	if err != nil {
		return fail(err)
	}
	caps, err := readCapabilities(c.args)
	if err != nil {
		return fail(err)
	}
	if err := s.checkGrant(src, caps); err != nil {
		return fail(err)
	}
	var lines []string
	var res *protocol.RunOutcome
	err = s.run(ctx, src, func(mod rpc.Module) error {
		vals, err := decodeArgs(mod.Info(), fn, rawArgs)
		if err != nil {
			return err
		}
		logLine := c.progress.log()
		res, err = s.eng.Run(ctx, mod, protocol.Run{Function: fn, Args: vals, Limits: l, Capabilities: caps,
			Log: func(line string) { lines = append(lines, line); logLine("", line) }})
		return err
	})
	if err != nil {
		return fail(err)
	}
	out := exportOutput{Values: protocol.EncodeValues(res.Values), Log: lines, LogTruncated: res.LogTruncated, usage: usageOf(res)}
	if out.Log == nil {
		out.Log = []string{}
	}
	texts := make([]string, len(res.Values))
	for i, v := range res.Values {
		texts[i] = v.String()
	}
	head := "result: " + strings.Join(texts, ", ")
	if len(res.Values) == 0 {
		head = "returned no values"
	}
	text := newText(head)
	text.lines("log", "log", len(lines), func(i int) string { return lines[i] })
	return outcome{output: out, text: text.String()}
}

// readCapabilities reads the host functions a run_export call grants.
func readCapabilities(args *object) (protocol.Capabilities, error) {
	var caps protocol.Capabilities
	if !args.has("capabilities") {
		return caps, nil
	}
	o, err := readObject("capabilities", args.members["capabilities"], []string{"log", "clock", "random", "seed"})
	if err != nil {
		return caps, err
	}
	for _, err := range []error{o.bool("log", &caps.Log), o.bool("clock", &caps.Clock), o.bool("random", &caps.Random), o.uint("seed", &caps.Seed)} {
		if err != nil {
			return caps, err
		}
	}
	return caps, nil
}

// decodeArgs reads the call's arguments by the export's parameter types.
// An export that is missing, not a function, of another arity or of a
// type no argument can have is the engine's to report (kind export): the
// arguments then go as they are counted.
func decodeArgs(mod *protocol.ModuleInfo, fn string, raw [][]byte) ([]protocol.Value, error) {
	vals := make([]protocol.Value, len(raw))
	e, ok := mod.Export(fn)
	if !ok || e.Kind != "func" || len(e.Params) != len(raw) {
		for i := range vals {
			vals[i] = protocol.Value{Type: "?"}
		}
		return vals, nil
	}
	for i, r := range raw {
		switch e.Params[i] {
		case "i32", "i64", "f32", "f64":
		default:
			return nil, nil // the engine names the unsupported type
		}
		v, err := protocol.DecodeArg(json.RawMessage(r), protocol.ValType(e.Params[i]))
		if err != nil {
			return nil, inputErr("args["+itoa(uint64(i))+"]", "%v", err)
		}
		vals[i] = v
	}
	return vals, nil
}

// grantChecker is implemented by an engine that can refuse a module from
// its bytes, before compiling it, when the run does not grant what it
// imports (a WASI module sent to run_export).
type grantChecker interface {
	CheckGrant(src protocol.Source, caps protocol.Capabilities) error
}

func (s *Server) checkGrant(src protocol.Source, caps protocol.Capabilities) error {
	if g, ok := s.eng.(grantChecker); ok {
		return g.CheckGrant(src, caps)
	}
	return nil
}
