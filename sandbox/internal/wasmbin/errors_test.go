package wasmbin

import (
	"errors"
	"strings"
	"testing"
)

// moduleWithBody hand-assembles a module with one () -> () function whose
// body (without locals) is given, for inputs that WAT cannot express.
func moduleWithBody(body ...byte) []byte {
	out := append([]byte(nil), wasmHeader...)
	out = append(out, rawSection(secType, []byte{1, 0x60, 0, 0})...)
	out = append(out, rawSection(secFunction, []byte{1, 0})...)
	out = append(out, rawSection(secMemory, []byte{1, 0, 1})...)
	entry := append([]byte{0}, body...) // no locals
	code := appendULEB([]byte{1}, uint64(len(entry)))
	return append(out, rawSection(secCode, append(code, entry...))...)
}

func TestUnsupportedOpcodes(t *testing.T) {
	tests := []struct {
		name   string
		body   []byte
		opcode string
	}{
		{"legacy try", []byte{0x06, 0x40, opEnd, opEnd}, "0x06"},
		{"ref.as_non_null", []byte{0xd3, opEnd}, "0xd3"},
		{"wide arithmetic", []byte{prefixFC, 19, opEnd}, "0xfc 19"},
		{"unknown simd", []byte{prefixFD, 0x80, 0x04, opEnd}, "0xfd 512"},
		{"unknown atomic", []byte{prefixFE, 0x4f, opEnd}, "0xfe 79"},
		{"gc prefix", []byte{0xfb, 0, opEnd}, "0xfb"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Instrument(moduleWithBody(tc.body...))
			var u *UnsupportedOpcodeError
			if !errors.As(err, &u) {
				t.Fatalf("error = %v, want *UnsupportedOpcodeError", err)
			}
			if u.Opcode != tc.opcode || u.Where != "function 0" {
				t.Errorf("got opcode %q in %q, want %q in function 0", u.Opcode, u.Where, tc.opcode)
			}
		})
	}
}

func TestMalformedInputs(t *testing.T) {
	tests := []struct {
		name    string
		wasm    []byte
		wantErr string
	}{
		{"empty", nil, "bad magic"},
		{"component", []byte{0, 'a', 's', 'm', 0x0d, 0, 1, 0}, "version"},
		{"grow of undefined memory", moduleWithBody(0x41, 0, opMemoryGrow, 1, 0x1a, opEnd), "memory index 1 out of range"},
		{"table.grow without table", moduleWithBody(0xd0, 0x70, 0x41, 0, prefixFC, fcTableGrow, 0, 0x1a, opEnd), "table index 0 out of range"},
		{"missing end", moduleWithBody(0x01), "end of data"},
		{"bytes after end", moduleWithBody(opEnd, 0x01), "after the final end"},
		{"unbalanced end", moduleWithBody(opEnd, opEnd), "after the final end"},
		{"bad block type", moduleWithBody(opBlock, 0x7a, opEnd, opEnd), "block type"},
		{"overlong leb", moduleWithBody(0x41, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00, 0x1a, opEnd), "too long"},
		{"out of order sections", append(append(append([]byte(nil), wasmHeader...), rawSection(secMemory, []byte{0})...), rawSection(secType, []byte{0})...), "out of order"},
		{"unknown section", append(append([]byte(nil), wasmHeader...), rawSection(14, nil)...), "unknown section id 14"},
		{"code without functions", append(append([]byte(nil), wasmHeader...), rawSection(secCode, []byte{1, 2, 0, opEnd})...), "code section has 1"},
		{"huge vector count", append(append([]byte(nil), wasmHeader...), rawSection(secType, []byte{0xff, 0xff, 0xff, 0xff, 0x0f})...), "exceeds remaining"},
		{"gc rec group", append(append([]byte(nil), wasmHeader...), rawSection(secType, []byte{1, 0x4e, 1, 0x60, 0, 0})...), "type form 0x4e"},
		{"custom page size", append(append([]byte(nil), wasmHeader...), rawSection(secMemory, []byte{1, 0x08, 1, 16})...), "flags 0x08"},
		{"start out of range", append(append([]byte(nil), wasmHeader...), rawSection(secStart, []byte{3})...), "start function 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Instrument(tc.wasm)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestTruncatedInputs cuts a feature-rich module at every length: every
// proper prefix that is not a whole number of sections must fail cleanly.
func TestTruncatedInputs(t *testing.T) {
	wasm := wat2wasm(t, fuzzSeedWATs[len(fuzzSeedWATs)-1])
	m, err := parseModule(wasm)
	if err != nil {
		t.Fatal(err)
	}
	boundaries := map[int]bool{len(wasmHeader): true}
	for _, s := range m.sections {
		boundaries[s.offset+len(s.payload)] = true
	}
	for n := range len(wasm) {
		_, _, err := Instrument(wasm[:n])
		if err == nil && !boundaries[n] {
			t.Errorf("prefix of %d bytes: no error", n)
		}
		if _, err := Parse(wasm[:n]); err == nil && !boundaries[n] {
			t.Errorf("Parse of %d-byte prefix: no error", n)
		}
	}
}
