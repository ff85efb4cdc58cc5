package sandbox

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"

	"github.com/sandboxd/sandboxd/sandbox/internal/wasmbin"
)

// The protocol between the engine and a compile child, the one thing
// both sides share: the environment that starts a child in its mode, and
// one frame each way, the request on the child's stdin, the reply on its
// stdout. A frame is a 4-byte big-endian length, that many bytes of JSON
// header, then the header's Payload bytes as they are, so a module of
// tens of MiB is neither encoded nor copied on the way.

const (
	// compileChildEnv marks a compile child; its value is the protocol
	// version, so a child of another build refuses instead of misreading.
	compileChildEnv      = "SANDBOXD_COMPILE_CHILD"
	compileChildProtocol = "1"
)

// childRequest heads the request; the payload is the module's bytes.
type childRequest struct {
	Payload        int    // wasm, or WAT text
	Path           string // the module file the bytes came from, if any: WAT errors must not quote it
	MemoryBytes    uint64 // RLIMIT_DATA of the child
	MaxModuleBytes int    // bound on the wasm a WAT text becomes
}

// childReply heads the reply; the payload is the compiled module.
type childReply struct {
	Payload  int // Module.Serialize of the instrumented module
	Err      *childError
	ID       string        // ModuleID of the wasm bytes
	WasmSize int           // their length
	Info     *wasmbin.Info // what the rewrite learnt about the module
}

// childError is an *Error that crossed the process boundary.
type childError struct {
	Kind    Kind
	Message string
}

const maxFrameHeader = 16 << 20 // a reply's Info grows with the module's memories and tables

func writeFrame(w *bufio.Writer, header any, payload moduleBytes) error {
	h, err := json.Marshal(header)
	if err != nil {
		return err
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(h)))
	w.Write(n[:])
	w.Write(h)
	if _, err := payload.writeTo(w); err != nil {
		return err
	}
	return w.Flush()
}

// readFrameHeader decodes a frame's header; the payload follows in r.
func readFrameHeader(r io.Reader, header any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxFrameHeader {
		return fmt.Errorf("frame header of %d bytes", size)
	}
	h := make([]byte, size)
	if _, err := io.ReadFull(r, h); err != nil {
		return err
	}
	return json.Unmarshal(h, header)
}

func readPayload(r io.Reader, n, max int) ([]byte, error) {
	if n < 0 || n > max {
		return nil, fmt.Errorf("payload of %d bytes (at most %d)", n, max)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}
