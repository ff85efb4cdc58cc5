//go:build wasip1

// Package plugin is the Extism side of the runtime guests: it reads the
// plugin input, answers it through script.Handle and sets the output.
package plugin

import (
	"time"

	"github.com/extism/go-pdk"

	"github.com/sandboxd/sandboxd/runtimes/script"
)

// A guest's local time is UTC (docs/snippets.md, "Time and randomness"):
// the host's time zone never reaches a snippet. Go's wasip1 port has no
// zone database and a runtime guest no environment, so Local would be UTC
// anyway; set here, it stays UTC whatever the port comes to read.
func init() { time.Local = time.UTC }

// started is whether this instance's session has read from the host
// what must be the instance's own (script.InstanceStarter).
var started bool

// Eval is the body of a guest's exported eval: 0 with the output set, or
// 1 with the plugin error set for a request that is not one (the host
// reports it as plugin_error; a script error is an output).
func Eval(s script.Session) int32 {
	if !started {
		// The host pre-initialises the guest: every instance starts
		// with the state _initialize left (its random seeds, its
		// clock readings).
		started = true
		if r, ok := s.(script.InstanceStarter); ok {
			r.StartInstance()
		}
	}
	out, err := script.Handle(s, pdk.Input())
	if err != nil {
		pdk.SetError(err)
		return 1
	}
	pdk.Output(out)
	return 0
}
