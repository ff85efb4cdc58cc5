package rpc

import (
	"context"

	"github.com/sandboxd/sandboxd/protocol"
)

// Engine is what the server needs to compile and run modules. It speaks
// protocol types only, so the server builds without cgo; cmd/sandboxd
// adapts *sandbox.Engine to it, and tests may use a fake.
//
// Compile is called from the prepare stage, one goroutine per admitted
// request, so several calls may be in progress at once (at most the
// server's MaxQueue); it must return a cached module without waiting for
// other compiles, and honour ctx. Run is called by at most MaxConcurrency
// jobs at once (its run slots) and must honour ctx within a few ticks. Errors that
// describe an outcome are *protocol.Error or implement protocol.Outcome;
// anything else is reported as kind host.
type Engine interface {
	Compile(ctx context.Context, src protocol.Source) (Module, protocol.CompileInfo, error)
	Run(ctx context.Context, mod Module, run protocol.Run) (*protocol.RunOutcome, error)
	CacheStats() protocol.CacheStats
}

// Module is a compiled module as the engine hands it back: the server
// reads its description and passes it to Run.
type Module interface {
	Info() *protocol.ModuleInfo
}
