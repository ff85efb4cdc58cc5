// Package snippet runs snippets of JavaScript, Lua and Starlark with the
// interpreter runtimes of runtimes/ (docs/snippets.md): each an Extism
// plugin the engine runs like any other, under the same fences. A Runner
// finds the runtimes (next to the binary, FindDir), loads each once —
// its compiled artefact mapped, or compiled once and stored — and keeps
// started interpreters ahead of need (spares.go).
package snippet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox"
)

// Runner evaluates snippets on an engine. It is safe for concurrent use.
type Runner struct {
	eng      *sandbox.Engine
	cfg      Config
	runtimes map[protocol.Language]*runtime

	ctx    context.Context // the spares' refills; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the refills

	mu     sync.Mutex
	closed bool
}

// New returns a Runner that evaluates on eng under cfg. Nothing is read
// or compiled until a language is first used (or Load), but the runtimes'
// directory and the compiled ones that exist are checked now: one another
// user could write or replace is an error naming it and the fix
// (checkRuntimeDirs).
func New(eng *sandbox.Engine, cfg Config) (*Runner, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkRuntimeDirs(cfg); err != nil {
		return nil, err
	}
	r := &Runner{eng: eng, cfg: cfg, runtimes: map[protocol.Language]*runtime{}}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	for _, lang := range protocol.Languages() {
		r.runtimes[lang] = &runtime{lang: lang, file: runtimeFile(cfg.Dir, lang), loading: make(chan struct{}, 1)}
	}
	return r, nil
}

// Close stops the spares' refills, waits for them and releases every
// spare. Evaluations under way finish; later ones fail.
func (r *Runner) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
	for _, rt := range r.runtimes {
		if p := rt.sparePool(); p != nil {
			p.drain()
		}
	}
	return nil
}

// Load loads lang's runtime: compiles it now if this build has not (make
// build does this for every language), so that no evaluation waits.
func (r *Runner) Load(ctx context.Context, lang protocol.Language) error {
	rt, err := r.runtime(lang)
	if err != nil {
		return err
	}
	_, err = rt.load(ctx, r)
	return err
}

// runtime is lang's runtime, or an error naming the languages.
func (r *Runner) runtime(lang protocol.Language) (*runtime, error) {
	rt, ok := r.runtimes[lang]
	if !ok {
		_, err := protocol.ParseLanguage(string(lang))
		return nil, &sandbox.Error{Kind: sandbox.KindHost, Message: "language: " + err.Error()}
	}
	return rt, nil
}

// Eval evaluates e in a fresh interpreter (a spare when one fits) and
// releases it. A snippet's own failure is a *sandbox.Error of kind
// script_error; a fence's, its kind, as for any run.
func (r *Runner) Eval(ctx context.Context, e protocol.Eval) (*protocol.EvalOutcome, error) {
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	rt, err := r.runtime(e.Language)
	if err != nil {
		return nil, err
	}
	l, err := resolveLimits(e.Limits, r.Defaults(e.Language), r.cfg.Maximums)
	if err != nil {
		return nil, &sandbox.Error{Kind: sandbox.KindHost, Message: "limits." + err.Error()}
	}
	input, err := request(e.Snippet, l.MemoryBytes)
	if err != nil {
		return nil, err
	}
	m, err := rt.load(ctx, r)
	if err != nil {
		return nil, err
	}
	pool, in := r.takeSpare(rt, l)
	if in == nil {
		if in, err = r.start(ctx, m, e.Language, l, false); err != nil {
			if pool != nil {
				r.refill(pool)
			}
			return nil, uncharged(err)
		}
	}
	// An interpreter that cannot go on is released here anyway.
	defer r.afterEval(in, pool)
	return evaluate(ctx, in.Call, e.Language, input, e.Snippet.Output, callLimits(l), nil)
}

