package rpc

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// Options configure a Server. Zero fields take the documented defaults.
type Options struct {
	Framing         Framing       // default content-length
	MaxConcurrency  int           // runs executing at once; default runtime.NumCPU()
	MaxQueue        int           // requests waiting (decoding, compiling or queued); default 1024
	MaxMessageBytes int64         // largest accepted message; default 64 MiB
	Defaults        limits.Limits // default limits.Defaults()
	Maximums        limits.Limits // default limits.DefaultMaximums()
	Logger          *slog.Logger  // sidecar diagnostics (stderr); default discards
	Version         string        // reported by initialize
	EngineVersion   string        // reported by initialize as engine.wasmtime
	// MaxQueueBytes bounds the summed message sizes of the requests that
	// wait (decoding, compiling or queued for a run slot); a request that
	// would pass it is answered busy. Default 256 MiB; at least
	// MaxMessageBytes, so that one message of the largest size fits.
	MaxQueueBytes int64
	// OutputHighWater is how many bytes may wait for a parent that is not
	// reading before the server stops reading requests and no new run
	// starts (back-pressure). Default 64 MiB.
	OutputHighWater int64
	// DefaultVarBytes is the limits.varBytes of an instance that sets none
	// (a plugin's vars: keys and values together, and a plugin `run`'s);
	// MaxVarBytes the most an instantiate may ask for. Defaults
	// protocol.DefaultVarBytes (1 MiB) and protocol.MaxVarBytes (64 MiB),
	// which is also the most MaxVarBytes may be.
	DefaultVarBytes, MaxVarBytes uint64
	// DrainTimeout bounds how long the server waits, at the end, for the
	// parent to read what it is owed; after it the output is abandoned
	// (a write deadline, or closing the writer) so Serve returns. Default 1 s.
	DrainTimeout time.Duration
}

// Documented defaults of Options.
const (
	DefaultMaxQueue        = 1024
	DefaultMaxMessageBytes = 64 << 20
	DefaultMaxQueueBytes   = 256 << 20
	DefaultOutputHighWater = 64 << 20
	DefaultDrainTimeout    = time.Second
)

func (o Options) withDefaults() (Options, error) {
	if o.Framing == "" {
		o.Framing = FramingContentLength
	}
	if o.MaxConcurrency == 0 {
		o.MaxConcurrency = runtime.NumCPU()
	}
	if o.MaxQueue == 0 {
		o.MaxQueue = DefaultMaxQueue
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.MaxQueueBytes == 0 {
		o.MaxQueueBytes = max(DefaultMaxQueueBytes, o.MaxMessageBytes)
	}
	if o.Defaults == (limits.Limits{}) {
		o.Defaults = limits.Defaults()
	}
	if o.Maximums == (limits.Limits{}) {
		o.Maximums = limits.DefaultMaximums()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.MaxVarBytes == 0 {
		o.MaxVarBytes = protocol.MaxVarBytes
	}
	if o.DefaultVarBytes == 0 {
		o.DefaultVarBytes = min(protocol.DefaultVarBytes, o.MaxVarBytes)
	}
	if o.OutputHighWater == 0 {
		o.OutputHighWater = DefaultOutputHighWater
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	switch {
	case !o.Framing.Valid():
		return o, fmt.Errorf("framing: %q is not content-length or ndjson", o.Framing)
	case o.MaxConcurrency < 1:
		return o, errors.New("max-concurrency: must be >= 1")
	case o.MaxQueue < 1:
		return o, errors.New("max-queue: must be >= 1")
	case o.MaxMessageBytes < 1024:
		return o, errors.New("max-message-bytes: must be >= 1024")
	case o.MaxQueueBytes < o.MaxMessageBytes:
		return o, fmt.Errorf("max-queue-bytes: must be >= max-message-bytes (%d)", o.MaxMessageBytes)
	case o.OutputHighWater < 0:
		return o, errors.New("output high water: must be >= 0")
	case o.DrainTimeout < 0:
		return o, errors.New("drain timeout: must be >= 0")
	case o.MaxVarBytes > protocol.MaxVarBytes:
		return o, fmt.Errorf("max-varBytes: must be <= %d (the sidecar's maximum)", uint64(protocol.MaxVarBytes))
	case o.DefaultVarBytes > o.MaxVarBytes:
		return o, fmt.Errorf("default-varBytes: must be <= %d (the sidecar's maximum)", o.MaxVarBytes)
	}
	if err := o.Maximums.Validate(limits.HardMaximums()); err != nil {
		return o, fmt.Errorf("max-%v", err)
	}
	if err := o.Defaults.Validate(o.Maximums); err != nil {
		return o, fmt.Errorf("default-%v", err)
	}
	return o, nil
}
