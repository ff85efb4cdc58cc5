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

// outputWire turns a WASI run's output pieces into `output`
// notifications, queued (never blocking) before the response, with seq
// counting from 0 across both streams. The engine coalesces writes, but a
// guest alternating one-byte writes between stdout and stderr still made
// a piece of every byte, and each notification costs about 80 bytes of
// envelope plus the request id: 2,000,000 notifications for 2 MiB of
// output, 2 GB on the wire and in the outbox with a 1 KB id. So the
// envelopes may take at most the run's outputBytes; past that, each
// stream's pieces are held until they carry at least 16 KiB, and never
// less data than their envelope, and the rest goes out when the run ends.
// Each stream still concatenates to the result's; only the interleaving
// of the two streams becomes coarser.
type outputWire struct {
	s    *Server
	id   jsonrpc2.ID
	seq  int
	left uint64 // envelope bytes the notifications may still take

	coalescing bool
	flushAt    int               // while coalescing: the data a piece waits for
	held       map[string][]byte // while coalescing: each stream's bytes not yet sent
	order      []string          // streams with held bytes, in the order they came
}

// outputCoalesceBytes is the least data a piece carries once a run's
// envelope budget is spent.
const outputCoalesceBytes = 16 << 10

func (s *Server) newOutputWire(id jsonrpc2.ID, outputBytes uint64) *outputWire {
	return &outputWire{s: s, id: id, left: outputBytes}
}

// write is the run's Output. The engine never calls it concurrently, nor
// after Run returns.
func (w *outputWire) write(stream string, data []byte) {
	if len(data) == 0 {
		return
	}
	if !w.coalescing {
		body := w.encode(stream, data)
		if body == nil {
			return
		}
		if envelope := uint64(max(0, int(w.s.out.cost(body))-len(data))); envelope <= w.left {
			w.left -= envelope
			w.send(body)
			return
		}
		w.coalescing = true
		w.flushAt = max(outputCoalesceBytes, int(w.s.out.cost(w.encode(stream, nil))))
		w.held = map[string][]byte{}
	}
	if len(w.held[stream]) == 0 {
		w.order = append(w.order, stream)
	}
	w.held[stream] = append(w.held[stream], data...)
	if len(w.held[stream]) >= w.flushAt {
		w.flushStream(stream)
	}
}

// flush sends what is held, when the run has ended.
func (w *outputWire) flush() {
	for len(w.order) > 0 {
		w.flushStream(w.order[0])
	}
}

func (w *outputWire) flushStream(stream string) {
	if body := w.encode(stream, w.held[stream]); body != nil {
		w.send(body)
	}
	delete(w.held, stream)
	for i, st := range w.order {
		if st == stream {
			w.order = append(w.order[:i], w.order[i+1:]...)
			break
		}
	}
}

func (w *outputWire) encode(stream string, data []byte) []byte {
	body, err := json.Marshal(outputNotification{JSONRPC: "2.0", Method: protocol.NotifyOutput,
		Params: protocol.OutputParams{ID: w.id, Seq: w.seq, Stream: stream, Data: data}})
	if err != nil {
		w.s.log.Error("encoding an output notification", "error", err)
		return nil
	}
	return body
}

func (w *outputWire) send(body []byte) {
	w.seq++
	w.s.out.sendSoon(body)
}