// afterEval releases a one-shot evaluation's instance once its answer is
// made, then refills pool (nil: none), on a goroutine the Runner owns
// (Close waits for it; once closed, it releases in place). Neither is
// anything the caller waits for: freeing the store gives its memory back
// to the engine's pool (zeroing what stays resident, dropping the rest,
// where each dropped page is a trip out of the reference VM), and a spare
// started while the evaluation ran competed with it for the CPU (a
// one-shot `1+1` with a spare ready took 2.5–3.2 ms at load 9–12 with
// both on its path, 1.7–2.0 ms with the release after it).
func (r *Runner) afterEval(in *sandbox.Instance, pool *sparePool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		in.Release()
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		in.Release()
		if pool != nil {
			r.refill(pool)
		}
	}()
}

// uncharged is the error of an interpreter's start that failed (a fence,
// a cancellation) as an evaluation's: the start is sandboxd's work, never
// charged to the evaluation, so the usage it reports is zero.
func uncharged(err error) error {
	var se *sandbox.Error
	if errors.As(err, &se) && se.Usage != nil {
		se.Usage = &sandbox.Usage{}
	}
	return err
}

func (r *Runner) checkOpen() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return &sandbox.Error{Kind: sandbox.KindHost, Message: "the snippet runner is closed"}
	}
	return nil
}

// Defaults are the limits an evaluation in lang gets for those it leaves
// out: the Runner's defaults (Config.Defaults) with a memory cap of at
// least the language's (64 MiB for js, 32 MiB for lua and starlark),
// each lowered to the Runner's maximums.
func (r *Runner) Defaults(lang protocol.Language) limits.Limits {
	l, _ := resolveLimits(limits.Limits{}, languageDefaults(lang, r.cfg.Defaults), r.cfg.Maximums)
	return l
}

// spareLimits are the limits of lang's spares: an evaluation that sets
// no store limit of its own.
func (r *Runner) spareLimits(lang protocol.Language) limits.Limits { return r.Defaults(lang) }

// Installed lists the languages whose runtime file is in the runtimes'
// directory (loaded or not: a file that is not a runtime fails when
// first used).
func (r *Runner) Installed() []protocol.Language {
	var langs []protocol.Language
	for _, lang := range protocol.Languages() {
		if r.runtimes[lang].loaded() != nil {
			langs = append(langs, lang)
		} else if st, err := os.Stat(r.runtimes[lang].file); err == nil && st.Mode().IsRegular() {
			langs = append(langs, lang)
		}
	}
	return langs
}

// takeSpare returns rt's spare pool if an instance for l may come from it
// (its store fits l), and one of its spares, or nil when none is ready.
// The caller refills the pool (afterEval).
func (r *Runner) takeSpare(rt *runtime, l limits.Limits) (*sparePool, *sandbox.Instance) {
	p := rt.sparePool()
	if p == nil || shapeOf(l) != shapeOf(r.spareLimits(rt.lang)) {
		return nil, nil
	}
	return p, p.take()
}

// refill starts p's refill unless the Runner is closed.
func (r *Runner) refill(p *sparePool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || !p.startFilling() {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		p.fill(r.ctx)
	}()
}

func (r *Runner) notice(message string) {
	if r.cfg.Notice != nil {
		r.cfg.Notice(message)
	}
}

// request is the runtime's input for s: {"code", "input", "memoryBytes"},
// the last the memory cap of the instance that evaluates it (the guest
// fits its garbage collector to it: runtimes/README.md).
func request(s protocol.Snippet, memoryBytes uint64) ([]byte, error) {
	if !utf8.ValidString(s.Code) {
		return nil, &sandbox.Error{Kind: sandbox.KindHost, Message: "code: not valid UTF-8"}
	}
	if err := protocol.CheckEvalInput(s.Input); err != nil {
		return nil, &sandbox.Error{Kind: sandbox.KindHost, Message: err.Error()}
	}
	req := struct {
		Code        string          `json:"code"`
		Input       json.RawMessage `json:"input,omitempty"`
		MemoryBytes uint64          `json:"memoryBytes,omitempty"`
	}{s.Code, s.Input, memoryBytes}
	return json.Marshal(req)
}

// answerEnvelopeBytes is what a runtime's answer may take beyond the
// value: {"value":…}, or a script error's message (1 KiB) and text
// (4 KiB), each escaped as JSON (at most 6 bytes a byte), and its keys.
const answerEnvelopeBytes = 6*(protocol.MaxScriptMessageBytes+protocol.MaxScriptTextBytes) + 1<<10

