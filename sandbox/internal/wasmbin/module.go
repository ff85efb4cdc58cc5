package wasmbin

import (
	"bytes"
	"fmt"
)

// Section ids of the core wasm binary format.
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
	secTag       = 13
)

// Import and export kinds.
const (
	kindFunc   = 0x00
	kindTable  = 0x01
	kindMemory = 0x02
	kindGlobal = 0x03
	kindTag    = 0x04
)

var wasmHeader = []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}

// sectionRank gives the position a non-custom section must have in the
// canonical order (tag sits between memory and global, datacount between
// element and code). Unknown ids have rank 0.
var sectionRank = [...]int{
	secType: 1, secImport: 2, secFunction: 3, secTable: 4, secMemory: 5,
	secTag: 6, secGlobal: 7, secExport: 8, secStart: 9, secElement: 10,
	secDataCount: 11, secCode: 12, secData: 13,
}

var sectionNames = [...]string{
	secCustom: "custom", secType: "type", secImport: "import", secFunction: "function",
	secTable: "table", secMemory: "memory", secGlobal: "global", secExport: "export",
	secStart: "start", secElement: "element", secCode: "code", secData: "data",
	secDataCount: "datacount", secTag: "tag",
}

// section is one raw section; offset is the absolute offset of its payload.
type section struct {
	id      byte
	payload []byte
	offset  int
}

// readSection reads the section at r: its id, and its payload with the
// payload's offset in the module.
func readSection(r *reader) (section, error) {
	at := r.offset()
	id, err := r.readByte()
	if err != nil {
		return section{}, err
	}
	size, err := r.u32()
	if err != nil {
		return section{}, fmt.Errorf("wasmbin: section header at offset %d: %w", at, err)
	}
	off := r.offset()
	payload, err := r.bytes(uint64(size))
	if err != nil {
		return section{}, fmt.Errorf("wasmbin: section %d at offset %d: %w", id, at, err)
	}
	return section{id: id, payload: payload, offset: off}, nil
}

// vecSection remembers where the elements of a vector-shaped section begin,
// so new elements can be appended without re-encoding the old ones.
type vecSection struct {
	count uint32
	items []byte // payload after the count
}

// append returns the payload with extra elements added at the end.
func (v vecSection) append(n int, extra []byte) []byte {
	out := appendULEB(nil, uint64(v.count)+uint64(n))
	out = append(out, v.items...)
	return append(out, extra...)
}

// module is the parsed view of a module that the rewriter needs.
type module struct {
	sections []section
	info     Info

	types, funcs, globals, exports vecSection
	code                           *section

	memories    []MemoryInfo // all memories, imported first
	tables      []TableInfo  // all tables, imported first
	exportNames map[string]bool

	// space counts the module's own index spaces as the sections are
	// parsed, so each section is checked against what precedes it.
	space        indexSpace
	hasDataCount bool
}

// parseModule checks the header, splits the module into sections in
// canonical order, and decodes the sections whose contents matter.
func parseModule(wasm []byte) (*module, error) {
	if len(wasm) < len(wasmHeader) || !bytes.Equal(wasm[:4], wasmHeader[:4]) {
		return nil, fmt.Errorf("wasmbin: not a wasm module (bad magic)")
	}
	if !bytes.Equal(wasm[4:8], wasmHeader[4:]) {
		return nil, fmt.Errorf("wasmbin: unsupported wasm version % x (only core modules, version 1)", wasm[4:8])
	}
	m := &module{exportNames: map[string]bool{}}
	r := newReader(wasm[len(wasmHeader):], len(wasmHeader))
	lastRank := 0
	for !r.eof() {
		at := r.offset()
		sec, err := readSection(r)
		if err != nil {
			return nil, err
		}
		if id := sec.id; id != secCustom {
			if int(id) >= len(sectionRank) || sectionRank[id] == 0 {
				return nil, fmt.Errorf("wasmbin: unknown section id %d at offset %d", id, at)
			}
			if sectionRank[id] <= lastRank {
				return nil, fmt.Errorf("wasmbin: %s section at offset %d is duplicated or out of order", sectionNames[id], at)
			}
			lastRank = sectionRank[id]
		}
		m.sections = append(m.sections, sec)
	}
	for i := range m.sections {
		if err := m.parseSection(&m.sections[i]); err != nil {
			return nil, fmt.Errorf("wasmbin: %s section: %w", sectionNames[m.sections[i].id], err)
		}
	}
	return m, m.check()
}

// check verifies cross-section consistency that the rewriter relies on.
func (m *module) check() error {
	codeCount := uint32(0)
	if m.code != nil {
		r := newReader(m.code.payload, m.code.offset)
		n, err := r.count("function body", 1)
		if err != nil {
			return fmt.Errorf("wasmbin: code section: %w", err)
		}
		codeCount = n
	}
	if codeCount != m.funcs.count {
		return fmt.Errorf("wasmbin: function section declares %d functions but code section has %d bodies", m.funcs.count, codeCount)
	}
	if m.info.HasStart && uint64(m.info.Start) >= uint64(m.info.ImportedFuncs)+uint64(m.funcs.count) {
		return fmt.Errorf("wasmbin: start function %d out of range", m.info.Start)
	}
	return nil
}

func (m *module) parseSection(s *section) error {
	r := newReader(s.payload, s.offset)
	var err error
	switch s.id {
	case secCustom:
		// Copied through untouched; nothing in them needs rewriting.
		return nil
	case secTag:
		err = m.parseTags(r)
	case secElement:
		err = m.parseElements(r)
	case secDataCount:
		var n uint32
		if n, err = r.u32(); err == nil {
			m.space[idxData], m.hasDataCount = uint64(n), true
		}
	case secData:
		err = m.parseData(r)
	case secCode:
		m.code = s
		return nil
	case secType:
		err = m.parseTypes(r)
	case secImport:
		err = m.parseImports(r)
	case secFunction:
		err = m.parseFunctions(r)
	case secTable:
		err = m.parseTables(r)
	case secMemory:
		err = m.parseMemories(r)
	case secGlobal:
		err = m.parseGlobals(r)
	case secExport:
		err = m.parseExports(r)
	case secStart:
		err = m.parseStart(r)
	}
	if err == nil && !r.eof() {
		err = r.errorf("%d trailing bytes", len(r.buf)-r.pos)
	}
	return err
}
