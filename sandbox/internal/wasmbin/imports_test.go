package wasmbin

import (
	"bytes"
	"slices"
	"testing"
)

// importsWAT imports from two modules, with every kind of import, after a
// type section and before a section past the imports.
const importsWAT = `(module
  (type $t (func (param i32) (result i32)))
  (import "w" "first" (func (type $t)))
  (import "other" "f" (func))
  (import "w" "table" (table 1 funcref))
  (import "w" "memory" (memory 1 2))
  (import "other" "g" (global (mut i64)))
  (import "w" "global" (global i32))
  (import "w" "last" (func (param i64)))
  (func (export "x")))`

// TestImportNames: the names of one module's imports, in order, whatever
// their kinds and the imports of other modules between them.
func TestImportNames(t *testing.T) {
	wasm := wat2wasm(t, importsWAT)
	for _, c := range []struct {
		from string
		want []string
	}{
		{"w", []string{"first", "table", "memory", "global", "last"}},
		{"other", []string{"f", "g"}},
		{"none", nil},
	} {
		got, err := ImportNames(wasm, c.from)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ImportNames(%q) = %q, %v; want %q", c.from, got, err, c.want)
		}
	}
	for _, wat := range []string{`(module)`, `(module (memory 1) (func (export "f")))`} {
		if got, err := ImportNames(wat2wasm(t, wat), "w"); got != nil || err != nil {
			t.Errorf("%s: %q, %v; want no imports", wat, got, err)
		}
	}
}

// TestImportNamesStopsAtWhatItCannotRead: bytes that are not wasm are an
// error, and so is a module cut before the end of its import section
// (read whole first); an import that cannot be read gives the names
// before it, with an error; a module cut past the imports, all its names.
func TestImportNamesStopsAtWhatItCannotRead(t *testing.T) {
	if _, err := ImportNames([]byte("(module)"), "w"); err == nil {
		t.Error("text read as wasm")
	}
	wasm := wat2wasm(t, importsWAT)
	full, _ := ImportNames(wasm, "w")
	for n := len(wasmHeader); n < len(wasm); n++ {
		got, err := ImportNames(wasm[:n], "w")
		if err != nil && got != nil {
			t.Fatalf("cut at %d: %q with %v", n, got, err)
		}
		if err == nil && got != nil && !slices.Equal(got, full) {
			t.Fatalf("cut at %d: %q, want %q", n, got, full)
		}
	}
	if got, err := ImportNames(wasm[:len(wasm)-2], "w"); !slices.Equal(got, full) || err != nil {
		t.Errorf("cut past the imports: %q, %v", got, err)
	}
	// The table's kind byte (after its name) made unknown.
	bad := slices.Clone(wasm)
	at := bytes.Index(bad, []byte("\x05table")) + 6
	if bad[at] != kindTable {
		t.Fatalf("byte %d is %#x, not the table's kind", at, bad[at])
	}
	bad[at] = 0x7f
	if got, err := ImportNames(bad, "w"); err == nil || !slices.Equal(got, []string{"first"}) {
		t.Errorf("an unknown import kind: %q, %v; want the names before it and an error", got, err)
	}
}
