//go:build wasip1

// Package plugin is the Extism side of the runtime guests: it reads the
// plugin input, answers it through script.Handle and sets the output.
package plugin

import (
	"github.com/extism/go-pdk"

	"github.com/sandboxd/sandboxd/runtimes/script"
)

// reseeded is whether this instance's session has its own random seed.
var reseeded bool

// Eval is the body of a guest's exported eval: 0 with the output set, or
// 1 with the plugin error set for a request that is not one (the host
// reports it as plugin_error; a script error is an output).
func Eval(s script.Session) int32 {
	if !reseeded {
		// The host pre-initialises the guest: every instance starts
		// with the random state _initialize left (script.Random).
		reseeded = true
		if r, ok := s.(script.Reseeder); ok {
			r.Reseed()
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
