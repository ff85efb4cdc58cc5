package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// run_snippet: a snippet of JavaScript, Lua or Starlark evaluated in a
// fresh interpreter (docs/snippets.md), its value as JSON, its stdout and
// stderr; a snippet that fails in its own language is a script_error with
// the line and column.

var snippetFields = []string{"language", "code", "input", "limits"}

// snippetOutput is the structured output of an evaluation that returned
// a value (run_snippet, session_eval); failedOutput when it did not.
type snippetOutput struct {
	Language        protocol.Language `json:"language"`
	Value           json.RawMessage   `json:"value"`
	Stdout          protocol.Bytes    `json:"stdout"`
	Stderr          protocol.Bytes    `json:"stderr"`
	OutputTruncated bool              `json:"outputTruncated"`
	usage
}

func (s *Server) snippetTool() *tool {
	return &tool{
		def: &mcp.Tool{
			Name:  "run_snippet",
			Title: "Run a code snippet",
			Description: "Evaluates a snippet of " + s.languagesText() + " in a fresh interpreter in sandboxd, under fuel, " +
				"deadline and memory limits, and returns its value as JSON (JavaScript: the last expression's value; Lua: " +
				"what the chunk returns, or its one expression; Starlark: the last expression's value) with what it " +
				"printed (console.log, print) on stdout and stderr. input is any JSON value, the snippet's global input. " +
				"The interpreters have no file system, network, environment or clock beyond the language's own; nothing " +
				"of an earlier call is visible" + s.sessionsKeepState() + ". A snippet that fails in its language (a syntax " +
				"error, an uncaught exception) comes back as error.kind script_error with data.line, data.column and " +
				"data.text (its stack trace).",
			InputSchema:  s.snippetInputSchema(),
			OutputSchema: s.snippetOutputSchema(),
			Annotations:  annotations(true),
		},
		fields: snippetFields,
		run:    s.runSnippet,
	}
}

func (s *Server) runSnippet(ctx context.Context, c *call) outcome {
	lang, err := s.readLanguage(c.args)
	if err != nil {
		return s.fail(err)
	}
	sn, err := readSnippet(c.args)
	if err != nil {
		return s.fail(err)
	}
	l, err := s.readLimits(c.args, limits.Limits{}, limitFields(), nil) // zero: the runner's default (the operator's; memoryBytes the larger of it and the language's)
	if err != nil {
		return s.fail(err)
	}
	sn.Output = c.progress.output()
	var o *protocol.EvalOutcome
	err = s.withSlot(ctx, func() error {
		var err error
		o, err = s.snip.Eval(ctx, protocol.Eval{Language: lang, Snippet: sn, Limits: l})
		return err
	})
	if err != nil {
		return s.fail(err)
	}
	return evalOutcome(lang, o)
}

// readLanguage reads the language argument: one whose runtime is
// installed.
func (s *Server) readLanguage(args *object) (protocol.Language, error) {
	var name string
	if err := args.string("language", &name); err != nil {
		return "", err
	}
	if !args.has("language") {
		return "", inputErr("language", "is required: one of %s", s.languageNames())
	}
	lang, err := protocol.ParseLanguage(name)
	if err != nil {
		return "", inputErr("language", "%v", err)
	}
	for _, l := range s.languages {
		if l == lang {
			return lang, nil
		}
	}
	return "", inputErr("language", "%s is not installed here: give one of %s", lang, s.languageNames())
}

// readSnippet reads the code and the input of an evaluation.
func readSnippet(args *object) (protocol.Snippet, error) {
	var sn protocol.Snippet
	if err := args.string("code", &sn.Code); err != nil {
		return sn, err
	}
	if !args.has("code") {
		return sn, inputErr("code", "is required: the snippet's text")
	}
	if args.has("input") {
		sn.Input = args.members["input"]
		if err := protocol.CheckEvalInput(sn.Input); err != nil {
			return sn, inputErr("input", "%s", strings.TrimPrefix(err.Error(), "input: "))
		}
	}
	return sn, nil
}

