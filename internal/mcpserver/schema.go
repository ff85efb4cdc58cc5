package mcpserver

import (
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

// The tools' JSON Schemas. The input schemas say what args.go reads (and
// TestSchemasAgreeWithTheReader checks that they refuse what it refuses);
// the limits' maximums are the operator's, so a client sees the ceiling
// before it asks. An output schema allows a success (its fields required)
// or a failure ({"error": …}, with a WASI program's output until it
// stopped).

// objectSchema is an object schema of exactly the given properties, in order
// (name, schema, name, schema, ...).
func objectSchema(required []string, props ...any) *jsonschema.Schema {
	s := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{}, Required: required,
		AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}}}
	for i := 0; i < len(props); i += 2 {
		name := props[i].(string)
		s.Properties[name] = props[i+1].(*jsonschema.Schema)
		s.PropertyOrder = append(s.PropertyOrder, name)
	}
	return s
}

func typed(t, description string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: t, Description: description}
}

// mapOf is an object with any keys, at most max, each of schema v.
func mapOf(v *jsonschema.Schema, max int, description string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "object", AdditionalProperties: v, MaxProperties: jsonschema.Ptr(max), Description: description}
}

// arrayOf is an array of at most max elements of schema v.
func arrayOf(v *jsonschema.Schema, max int, description string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "array", Items: v, MaxItems: jsonschema.Ptr(max), Description: description}
}

// bytesIn is a bytes argument: a string, {"text"} or {"base64"}.
func bytesIn(description string) *jsonschema.Schema {
	return &jsonschema.Schema{Description: description, AnyOf: []*jsonschema.Schema{
		{Type: "string"},
		objectSchema([]string{"text"}, "text", typed("string", "")),
		objectSchema([]string{"base64"}, "base64", &jsonschema.Schema{Type: "string", ContentEncoding: "base64"}),
	}}
}

// bytesOut is bytes in an output: {"text"} when they are UTF-8 (and that
// is no longer than base64), else {"base64"}.
func bytesOut(description string) *jsonschema.Schema {
	return &jsonschema.Schema{Description: description, OneOf: []*jsonschema.Schema{
		objectSchema([]string{"text"}, "text", typed("string", "")),
		objectSchema([]string{"base64"}, "base64", &jsonschema.Schema{Type: "string", ContentEncoding: "base64"}),
	}}
}

func (s *Server) moduleSchema() *jsonschema.Schema {
	props := []any{
		"wat", &jsonschema.Schema{Type: "string", MinLength: jsonschema.Ptr(1), Description: "WebAssembly text"},
		"base64", &jsonschema.Schema{Type: "string", ContentEncoding: "base64", Description: "a binary .wasm module, base64 (standard alphabet, padded)"},
	}
	one := []*jsonschema.Schema{{Required: []string{"wat"}}, {Required: []string{"base64"}}}
	if len(s.opts.ModuleDirs) > 0 {
		props = append(props, "path", typed("string", pathNote(s.opts.ModuleDirs)))
		one = append(one, &jsonschema.Schema{Required: []string{"path"}})
	}
	m := objectSchema(nil, props...)
	m.OneOf, m.Description = one, "the module: exactly one of these"
	return m
}

// limitsSchema lists every limit a call may lower (or raise up to the
// operator's maximum), with the default and the maximum.
func (s *Server) limitsSchema(withVarBytes bool) *jsonschema.Schema {
	var props []any
	add := func(name string, def, most uint64, what string) {
		props = append(props, name, &jsonschema.Schema{Type: "integer", Minimum: jsonschema.Ptr(1.0), Maximum: jsonschema.Ptr(float64(most)),
			Description: fmt.Sprintf("%s; default %d, at most %d", what, def, most)})
	}
	for _, f := range limits.Fields() {
		add(f.Name, f.Get(s.opts.Defaults), f.Get(s.opts.Maximums), limitNotes[f.Name])
	}
	if withVarBytes {
		add("varBytes", s.opts.DefaultVarBytes, s.opts.MaxVarBytes, "bytes of the plugin's vars, keys and values together")
	}
	l := objectSchema(nil, props...)
	l.Description = "fences of this call; each defaults to the operator's default and may not pass the operator's maximum"
	return l
}

