package wasmbin

import (
	"bytes"
	"strings"
	"testing"
)

func TestInjectedExports(t *testing.T) {
	tests := []struct {
		name     string
		wat      string
		memories int
	}{
		{name: "empty module", wat: `(module)`},
		{name: "one hidden memory", wat: `(module (memory 1) (data (i32.const 0) "hi"))`, memories: 1},
		{
			name:     "hidden memories beside an exported one",
			wat:      `(module (memory 1) (memory (export "m") 2) (memory 3) (global i32 (i32.const 5)) (func (export "f")))`,
			memories: 3,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := instantiate(t, tc.wat)
			for name, want := range map[string]int64{
				ExportMemCapBytes: noByteCap, ExportMemDeniedBytes: 0,
				ExportTableCap: noCap, ExportTableDenied: 0,
			} {
				if got := s.global(name); got != want {
					t.Errorf("%s = %#x, want %#x", name, got, want)
				}
			}
			for i := range tc.memories {
				if got := s.export(MemoryExportName(i)).Memory().Size(s.store); got != uint64(i+1) {
					t.Errorf("memory %d size = %d, want %d", i, got, i+1)
				}
			}
			if s.inst.GetExport(s.store, MemoryExportName(tc.memories)) != nil {
				t.Errorf("unexpected export %s", MemoryExportName(tc.memories))
			}
		})
	}
}

func TestHiddenMemoryContentsReadable(t *testing.T) {
	s := instantiate(t, `(module (memory 1) (data (i32.const 0) "hi"))`)
	data := s.export(MemoryExportName(0)).Memory().UnsafeData(s.store)
	if !bytes.HasPrefix(data, []byte("hi")) {
		t.Errorf("memory starts with %q, want \"hi\"", data[:2])
	}
}

func TestReservedExportNamesRejected(t *testing.T) {
	for _, name := range []string{ExportMemCapBytes, ExportStart, MemoryExportName(0), ReservedPrefix + "other"} {
		t.Run(name, func(t *testing.T) {
			wasm := wat2wasm(t, `(module (memory 1) (func (export "`+name+`")))`)
			_, _, err := Instrument(wasm)
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("Instrument error = %v, want one naming %q", err, name)
			}
		})
	}
}

// TestCustomSectionsKeepTheirPlace appends custom sections around the
// module's sections and checks they survive in order while new sections
// are created in canonical order.
func TestCustomSectionsKeepTheirPlace(t *testing.T) {
	wasm := wat2wasm(t, `(module (memory 1))`) // only a memory section
	var in []byte
	in = append(in, wasm[:8]...)
	in = append(in, customSection("first", "a")...)
	in = append(in, wasm[8:]...)
	in = append(in, customSection("last", "z")...)

	out, _, err := Instrument(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(out); err != nil {
		t.Fatalf("output does not validate: %v", err)
	}
	var ids []byte
	var customs []string
	m, err := parseModule(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range m.sections {
		ids = append(ids, s.id)
		if s.id == secCustom {
			customs = append(customs, string(s.payload))
		}
	}
	// The rewriter's own name section comes last (names.go).
	if want := []byte{secCustom, secMemory, secGlobal, secExport, secCustom, secCustom}; !bytes.Equal(ids, want) {
		t.Errorf("section ids = %v, want %v", ids, want)
	}
	names := "\x04name\x00" + string(rune(len(GuestModuleName)+1)) + string(rune(len(GuestModuleName))) + GuestModuleName
	if want := []string{"\x05firsta", "\x04lastz", names}; strings.Join(customs, "|") != strings.Join(want, "|") {
		t.Errorf("custom sections = %q, want %q", customs, want)
	}
}

func customSection(name, data string) []byte {
	payload := appendULEB(nil, uint64(len(name)))
	payload = append(payload, name...)
	payload = append(payload, data...)
	return rawSection(secCustom, payload)
}

func rawSection(id byte, payload []byte) []byte {
	out := appendULEB([]byte{id}, uint64(len(payload)))
	return append(out, payload...)
}