// evalOutcome is the answer of an evaluation that returned a value.
func evalOutcome(lang protocol.Language, o *protocol.EvalOutcome) outcome {
	out := snippetOutput{Language: lang, Value: o.Value, Stdout: protocol.Bytes{}, Stderr: protocol.Bytes{},
		usage: usage{FuelConsumed: o.FuelConsumed, PeakMemoryBytes: o.PeakMemoryBytes, ElapsedMicros: o.Elapsed.Microseconds()}}
	if len(out.Value) == 0 {
		out.Value = json.RawMessage("null")
	}
	text := newText("")
	text.output("value", "value", out.Value, true)
	if o.Output != nil {
		out.Stdout, out.Stderr, out.OutputTruncated = o.Output.Stdout, o.Output.Stderr, o.Output.Truncated
		if o.Output.Truncated {
			text.add("\n(output truncated at limits.outputBytes)")
		}
		streamsText(text, o.Output.Stdout, o.Output.Stderr, "")
	}
	return outcome{output: out, text: text.String()}
}

func (s *Server) languageNames() string {
	names := make([]string, len(s.languages))
	for i, l := range s.languages {
		names[i] = string(l)
	}
	return strings.Join(names, ", ")
}

// sessionsKeepState points run_snippet's description to the session
// tools, where the server offers them.
func (s *Server) sessionsKeepState() string {
	if s.inst == nil {
		return ""
	}
	return " (session_create and session_eval keep state)"
}

// languagesText names the installed languages for a description.
func (s *Server) languagesText() string {
	names := map[protocol.Language]string{protocol.LanguageJS: "JavaScript (js)", protocol.LanguageLua: "Lua 5.1 (lua)",
		protocol.LanguageStarlark: "Starlark, the Python dialect (starlark)"}
	var texts []string
	for _, l := range s.languages {
		texts = append(texts, names[l])
	}
	return strings.Join(texts, ", ")
}

// Schemas.

func (s *Server) languageSchema() *jsonschema.Schema {
	var enum []any
	for _, l := range s.languages {
		enum = append(enum, string(l))
	}
	return &jsonschema.Schema{Type: "string", Enum: enum, Description: "the snippet's language"}
}

func (s *Server) snippetInputSchema() *jsonschema.Schema {
	return objectSchema([]string{"language", "code"},
		"language", s.languageSchema(),
		"code", typed("string", "the snippet"),
		"input", &jsonschema.Schema{Description: "any JSON value (nested at most 1,000 levels): the snippet's global input; default null"},
		"limits", s.snippetLimitsSchema(limitFields(), false),
	)
}

func (s *Server) snippetOutputSchema() *jsonschema.Schema {
	return output([]any{
		"language", s.languageSchema(),
		"value", &jsonschema.Schema{Description: "the snippet's value as JSON (NaN, Infinity and values without a JSON form are null)"},
		"stdout", bytesOut("what the snippet printed to stdout (on failure, until it stopped)"),
		"stderr", bytesOut("what it printed to stderr (console.error, console.warn)"),
		"outputTruncated", typed("boolean", "a stream passed limits.outputBytes and was cut"),
	})
}

// snippetLimitsSchema lists the limits names an evaluation may set, with
// each language's default (the runner's, from the operator's) and the operator's maximum; inSession: the
// defaults are the session's.
func (s *Server) snippetLimitsSchema(names []string, inSession bool) *jsonschema.Schema {
	var props []any
	for _, f := range limits.Fields() {
		if !slices.Contains(names, f.Name) {
			continue
		}
		var defaults []string
		same := true
		for i, l := range s.languages {
			v := f.Get(s.snip.EvalDefaults(l))
			defaults = append(defaults, fmt.Sprintf("%s %d", l, v))
			same = same && (i == 0 || v == f.Get(s.snip.EvalDefaults(s.languages[0])))
		}
		def := strings.Join(defaults, ", ")
		if same && len(s.languages) > 0 {
			def = fmt.Sprint(f.Get(s.snip.EvalDefaults(s.languages[0])))
		}
		if inSession {
			def = "the session's"
		}
		most := f.Get(s.opts.Maximums)
		props = append(props, f.Name, &jsonschema.Schema{Type: "integer", Minimum: jsonschema.Ptr(1.0), Maximum: jsonschema.Ptr(float64(most)),
			Description: fmt.Sprintf("%s; default %s, at most %d", limitNotes[f.Name], def, most)})
	}
	l := objectSchema(nil, props...)
	l.Description = "fences of this evaluation; each defaults to the operator's default, memoryBytes to the larger of the operator's and the language's (the memory cap counts the interpreter), and may not pass the operator's maximum"
	if inSession {
		l.Description = "fences of this evaluation; each defaults to the session's (its session_create limits) and may not pass the operator's maximum"
	}
	return l
}