var limitNotes = map[string]string{
	"fuel":               "instruction budget (about one unit per wasm instruction)",
	"timeoutMs":          "wall-clock deadline in milliseconds",
	"memoryBytes":        "bytes of all linear memories and table storage",
	"tableElements":      "elements of each table",
	"instances":          "wasm instances in the store",
	"memories":           "linear memories",
	"logBytes":           "bytes of log lines kept",
	"outputBytes":        "bytes of stdout, and of stderr, kept (each); for a plugin, of its output",
	"compileTimeoutMs":   "compile deadline in milliseconds, for a module not compiled before",
	"compileMemoryBytes": "memory of that compile",
}

func (s *Server) wasiInputSchema() *jsonschema.Schema {
	return objectSchema([]string{"module"},
		"module", s.moduleSchema(),
		"args", arrayOf(typed("string", ""), protocol.MaxWASIArgs, "the program's arguments after argv[0] (argv[0] is the file's name, or the module's id)"),
		"env", mapOf(typed("string", ""), protocol.MaxWASIEnv, "the whole environment: nothing comes from the host"),
		"stdin", bytesIn("what the program reads on stdin, then end of file: a string, {\"text\"} or {\"base64\"}"),
		"files", mapOf(bytesIn(""), protocol.MaxWASIFiles, "read-only files by absolute guest path (e.g. \"/data/in.json\"): a string, {\"text\"} or {\"base64\"} each"),
		"dirs", arrayOf(objectSchema([]string{"host", "guest"},
			"host", typed("string", "a directory at or under one the operator allowed (--allow-dir)"),
			"guest", typed("string", "where the program sees it, e.g. /data"),
			"writable", typed("boolean", "default false: read and list only"),
		), protocol.MaxWASIDirs, dirsNote(s.opts.WASIDirs)),
		"limits", s.limitsSchema(false),
	)
}

func (s *Server) exportInputSchema() *jsonschema.Schema {
	return objectSchema([]string{"module", "function"},
		"module", s.moduleSchema(),
		"function", &jsonschema.Schema{Type: "string", MinLength: jsonschema.Ptr(1), Description: "the exported function to call"},
		"args", arrayOf(&jsonschema.Schema{Types: []string{"number", "string", "object"}}, rpc.MaxArgs,
			"one per parameter: i32 a number; i64 a decimal string or a number; f32, f64 a number or \"NaN\", \"Infinity\", \"-Infinity\"; or {\"type\", \"value\"} / {\"type\", \"bits\"}"),
		"capabilities", objectSchema(nil,
			"log", typed("boolean", "grant host::log(ptr i32, len i32): lines come back in log"),
			"clock", typed("boolean", "grant host::now_ns() -> i64, monotonic ns since the run began"),
			"random", typed("boolean", "grant host::random() -> i64, seeded by seed"),
			"seed", &jsonschema.Schema{Type: "integer", Minimum: jsonschema.Ptr(0.0), Description: "seed of host::random (default 0)"},
		),
		"limits", s.limitsSchema(false),
	)
}

func (s *Server) pluginInputSchema() *jsonschema.Schema {
	return objectSchema([]string{"module", "function"},
		"module", s.moduleSchema(),
		"function", &jsonschema.Schema{Type: "string", MinLength: jsonschema.Ptr(1), Description: "the plugin function to call"},
		"input", bytesIn("the plugin's input: a string, {\"text\"} or {\"base64\"}"),
		"config", mapOf(typed("string", ""), rpc.MaxConfigKeys, "what the plugin's config_get reads"),
		"wasi", typed("boolean", "grant WASI (no arguments, files or directories): for plugins built for wasip1"),
		"log", typed("boolean", "grant the log functions (default true): lines come back in log; false refuses a plugin that imports them"),
		"limits", s.limitsSchema(true),
	)
}

