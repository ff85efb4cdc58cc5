package mcpserver

import (
	"context"
	"path/filepath"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

// call_plugin: one function of an Extism plugin, on a fresh instance
// (instantiate, call, release: rpc.InstanceEngine.CallOnce), with input
// bytes and a config; its output bytes come back.

var pluginFields = []string{"module", "function", "input", "config", "wasi", "log", "limits"}

// pluginOutput is call_plugin's structured output when the function
// returned (failedOutput when it did not).
type pluginOutput struct {
	Output          protocol.Bytes `json:"output"`
	OutputTruncated bool           `json:"outputTruncated"`
	Log             []logLine      `json:"log"`
	LogTruncated    bool           `json:"logTruncated"`
	// A plugin granted WASI: what it wrote to stdout and stderr.
	Stdout *protocol.Bytes `json:"stdout,omitempty"`
	Stderr *protocol.Bytes `json:"stderr,omitempty"`
	usage
}

// logLine is one line a plugin logged, with its level.
type logLine struct {
	Level string `json:"level"`
	Line  string `json:"line"`
}

func (s *Server) pluginTool() *tool {
	return &tool{
		def: &mcp.Tool{
			Name:  "call_plugin",
			Title: "Call an Extism plugin function",
			Description: "Calls one function of an Extism plugin (a wasm module importing extism:host/env) in sandboxd, " +
				"on a fresh instance, under fuel, deadline and memory limits: the plugin reads input bytes and a config " +
				"(its config_get), and the bytes it outputs come back. HTTP and user host functions are refused. " +
				"wasi grants WASI with no arguments, files or directories (plugins built for wasip1 need it); the plugin's " +
				"log lines come back in log unless log is false. " +
				"The module is WAT text, base64 wasm, or " + pathNote(s.opts.ModuleDirs),
			InputSchema:  s.pluginInputSchema(),
			OutputSchema: pluginOutputSchema(),
			Annotations:  annotations(true),
		},
		fields: pluginFields,
		run:    s.runPlugin,
	}
}

func (s *Server) runPlugin(ctx context.Context, c *call) outcome {
	fail := s.fail
	var varBytes uint64
	l, src, err := s.limitsAndSource(c.args, &varBytes)
	if err != nil {
		return fail(err)
	}
	var fn string
	var input []byte
	var config map[string]string
	var wasi bool
	log := true // a plugin's log lines come back; PDKs import the log functions
	for _, err := range []error{c.args.string("function", &fn), c.args.bytes("input", &input),
		c.args.stringMap("config", rpc.MaxConfigKeys, &config), c.args.bool("wasi", &wasi), c.args.bool("log", &log)} {
		if err != nil {
			return fail(err)
		}
	}
	if fn == "" {
		return fail(inputErr("function", "is required: the name of a plugin function"))
	}
	caps := protocol.Capabilities{Log: log}
	if wasi {
		caps.WASI = &protocol.WASI{}
		if src.Path != "" {
			caps.WASI.Argv0 = filepath.Base(src.Path)
		}
	}
	if err := s.checkGrant(src, caps); err != nil {
		return fail(err)
	}
	var lines []logLine
	logFwd := c.progress.log()
	logTo := func(level, line string) { lines = append(lines, logLine{level, line}); logFwd(level, line) }
	var res *protocol.CallOutcome
	err = s.run(ctx, src, func(mod rpc.Module) error {
		if !mod.Info().IsPlugin() {
			return inputErr("module", "is not an Extism plugin (it imports nothing from %s): use run_export or run_wasi", protocol.ExtismEnvModule)
		}
		var err error
		res, err = s.inst.CallOnce(ctx, mod,
			protocol.InstanceRequest{Capabilities: caps, Limits: l, Config: config, VarBytes: varBytes, Log: logTo, Output: c.progress.output()},
			protocol.Call{Function: fn, Input: input, Log: logTo, Output: c.progress.output()})
		return err
	})
	if err != nil {
		return fail(err)
	}
	out := pluginOutput{Output: res.PluginOutput, OutputTruncated: res.PluginOutputTruncated, Log: lines,
		LogTruncated: res.LogTruncated, usage: usageOf(&res.RunOutcome)}
	if out.Log == nil {
		out.Log = []logLine{}
	}
	if res.Output != nil {
		stdout, stderr := protocol.Bytes(res.Output.Stdout), protocol.Bytes(res.Output.Stderr)
		out.Stdout, out.Stderr = &stdout, &stderr
	}
	text := newText("")
	text.output("output", "output", res.PluginOutput, true)
	if res.PluginOutputTruncated {
		text.add("\n(output truncated at limits.outputBytes)")
	}
	if res.Output != nil {
		streamsText(text, res.Output.Stdout, res.Output.Stderr, "")
	}
	n := len(lines)
	if res.LogDropped > 0 {
		n++
	}
	text.lines("log", "log", n, func(i int) string {
		if i == len(lines) {
			return "(" + strconv.Itoa(res.LogDropped) + " lines dropped: the call did not grant log)"
		}
		return lines[i].Level + ": " + lines[i].Line
	})
	return outcome{output: out, text: text.String()}
}
