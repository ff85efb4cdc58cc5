//go:build wasip1

// Command js is the JavaScript runtime guest: an Extism plugin (a WASI
// reactor) whose one function, eval, runs a snippet in the instance's
// session. Build: make runtimes.
package main

import (
	"os"

	"github.com/sandboxd/sandboxd/runtimes/guest/internal/plugin"
	"github.com/sandboxd/sandboxd/runtimes/js"
	"github.com/sandboxd/sandboxd/runtimes/script"
)

var session = js.New(os.Stdout, os.Stderr)

// eval answers {"code": …, "input": …} with {"value": …} or {"error": …}.
//
//go:wasmexport eval
func eval() int32 { return plugin.Eval(session) }

// The first evaluation in an interpreter costs more than the next ones
// (the interpreter's and Go's lazily built tables): made here, at the
// start, it is not the first snippet's.
func init() { script.Warm(session, "[0, 'warm'][0]") }

func main() {}
