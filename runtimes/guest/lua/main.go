//go:build wasip1

// Command lua is the Lua runtime guest: an Extism plugin (a WASI
// reactor) whose one function, eval, runs a snippet in the instance's
// session. Build: make runtimes.
package main

import (
	"os"

	"github.com/sandboxd/sandboxd/runtimes/guest/internal/plugin"
	"github.com/sandboxd/sandboxd/runtimes/lua"
	"github.com/sandboxd/sandboxd/runtimes/script"
)

var session = lua.New(os.Stdout)

// eval answers {"code": …, "input": …} with {"value": …} or {"error": …}.
//
//go:wasmexport eval
func eval() int32 { return plugin.Eval(session) }

// The first evaluation in an interpreter costs more than the next ones
// (the interpreter's and Go's lazily built tables): made here, at the
// start, it is not the first snippet's.
func init() { script.Warm(session, "({0, 'warm'})[1]") }

func main() {}
