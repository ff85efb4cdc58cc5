// Package js runs JavaScript snippets with goja, keeping one interpreter's
// state from one evaluation to the next.
//
// The value of a snippet is its completion value (what `eval` would
// return: the last expression statement evaluated); a promise it ends with
// is settled first. See runtimes/README.md for the value, input and error
// rules.
package js

import (
	"encoding/json"
	"io"
	"reflect"

	"github.com/dop251/goja"
	"github.com/dop251/goja/parser"

	"github.com/sandboxd/sandboxd/runtimes/script"
)

// MaxCallDepth bounds the call stack (goja counts JavaScript and native
// frames): deeper recursion is a RangeError, a script error. JavaScript
// calling JavaScript costs no Go stack, but a call through a native
// function (Array.prototype.map, sort's comparator, a getter, f.call…)
// nests Go calls, and under wasmtime those use the native wasm stack
// (512 KiB by default): measured there, the shallowest such path traps
// at about 2,500 frames, so 1,000 leaves a margin of 2.5.
const MaxCallDepth = 1_000

// scriptName names the snippet in stack traces: "at snippet:1:5".
const scriptName = "snippet"

// Session is one JavaScript interpreter. Not safe for concurrent use.
type Session struct {
	vm     *goja.Runtime
	stdout io.Writer
	stderr io.Writer
	enc    script.Encoder
	guard  script.Guard
	random *script.Random // Math.random's
}

// New makes a session whose console writes to stdout (log, info, debug)
// and stderr (warn, error); a nil writer discards.
func New(stdout, stderr io.Writer) *Session {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	s := &Session{vm: goja.New(), stdout: stdout, stderr: stderr, guard: script.Guard{Interpreter: "JavaScript"},
		random: script.NewRandom()}
	s.vm.SetRandSource(s.random.Float64)
	s.vm.SetMaxCallStackSize(MaxCallDepth)
	s.installConsole()
	return s
}

// StartInstance gives the session's Math.random a seed from the host's
// entropy (script.InstanceStarter, script.Random say why).
func (s *Session) StartInstance() { s.random.Reseed() }

// Eval runs code with the global `input` set to input (JSON; nil is
// null) and returns the snippet's value as JSON.
func (s *Session) Eval(code string, input json.RawMessage) (json.RawMessage, *script.Error) {
	return script.Eval(s, code, input)
}

// EvalInput is Eval with the input already parsed.
func (s *Session) EvalInput(code string, input *script.Value) (json.RawMessage, *script.Error) {
	return s.guard.Run(func() (json.RawMessage, *script.Error) { return s.eval(code, input) })
}

func (s *Session) eval(code string, input *script.Value) (json.RawMessage, *script.Error) {
	if err := s.vm.GlobalObject().DefineDataProperty("input", s.fromInput(input), goja.FLAG_TRUE, goja.FLAG_TRUE, goja.FLAG_TRUE); err != nil {
		// An earlier snippet froze the global object or made input
		// non-configurable: no evaluation can get its input again.
		return nil, script.Fatalf("the JavaScript runtime cannot set the global input: " + s.scriptError(err).Message)
	}
	// No source maps: a snippet's positions are its own (and looking
	// for a sourceMappingURL comment cost every evaluation).
	ast, err := parser.ParseFile(nil, scriptName, code, 0, parser.WithDisableSourceMaps)
	if err != nil { // parser.ErrorList: goja.Compile would drop its positions
		return nil, s.scriptError(err)
	}
	prg, err := goja.CompileAST(ast, false)
	if err != nil {
		return nil, s.scriptError(err)
	}
	result, err := s.vm.RunProgram(prg)
	if err != nil {
		return nil, s.scriptError(err)
	}
	if p := promise(result); p != nil {
		switch p.State() {
		case goja.PromiseStateFulfilled:
			result = p.Result()
		case goja.PromiseStateRejected:
			return nil, s.thrown(p.Result(), nil, "Uncaught (in promise) ")
		default:
			return nil, script.Errorf("the snippet's value is a promise that never settled")
		}
	}
	return s.toJSON(result)
}

// promise is v as a promise, or nil. (Export only a promise: exporting an
// array copies it whole.)
func promise(v goja.Value) *goja.Promise {
	if obj, ok := v.(*goja.Object); ok && obj.ExportType() == promiseType {
		p, _ := obj.Export().(*goja.Promise)
		return p
	}
	return nil
}

var promiseType = reflect.TypeOf((*goja.Promise)(nil))