// Outputs.

func usageProps() []any {
	return []any{
		"fuelConsumed", typed("integer", "fuel the run used"),
		"peakMemoryBytes", typed("integer", "the most memory and table storage it held"),
		"elapsedMicros", typed("integer", "time it took, compile excluded"),
	}
}

var usageFields = []string{"fuelConsumed", "peakMemoryBytes", "elapsedMicros"}

func errorSchema() *jsonschema.Schema {
	var kinds []any
	for _, k := range protocol.Kinds() {
		kinds = append(kinds, string(k.Kind))
	}
	kinds = append(kinds, KindInvalidParams, KindSessionClosed, KindTooManySessions)
	return objectSchema([]string{"kind", "message"},
		"kind", &jsonschema.Schema{Type: "string", Enum: kinds, Description: "why the call failed: the protocol's kinds of docs/protocol.md, invalid_params for arguments refused before anything ran, session_closed or too_many_sessions"},
		"message", typed("string", ""),
		"field", typed("string", "the refused argument (invalid_params)"),
		"data", typed("object", "the kind's details, as the sidecar's error data (docs/protocol.md): budget, timeoutMs, limit, trapCode, frames, fuelConsumed, ..."),
	)
}

// output is an output schema: success's properties and the usage (all
// required), or error (beside which success's properties may be given).
func output(success []any) *jsonschema.Schema {
	props := append(append(success, usageProps()...), "error", errorSchema())
	s := objectSchema(nil, props...)
	var required []string
	for i := 0; i < len(success); i += 2 {
		required = append(required, success[i].(string))
	}
	s.AnyOf = []*jsonschema.Schema{{Required: append(required, usageFields...)}, {Required: []string{"error"}}}
	return s
}

func wasiOutputSchema() *jsonschema.Schema {
	return output([]any{
		"exitCode", typed("integer", "the program's exit code (0 when _start returned)"),
		"stdout", bytesOut("what it wrote to stdout (on failure, until it stopped)"),
		"stderr", bytesOut("what it wrote to stderr (on failure, until it stopped)"),
		"outputTruncated", typed("boolean", "a stream passed limits.outputBytes and was cut"),
	})
}

func exportOutputSchema() *jsonschema.Schema {
	return output([]any{
		"values", arrayOf(objectSchema([]string{"type", "value"},
			"type", &jsonschema.Schema{Type: "string", Enum: []any{"i32", "i64", "f32", "f64"}},
			"value", &jsonschema.Schema{Types: []string{"number", "string"}, Description: "i32 a number, i64 a decimal string, floats a number or \"NaN\", \"Infinity\", \"-Infinity\""},
			"bits", typed("string", "a float's exact bits, hex"),
		), rpc.MaxArgs, "the function's results"),
		"log", arrayOf(typed("string", ""), 1<<30, "host::log lines"),
		"logTruncated", typed("boolean", "lines were cut or dropped by limits.logBytes"),
	})
}

func pluginOutputSchema() *jsonschema.Schema {
	s := output([]any{
		"output", bytesOut("the bytes the plugin output"),
		"outputTruncated", typed("boolean", "the output passed limits.outputBytes and was cut"),
		"log", arrayOf(objectSchema([]string{"level", "line"}, "level", typed("string", ""), "line", typed("string", "")), 1<<30, "the plugin's log lines"),
		"logTruncated", typed("boolean", "lines were cut or dropped by limits.logBytes"),
	})
	// A plugin granted WASI also has its stdout and stderr.
	s.Properties["stdout"], s.Properties["stderr"] = bytesOut("what a plugin granted wasi wrote to stdout"), bytesOut("... and to stderr")
	s.PropertyOrder = append(s.PropertyOrder, "stdout", "stderr")
	return s
}
