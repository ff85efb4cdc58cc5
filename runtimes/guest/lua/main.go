//go:build wasip1

// Command lua is the Lua runtime guest: an Extism plugin (a WASI
// reactor) whose one function, eval, runs a snippet in the instance's
// session. Build: make runtimes.
package main

import (
	"os"

	"github.com/sandboxd/sandboxd/runtimes/guest/internal/plugin"
	"github.com/sandboxd/sandboxd/runtimes/lua"
)

var session = lua.New(os.Stdout)

// eval answers {"code": …, "input": …} with {"value": …} or {"error": …}.
//
//go:wasmexport eval
func eval() int32 { return plugin.Eval(session) }

func main() {}
