package sandbox

// A module's bytes on their way to a compile: what a source holds (wasm, a
// file's text, a WAT string kept as given), read once from a path within
// the bounds, and compared, keyed and written without copies.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"strings"
	"unsafe"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

var wasmMagic = []byte("\x00asm")

func isWasmBinary(b []byte) bool { return bytes.HasPrefix(b, wasmMagic) }

// moduleBytes is the content of a source: bytes (wasm, or a file's text),
// or a WAT text kept as the string the caller gave, so that a text of
// tens of MiB is not copied on its way to the compile child.
type moduleBytes struct {
	bin  []byte
	text string
	// encoded is set (encodedWAT, encodedWasm) when bin is not a module's
	// bytes but a wire literal of them (Source.Encoded): known apart from
	// bytes, and from the other field's literals, whatever the content.
	encoded byte
}

// The kinds of moduleBytes.encoded.
const (
	encodedWAT  = 'T'
	encodedWasm = 'B'
)

// encodedBytes is src's wire literal as a key of the module cache, or
// false when src has none.
func encodedBytes(src Source) (moduleBytes, bool) {
	e := src.Encoded
	if e == nil || len(e.Literal) == 0 {
		return moduleBytes{}, false
	}
	switch e.Field {
	case "wat":
		return moduleBytes{bin: e.Literal, encoded: encodedWAT}, true
	case "wasm":
		return moduleBytes{bin: e.Literal, encoded: encodedWasm}, true
	}
	return moduleBytes{}, false
}

func (b moduleBytes) size() int { return len(b.bin) + len(b.text) }

func (b moduleBytes) isWasmBinary() bool { return b.text == "" && isWasmBinary(b.bin) }

// textKey names a text before it has an id: the key of its compile in
// flight and of its alias in the persistent cache.
func (b moduleBytes) textKey() string {
	var sum [32]byte
	if b.text != "" {
		sum = sha256.Sum256(unsafe.Slice(unsafe.StringData(b.text), len(b.text)))
	} else {
		sum = sha256.Sum256(b.bin)
	}
	return "wat:" + hex.EncodeToString(sum[:])
}

// equal reports whether the content is s.
func (b moduleBytes) equal(s string) bool {
	if b.text != "" {
		return b.text == s
	}
	return string(b.bin) == s
}

// clone copies the content, for the cache to keep.
func (b moduleBytes) clone() string {
	if b.text != "" {
		return strings.Clone(b.text)
	}
	return string(b.bin)
}

func (b moduleBytes) writeTo(w io.Writer) (int64, error) {
	if b.text != "" {
		n, err := io.WriteString(w, b.text)
		return int64(n), err
	}
	n, err := w.Write(b.bin)
	return int64(n), err
}

// maxPeekText bounds the WAT text peekWasm converts in this process.
const maxPeekText = 256 << 10

// peekWasm returns the wasm of a binary, or of a text of at most
// maxPeekText converted here, for a look at its imports before any
// compile; nil for anything else. wasmtime's parser takes memory in
// proportion to its input (about 20 times), so this stays small; bigger
// texts are converted only by the compile child.
func (b moduleBytes) peekWasm() []byte {
	if b.isWasmBinary() {
		return b.bin
	}
	if b.size() > maxPeekText {
		return nil
	}
	wasm, err := wasmtime.Wat2Wasm(string(b.bytes()))
	if err != nil {
		releaseWasmtimeError(err)
		return nil
	}
	return wasm
}

// bytes returns the content as bytes (copying a text).
func (b moduleBytes) bytes() []byte {
	if b.text != "" {
		return []byte(b.text)
	}
	return b.bin
}

// loadBytes returns the content of a source, bounded by MaxModuleBytes.
// Converting text is the compile child's job.
func (e *Engine) loadBytes(src Source) (moduleBytes, error) {
	var mod moduleBytes
	switch {
	case src.WAT != "":
		mod.text = src.WAT
	case src.Wasm != nil:
		mod.bin = src.Wasm
	case src.Path != "":
		raw, err := readModuleFile(src.Path, e.cfg.MaxModuleBytes, e.pathDirs)
		if err != nil {
			return mod, err
		}
		mod.bin = raw
	}
	if mod.size() > e.cfg.MaxModuleBytes {
		return mod, tooBig(int64(mod.size()), e.cfg.MaxModuleBytes)
	}
	return mod, nil
}
