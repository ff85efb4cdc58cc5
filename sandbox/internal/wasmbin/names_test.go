package wasmbin

import (
	"bytes"
	"strings"
	"testing"
)

// nameSections returns the payloads (after the section name) of every
// "name" custom section of wasm.
func nameSections(t *testing.T, wasm []byte) [][]byte {
	t.Helper()
	m, err := parseModule(wasm)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, s := range m.sections {
		r := newReader(s.payload, s.offset)
		if n, err := r.name(); s.id == secCustom && err == nil && n == "name" {
			out = append(out, r.buf[r.pos:])
		}
	}
	return out
}

func TestFunctionNamesAreBounded(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes: the cut must fall on a rune boundary
	wasm := wat2wasm(t, `(module (func (@name "`+long+`") (export "run")) (func $short))`)
	// A second name section and another custom section after it.
	wasm = append(wasm, customSection("name", "\x00\x02\x01x")...)
	wasm = append(wasm, customSection("other", "kept")...)
	out, _, err := Instrument(wasm)
	if err != nil {
		t.Fatal(err)
	}
	secs := nameSections(t, out)
	if len(secs) != 1 {
		t.Fatalf("%d name sections, want 1", len(secs))
	}
	cut := strings.Repeat("é", MaxFuncNameBytes/2)
	want := append([]byte{nameSubsectionModule, byte(len(GuestModuleName) + 1), byte(len(GuestModuleName))}, GuestModuleName...)
	want = append(want, nameSubsectionFuncs)
	sub := appendULEB(nil, 2)
	sub = append(appendULEB(append(sub, 0), uint64(len(cut))), cut...)
	sub = append(appendULEB(append(sub, 1), 5), "short"...)
	want = append(appendULEB(want, uint64(len(sub))), sub...)
	if !bytes.Equal(secs[0], want) {
		t.Errorf("name section % x\nwant % x", secs[0], want)
	}
	if !bytes.Contains(out, customSection("other", "kept")) {
		t.Error("another custom section was not kept")
	}
}

func TestUndecodableNameSectionKeepsNoNames(t *testing.T) {
	wasm := wat2wasm(t, `(module (func (export "run")))`)
	wasm = append(wasm, customSection("name", "\x01\x09\x01\x00")...) // subsection longer than the section
	out, _, err := Instrument(wasm)
	if err != nil {
		t.Fatal(err)
	}
	secs := nameSections(t, out)
	want := append([]byte{nameSubsectionModule, byte(len(GuestModuleName) + 1), byte(len(GuestModuleName))}, GuestModuleName...)
	if len(secs) != 1 || !bytes.Equal(secs[0], want) {
		t.Errorf("name sections % x, want only the module name % x", secs, want)
	}
}
