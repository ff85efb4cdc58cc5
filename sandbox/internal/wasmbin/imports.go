package wasmbin

import (
	"bytes"
	"fmt"
)

// ImportNames returns the names of the imports from module from, in
// order. It reads the header and the sections up to the import section only (the
// type section, to check the functions' type indices), so it costs
// microseconds where compiling the module may take seconds. It stops at
// the first thing it cannot decode and returns the names found before it,
// with the error; a module without an import section has none.
func ImportNames(wasm []byte, from string) ([]string, error) {
	if len(wasm) < len(wasmHeader) || !bytes.Equal(wasm[:4], wasmHeader[:4]) {
		return nil, fmt.Errorf("wasmbin: not a wasm module (bad magic)")
	}
	m := &module{}
	r := newReader(wasm[len(wasmHeader):], len(wasmHeader))
	for !r.eof() {
		sec, err := readSection(r)
		if err != nil {
			return nil, err
		}
		switch sec.id {
		case secCustom:
		case secType:
			if err := m.parseTypes(newReader(sec.payload, sec.offset)); err != nil {
				return nil, fmt.Errorf("wasmbin: type section: %w", err)
			}
		case secImport:
			return m.importNames(newReader(sec.payload, sec.offset), from)
		default: // sections are ordered: past where imports would be
			return nil, nil
		}
	}
	return nil, nil
}

// importNames reads an import section, keeping the names of the imports
// from module from.
func (m *module) importNames(r *reader, from string) ([]string, error) {
	n, err := r.count("import", 4)
	if err != nil {
		return nil, fmt.Errorf("wasmbin: import section: %w", err)
	}
	var names []string
	for i := range n {
		mod, name, err := m.parseImport(r)
		if err != nil {
			return names, fmt.Errorf("wasmbin: import section: import %d: %w", i, err)
		}
		if mod == from {
			names = append(names, name)
		}
	}
	return names, nil
}
