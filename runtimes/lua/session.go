// Package lua runs Lua snippets with gopher-lua (Lua 5.1), keeping one
// interpreter's state (its globals) from one evaluation to the next.
//
// The value of a snippet is what its chunk returns; a snippet that is a
// bare expression is evaluated as `return <expression>`, as the Lua 5.4
// REPL does. See runtimes/README.md for the value, input and error rules.
package lua

import (
	"bufio"
	"encoding/json"
	"io"
	"runtime"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"

	"github.com/sandboxd/sandboxd/runtimes/script"
)

// MaxCallDepth bounds the call stack: deeper recursion is the Lua error
// "stack overflow", a script error. Lua calling Lua costs no Go stack;
// calls through Go functions (pcall, metamethods, sort comparators, gsub)
// nest Go calls, which under wasmtime use the native wasm stack (512 KiB
// by default): measured there, 2,000 frames through table.sort still fit.
// The bound is lower for two costs that grow with it: gopher-lua builds an
// error's traceback in time quadratic in the depth (an overflow at 2,000
// frames cost 237 M fuel in the guest, at 1,000 about a quarter), and it
// allocates the whole call stack (80 bytes a frame) for the interpreter
// and again for each coroutine. (Its growing call stack is not used: at
// its limit it fails with a Go panic, and under pcall with a nil
// dereference, instead of raising "stack overflow".)
const MaxCallDepth = 1_000

// The value stack: 4,096 slots (64 KiB) at first, growing by as many up to
// 256 Ki slots (4 MiB); past that, the Lua error "registry overflow".
const (
	registrySize     = 4 << 10
	registryGrowStep = 4 << 10
	registryMaxSize  = 256 << 10
)

// chunkName names the snippet in messages: "snippet:3: attempt to …".
const chunkName = "snippet"

// Session is one Lua interpreter. Not safe for concurrent use.
type Session struct {
	L       *lua.LState
	stdout  io.Writer
	arrayMT *lua.LTable // marks tables made from JSON arrays
	enc     script.Encoder
	guard   script.Guard
	random  *script.Random // math.random's

	clockZero time.Time // os.clock's zero, on the monotonic clock

	// The snippet's text and the buffer the parser reads it through,
	// kept from one evaluation to the next: the parser takes a
	// *bufio.Reader as it is, instead of allocating 4 KiB per parse.
	src strings.Reader
	buf *bufio.Reader
}

// New makes a session whose print and io.write write to stdout; a nil
// writer discards. Only the libraries that touch nothing outside the
// interpreter are open: base (without dofile, loadfile, require), table,
// string, math, coroutine, os.time/clock/date/difftime and io.write.
func New(stdout io.Writer) *Session {
	if stdout == nil {
		stdout = io.Discard
	}
	L := lua.NewState(lua.Options{
		CallStackSize:    MaxCallDepth,
		RegistrySize:     registrySize,
		RegistryGrowStep: registryGrowStep,
		RegistryMaxSize:  registryMaxSize,
		SkipOpenLibs:     true,
	})
	s := &Session{L: L, stdout: stdout, arrayMT: L.NewTable(), guard: script.Guard{Interpreter: "Lua"}, random: script.NewRandom(), clockZero: time.Now()}
	s.buf = bufio.NewReaderSize(&s.src, parseBufferBytes)
	s.arrayMT.RawSetString("__name", lua.LString("array"))
	s.openLibs()
	return s
}

// StartInstance gives the session's math.random a seed from the host's
// entropy and starts os.clock at zero (script.InstanceStarter says why).
func (s *Session) StartInstance() {
	s.random.Reseed()
	s.clockZero = time.Now()
}

// Eval runs code with the global `input` set to input (JSON; nil is
// null) and returns the snippet's value as JSON.
func (s *Session) Eval(code string, input json.RawMessage) (json.RawMessage, *script.Error) {
	return script.Eval(s, code, input)
}

// EvalInput is Eval with the input already parsed.
func (s *Session) EvalInput(code string, input *script.Value) (json.RawMessage, *script.Error) {
	value, err := s.guard.Run(func() (json.RawMessage, *script.Error) { return s.eval(code, input) })
	// gopher-lua's compiler allocates about 30 KB a chunk, so the
	// guest's collector starts often. A guest has one thread and no
	// preemption: the collector's background worker runs only when the
	// evaluation yields, so a collection would otherwise creep on
	// through many evaluations in allocation assists, each paying the
	// write barrier meanwhile (the p90 of `1+1` was twice its median).
	// Yielding lets the worker finish it in the evaluation that started
	// it. (It costs about 4,000 instructions, as much as a whole plugin
	// call: the other runtimes, which allocate a tenth as much, do not.)
	runtime.Gosched()
	return value, err
}

func (s *Session) eval(code string, input *script.Value) (json.RawMessage, *script.Error) {
	L := s.L
	// Raw: a metamethod an earlier snippet put on _G (a strict mode's
	// __newindex that refuses new globals) must not run, or fail, here.
	L.G.Global.RawSetString("input", s.fromInput(input))
	fn, err := s.load("return " + code)
	if err != nil {
		fn, err = s.load(code)
	}
	if err != nil {
		return nil, syntaxError(err)
	}
	base := L.GetTop()
	L.Push(fn)
	if err := L.PCall(0, lua.MultRet, nil); err != nil {
		L.SetTop(base)
		return nil, s.runtimeError(err)
	}
	results := make([]lua.LValue, 0, L.GetTop()-base)
	for i := base + 1; i <= L.GetTop(); i++ {
		results = append(results, L.Get(i))
	}
	L.SetTop(base)
	return s.toJSON(results)
}

// parseBufferBytes is the size of the buffer gopher-lua's parser reads
// through (parse.NewScanner's).
const parseBufferBytes = 4 << 10

// load is LState.Load with the session's buffer: code parsed and
// compiled into a function of the globals.
func (s *Session) load(code string) (*lua.LFunction, error) {
	s.src.Reset(code)
	s.buf.Reset(&s.src)
	chunk, err := parse.Parse(s.buf, chunkName)
	if err != nil {
		return nil, err
	}
	proto, err := lua.Compile(chunk, chunkName)
	if err != nil {
		return nil, err
	}
	return s.L.NewFunctionFromProto(proto), nil
}