// guestAnswer is what a runtime's eval answers (runtimes/README.md).
type guestAnswer struct {
	Value json.RawMessage `json:"value"`
	Error *struct {
		Message      string `json:"message"`
		Line, Column int
		Text         string `json:"text"`
		// Fatal: the interpreter cannot go on (a Go panic in it, or the
		// runtime unable to set up an evaluation); every later
		// evaluation in it would fail the same way.
		Fatal bool `json:"fatal"`
	} `json:"error"`
}

// evaluate runs one evaluation with call (an instance's Call, or a
// turn's): the runtime's eval called with input under cl (every field
// set), its answer turned into an outcome or a script error. When the
// runtime says its interpreter cannot go on, broken, if set, is told why
// before evaluate returns (a session closes itself).
func evaluate(ctx context.Context, call func(context.Context, sandbox.CallRequest) (*sandbox.CallResult, error),
	lang protocol.Language, input []byte, output func(string, []byte), cl sandbox.CallLimits, broken func(reason string)) (*protocol.EvalOutcome, error) {
	// outputBytes holds the value's JSON; the answer around it, or a
	// script error's (whose message and text the runtime bounds), is
	// sandboxd's and may take answerEnvelopeBytes more.
	cl.PluginOutputBytes = cl.OutputBytes + answerEnvelopeBytes
	res, err := call(ctx, sandbox.CallRequest{Function: evalFunction, Input: input, Limits: cl, Output: output})
	if err != nil {
		var se *sandbox.Error
		if errors.As(err, &se) && se.Kind == sandbox.KindPluginError {
			// The request was checked before: the runtime refusing it is
			// sandboxd's fault, not the snippet's.
			return nil, &sandbox.Error{Kind: sandbox.KindHost, Message: fmt.Sprintf("the %s runtime refused the request: %s", lang, se.Message), Usage: se.Usage}
		}
		return nil, err
	}
	usage := res.Usage
	tooLarge := func() error {
		return &sandbox.Error{Kind: sandbox.KindScriptError, Usage: &usage, Output: res.Output,
			Message: fmt.Sprintf("the value's JSON is larger than limits.outputBytes (%d bytes)", cl.OutputBytes),
			Script:  &sandbox.ScriptError{Language: lang}}
	}
	if res.PluginOutputTruncated {
		return nil, tooLarge()
	}
	var a guestAnswer
	if err := json.Unmarshal(res.PluginOutput, &a); err != nil || (a.Error == nil && len(a.Value) == 0) {
		return nil, &sandbox.Error{Kind: sandbox.KindHost, Usage: &usage,
			Message: fmt.Sprintf("the %s runtime answered %d bytes that are not {\"value\"} or {\"error\"}", lang, len(res.PluginOutput))}
	}
	if a.Error != nil {
		if a.Error.Fatal && broken != nil {
			broken(fmt.Sprintf("closed after the %s interpreter failed: %s", lang, cut(a.Error.Message, protocol.MaxScriptMessageBytes)))
		}
		return nil, &sandbox.Error{Kind: sandbox.KindScriptError, Usage: &usage, Output: res.Output,
			Message: cut(a.Error.Message, protocol.MaxScriptMessageBytes),
			Script: &sandbox.ScriptError{Language: lang, Line: max(a.Error.Line, 0), Column: max(a.Error.Column, 0),
				Text: cut(a.Error.Text, protocol.MaxScriptTextBytes)}}
	}
	if uint64(len(a.Value)) > cl.OutputBytes {
		return nil, tooLarge()
	}
	o := &protocol.EvalOutcome{Value: a.Value, Usage: protocol.Usage{FuelConsumed: usage.FuelConsumed, PeakMemoryBytes: usage.PeakMemoryBytes},
		Elapsed: res.Elapsed, Queued: res.Queued}
	if res.Output != nil {
		o.Output = &protocol.Output{Stdout: res.Output.Stdout, Stderr: res.Output.Stderr, Truncated: res.Output.Truncated}
	}
	return o, nil
}

// cut bounds s to n bytes on a character boundary (the runtimes already
// do; a runtime is still a guest).
func cut(s string, n int) string {
	s = toValidUTF8(s)
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func toValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
