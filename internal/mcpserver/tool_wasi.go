package mcpserver

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

// run_wasi: a WASI preview1 program (a command: its _start), with the
// argv, environment, stdin and read-only files the call gives, and the
// host directories it names inside the operator's --allow-dir. Its exit
// code, stdout and stderr come back; with a progress token, its output
// streams as progress notifications while it runs.

var wasiFields = []string{"module", "args", "env", "stdin", "files", "dirs", "limits"}

// wasiOutput is run_wasi's structured output when the program ran
// (failedOutput when it did not).
type wasiOutput struct {
	ExitCode        int            `json:"exitCode"`
	Stdout          protocol.Bytes `json:"stdout"`
	Stderr          protocol.Bytes `json:"stderr"`
	OutputTruncated bool           `json:"outputTruncated"`
	usage
}

func (s *Server) wasiTool() *tool {
	return &tool{
		def: &mcp.Tool{
			Name:  "run_wasi",
			Title: "Run a WASI program",
			Description: "Runs a WebAssembly WASI preview1 program (a command: its _start) in sandboxd, under fuel, " +
				"deadline and memory limits. The program sees only what the call gives it: args, env, stdin, " +
				"read-only files in memory, and " + dirsNote(s.opts.WASIDirs) + " Returns its exit code, stdout and stderr. " +
				"The module is WAT text, base64 wasm, or " + pathNote(s.opts.ModuleDirs),
			InputSchema:  s.wasiInputSchema(),
			OutputSchema: wasiOutputSchema(),
			Annotations:  annotations(len(s.opts.WASIDirs) == 0),
		},
		fields: wasiFields,
		run:    s.runWASI,
	}
}

func (s *Server) runWASI(ctx context.Context, c *call) outcome {
	fail := s.fail
	l, src, err := s.limitsAndSource(c.args, nil)
	if err != nil {
		return fail(err)
	}
	grant, err := readWASI(c.args)
	if err != nil {
		return fail(err)
	}
	if src.Path != "" {
		grant.Argv0 = filepath.Base(src.Path)
	}
	var res *protocol.RunOutcome
	err = s.run(ctx, src, func(mod rpc.Module) error {
		var err error
		res, err = s.eng.Run(ctx, mod, protocol.Run{Function: "_start", Limits: l,
			Capabilities: protocol.Capabilities{WASI: grant}, Output: c.progress.output()})
		return err
	})
	if err != nil {
		return fail(err)
	}
	var output protocol.Output
	if res.Output != nil {
		output = *res.Output
	}
	out := wasiOutput{ExitCode: res.ExitCode, Stdout: output.Stdout, Stderr: output.Stderr, OutputTruncated: output.Truncated, usage: usageOf(res)}
	text := newText("exit code " + strconv.Itoa(res.ExitCode))
	if output.Truncated {
		text.add("\n(output truncated at limits.outputBytes)")
	}
	streamsText(text, output.Stdout, output.Stderr, "")
	// A program that exits non-zero ran: its exit code is its answer.
	return outcome{output: out, text: text.String()}
}

// readWASI reads the grant's arguments: args, env, stdin, files, dirs.
// Each count is bounded (protocol.MaxWASI*) before anything is decoded;
// protocol's Check says what else is wrong, named as the arguments name it.
func readWASI(args *object) (*protocol.WASI, error) {
	w := &protocol.WASI{}
	if err := args.strings("args", protocol.MaxWASIArgs, &w.Args); err != nil {
		return nil, err
	}
	if err := args.stringMap("env", protocol.MaxWASIEnv, &w.Env); err != nil {
		return nil, err
	}
	if err := args.bytes("stdin", &w.Stdin); err != nil {
		return nil, err
	}
	if args.has("files") {
		w.Files = map[string][]byte{}
	}
	err := args.entries("files", protocol.MaxWASIFiles, func(field, key string, v []byte) error {
		b, problem := protocol.DecodeBytes(v)
		if problem != "" {
			return inputErr(field, "%s", problem)
		}
		w.Files[key] = b
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = args.array("dirs", protocol.MaxWASIDirs, func(field string, v []byte) error {
		o, err := readObject(field, v, []string{"host", "guest", "writable"})
		if err != nil {
			return err
		}
		var d protocol.Dir
		for _, err := range []error{o.string("host", &d.Host), o.string("guest", &d.Guest), o.bool("writable", &d.Writable)} {
			if err != nil {
				return err
			}
		}
		w.Dirs = append(w.Dirs, d)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := w.Check(); err != nil {
		if ge, ok := err.(*protocol.GrantError); ok {
			return nil, grantField(ge.Field, ge.Problem)
		}
		return nil, err
	}
	return w, nil
}

// streamsText adds a program's stdout and stderr to the text content
// (those it wrote: an empty stream is not shown).
func streamsText(t *text, stdout, stderr []byte, when string) {
	for _, st := range []struct {
		name string
		data []byte
	}{{"stdout", stdout}, {"stderr", stderr}} {
		if len(st.data) > 0 {
			t.output(st.name+when, st.name, st.data, false)
		}
	}
}

// dirsNote says which host directories a program may be given.
func dirsNote(dirs []string) string {
	if len(dirs) == 0 {
		return "no host directory (the operator allowed none)."
	}
	return "host directories at or under " + strings.Join(dirs, ", ") + " (dirs; read-only unless writable)."
}

// pathNote says whether a module may be given by path.
func pathNote(dirs []string) string {
	if len(dirs) == 0 {
		return "(not here: the operator allowed no module directory) a file path."
	}
	return "an absolute path of a .wasm or .wat file inside " + strings.Join(dirs, ", ") + "."
}

// annotations are a tool's hints: it changes nothing outside the sandbox
// unless a writable directory may be given, and it reaches no network.
func annotations(readOnly bool) *mcp.ToolAnnotations {
	destructive := !readOnly
	open := false
	return &mcp.ToolAnnotations{ReadOnlyHint: readOnly, DestructiveHint: &destructive, OpenWorldHint: &open}
}
