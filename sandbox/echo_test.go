package sandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// maxEchoMessage bounds the message of an error about a value of
// megabytes the caller gave (an id, a path, a module's names): the value
// is quoted cut, never whole.
const maxEchoMessage = 4096

// leb is n in unsigned LEB128.
func leb(n int) []byte {
	var out []byte
	for {
		b := byte(n & 0x7f)
		n >>= 7
		if n == 0 {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}

func wasmSection(id byte, payload []byte) []byte {
	return append(append([]byte{id}, leb(len(payload))...), payload...)
}

func wasmName(s string) []byte { return append(leb(len(s)), s...) }

// TestErrorsQuoteTheCallerBriefly: the errors of the engine that repeat
// what the caller gave (a module id, a module path, the names in a
// module, which wasmtime's validation, parse and trap messages quote)
// quote it cut, however long it is.
func TestErrorsQuoteTheCallerBriefly(t *testing.T) {
	e := engine(t)
	ctx := context.Background()
	long := strings.Repeat("<", 1<<20)
	name := strings.Repeat("<", 90_000)

	dir := t.TempDir()
	badWAT := filepath.Join(dir, "bad.wat")
	if err := os.WriteFile(badWAT, []byte("(module (func"), 0o600); err != nil {
		t.Fatal(err)
	}
	restricted, err := sandbox.NewEngine(sandbox.Config{ModulePathDirs: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	defer restricted.Close()

	typ := wasmSection(1, append(leb(1), 0x60, 0, 0))
	fn := wasmSection(3, append(leb(1), leb(0)...))
	code := wasmSection(10, append(leb(1), append(leb(2), 0, 0x0b)...))
	var exports []byte
	exports = append(exports, leb(2)...)
	for range 2 {
		exports = append(append(exports, wasmName(name)...), 0, 0)
	}
	magic := []byte("\x00asm\x01\x00\x00\x00")
	duplicateExports := append(append(append(append(append([]byte{}, magic...), typ...), fn...), wasmSection(7, exports)...), code...)
	badImport := append(append(append([]byte{}, magic...), typ...),
		wasmSection(2, append(append(append(leb(1), wasmName(name)...), wasmName("f")...), 0, 5))...)

	for _, c := range []struct {
		name string
		eng  *sandbox.Engine
		src  sandbox.Source
	}{
		{"module id", e, sandbox.Source{ID: sandbox.IDPrefix + long}},
		{"module path", e, sandbox.Source{Path: "/nonexistent/" + long}},
		{"module path outside the allowed", restricted, sandbox.Source{Path: "/tmp/" + long}},
		{"module path of a file that is not WAT", e, sandbox.Source{Path: dir + "/" + strings.Repeat("./", 2000) + "bad.wat"}},
		{"duplicate export names", e, sandbox.Source{Wasm: duplicateExports}},
		{"an import of a bad kind", e, sandbox.Source{Wasm: badImport}},
		{"WAT naming an unknown function", e, sandbox.Source{WAT: `(module (export "x" (func $` + name + `)))`}},
	} {
		_, _, err := c.eng.Compile(ctx, c.src)
		if err == nil {
			t.Errorf("%s: compiled", c.name)
			continue
		}
		if msg := err.Error(); len(msg) > maxEchoMessage {
			t.Errorf("%s: a message of %d bytes: %.200s…", c.name, len(msg), msg)
		}
	}

	// A trap names the function it happened in, by the name section's
	// name, in the message and in the frames.
	m, _, err := e.Compile(ctx, sandbox.Source{WAT: `(module (func $` + name + ` (export "run") unreachable))`})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Run(ctx, sandbox.Request{Module: m, Function: "run", Limits: limits.Defaults()})
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Kind != sandbox.KindTrap {
		t.Fatalf("run: %v", err)
	}
	if len(se.Message) > maxEchoMessage || len(se.Frames) == 0 || len(se.Frames[0].Func) > maxEchoMessage {
		t.Errorf("a trap in a function of a long name: a message of %d bytes, frames %d", len(se.Message), len(se.Frames))
	}
}
