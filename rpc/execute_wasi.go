package rpc

import (
	"encoding/json"
	"path/filepath"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/sandboxd/sandboxd/protocol"
)

// grantChecker is implemented by an engine that can refuse a module from
// its bytes, before compiling it, when the run does not grant what it
// imports (WASI).
type grantChecker interface {
	CheckGrant(src protocol.Source, caps protocol.Capabilities) error
}

// wasiDefaults fills in what a WASI run leaves to the module: the export
// (_start when function was omitted and the module exports it) and argv[0]
// (the base name of a module given by path, else the engine's default, the
// module id).
func wasiDefaults(spec *runSpec, mod *protocol.ModuleInfo) {
	if spec.defaultFunction {
		if e, ok := mod.Export("_start"); ok && e.Kind == "func" {
			spec.function = "_start"
		}
	}
	if w := spec.caps.WASI; w != nil && w.Argv0 == "" && spec.source.Path != "" {
		w.Argv0 = filepath.Base(spec.source.Path)
	}
}

// wasiResult is what a WASI run adds to its result, or nil.
func wasiResult(res *protocol.RunOutcome) *protocol.WASIResult {
	if res.Output == nil {
		return nil
	}
	return &protocol.WASIResult{ExitCode: res.ExitCode, Stdout: res.Output.Stdout, Stderr: res.Output.Stderr,
		OutputTruncated: res.Output.Truncated}
}

type outputNotification struct {
	JSONRPC string                `json:"jsonrpc"`
	Method  string                `json:"method"`
	Params  protocol.OutputParams `json:"params"`
}

// outputNotifier returns the Run.Output of run id: each piece becomes an
// `output` notification, queued (never blocking) before the response, with
// seq counting from 0 across both streams. The engine never calls it
// concurrently.
func (s *Server) outputNotifier(id jsonrpc2.ID) func(stream string, data []byte) {
	seq := 0
	return func(stream string, data []byte) {
		body, err := json.Marshal(outputNotification{JSONRPC: "2.0", Method: protocol.NotifyOutput,
			Params: protocol.OutputParams{ID: id, Seq: seq, Stream: stream, Data: data}})
		if err != nil {
			s.log.Error("encoding an output notification", "error", err)
			return
		}
		seq++
		s.out.send(body)
	}
}
