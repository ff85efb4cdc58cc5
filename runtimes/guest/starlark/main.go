//go:build wasip1

// Command starlark is the Starlark runtime guest: an Extism plugin (a WASI
// reactor) whose one function, eval, runs a snippet in the instance's
// session. Build: make runtimes.
package main

import (
	"os"

	"github.com/sandboxd/sandboxd/runtimes/guest/internal/plugin"
	"github.com/sandboxd/sandboxd/runtimes/script"
	"github.com/sandboxd/sandboxd/runtimes/starlark"
)

var session = starlark.New(os.Stdout)

// eval answers {"code": …, "input": …} with {"value": …} or {"error": …}.
//
//go:wasmexport eval
func eval() int32 { return plugin.Eval(session) }

// The first evaluation in an interpreter costs more than the next ones
// (the interpreter's and Go's lazily built tables): made here, at the
// start, it is not the first snippet's.
func init() { script.Warm(session, "[0, 'warm'][0]") }

func main() {}
