package snippet

import (
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox"
)

// languageMemory is the memory cap each language gets by default. The cap
// counts the interpreter itself: after its start JavaScript holds 12.3 MB
// (goja and the Go runtime), Lua 5.4 MB, Starlark 4.5 MB (runtimes/
// README.md, "Limits the guests need"). Under the run default of 16 MiB
// JavaScript has under 4 MiB for the snippet, and a 10,000-element array
// or plain recursion to the depth bound ends in memory_limit_exceeded;
// these leave every language about 50 MiB or 25 MiB of its own.
var languageMemory = map[protocol.Language]uint64{
	protocol.LanguageJS:       64 << 20,
	protocol.LanguageLua:      32 << 20,
	protocol.LanguageStarlark: 32 << 20,
}

// Defaults returns the limits an evaluation in lang gets when it sets
// none and its Runner has no defaults of its own (Config.Defaults): the
// run defaults (limits.Defaults) but the memory cap, which is the
// language's. The rest fit every language as they are: a table of
// 100,000 elements holds JavaScript's 16,602 (Lua 7,673, Starlark 7,621);
// fuel is 2^50, so the deadline (1 s) is the fence a snippet meets (Go
// compiled to wasm burns fuel fast: a JavaScript loop of 100,000 additions
// costs 1.16 G); 1 MiB of log and of each of stdout and stderr, and the
// value's JSON at most outputBytes too. compileTimeoutMs and
// compileMemoryBytes are taken and checked like a run's but have no
// effect: a runtime is compiled once, under its own limits
// (CompileTimeout, CompileMemoryBytes).
func Defaults(lang protocol.Language) limits.Limits {
	return languageDefaults(lang, limits.Defaults())
}

// languageDefaults are run, an operator's run defaults, for lang: the
// memory cap at least the language's, since it counts the interpreter.
func languageDefaults(lang protocol.Language, run limits.Limits) limits.Limits {
	run.MemoryBytes = max(run.MemoryBytes, languageMemory[lang])
	return run
}

// resolveLimits are an evaluation's limits: each field the caller set
// (non-zero), which must lie within max, else the default's, lowered to
// max. A refusal is a *limits.FieldError naming the field.
func resolveLimits(given, defaults, max limits.Limits) (limits.Limits, error) {
	l := defaults
	for _, f := range limits.Fields() {
		if v := f.Get(given); v != 0 {
			f.Set(&l, v)
		} else if f.Get(l) > f.Get(max) {
			f.Set(&l, f.Get(max))
		}
	}
	return l, l.Validate(max)
}

// callLimits are the per-call part of l: what fences one evaluation.
func callLimits(l limits.Limits) sandbox.CallLimits {
	return sandbox.CallLimits{Fuel: l.Fuel, Timeout: l.Timeout, LogBytes: l.LogBytes, OutputBytes: l.OutputBytes}
}

// storeShape is the part of l a store is made with and keeps for its
// life: a spare serves an evaluation only if they agree.
type storeShape struct {
	memoryBytes, tableElements, instances, memories uint64
}

func shapeOf(l limits.Limits) storeShape {
	return storeShape{l.MemoryBytes, l.TableElements, l.Instances, l.Memories}
}
