package wasmbin

// The readers of each section's entries, for parseSection (module.go):
// types, imports, functions, tables, memories, globals, tags, elements,
// data, exports and start, and the types they share.

import (
	"errors"
	"fmt"
)

// parseTypes accepts only plain function types: a GC rec group would make
// the entry count differ from the type index space we append to.
func (m *module) parseTypes(r *reader) error {
	n, err := r.count("type", 3)
	if err != nil {
		return err
	}
	start := r.pos
	for i := range n {
		at := r.offset()
		form, err := r.readByte()
		if err != nil {
			return err
		}
		if form != 0x60 {
			return fmt.Errorf("offset %d: type %d: unsupported type form 0x%02x", at, i, form)
		}
		for range 2 { // params, results
			if err := readValTypes(r); err != nil {
				return fmt.Errorf("type %d: %w", i, err)
			}
		}
	}
	m.types = vecSection{count: n, items: r.buf[start:]}
	m.space[idxType] = uint64(n)
	return nil
}

func readValTypes(r *reader) error {
	n, err := r.count("value type", 1)
	if err != nil {
		return err
	}
	for range n {
		at := r.offset()
		b, err := r.readByte()
		if err != nil {
			return err
		}
		if !isValType(b) {
			return fmt.Errorf("offset %d: unsupported value type 0x%02x", at, b)
		}
	}
	return nil
}

func (m *module) parseImports(r *reader) error {
	n, err := r.count("import", 4)
	if err != nil {
		return err
	}
	for i := range n {
		if _, _, err := m.parseImport(r); err != nil {
			return fmt.Errorf("import %d: %w", i, err)
		}
	}
	return nil
}

// parseImport reads one import, counts it, and returns its module and
// name.
func (m *module) parseImport(r *reader) (mod, name string, err error) {
	if mod, err = r.name(); err != nil {
		return "", "", err
	}
	if name, err = r.name(); err != nil {
		return "", "", err
	}
	at := r.offset()
	kind, err := r.readByte()
	if err != nil {
		return "", "", err
	}
	switch kind {
	case kindFunc:
		m.info.ImportedFuncs++
		err = (&decoder{r: r, space: &m.space}).index(idxType)
		m.space[idxFunc]++
	case kindTable:
		var t TableInfo
		if t, err = readTableType(r); err == nil {
			m.info.ImportedTables++
			m.tables = append(m.tables, t)
			m.space[idxTable]++
		}
	case kindMemory:
		var mem MemoryInfo
		if mem, err = readMemoryType(r); err == nil {
			m.info.ImportedMemories++
			m.memories = append(m.memories, mem)
			m.space[idxMemory]++
		}
	case kindGlobal:
		m.info.ImportedGlobals++
		err = readGlobalType(r)
		m.space[idxGlobal]++
	case kindTag:
		err = m.readTagType(r)
		m.space[idxTag]++
	default:
		return "", "", fmt.Errorf("offset %d: unknown import kind 0x%02x", at, kind)
	}
	return mod, name, err
}

func (m *module) parseFunctions(r *reader) error {
	n, err := r.count("function", 1)
	if err != nil {
		return err
	}
	start := r.pos
	d := &decoder{r: r, space: &m.space}
	for range n {
		if err := d.index(idxType); err != nil {
			return err
		}
	}
	m.funcs = vecSection{count: n, items: r.buf[start:]}
	m.space[idxFunc] += uint64(n)
	return nil
}

func (m *module) parseTables(r *reader) error {
	n, err := r.count("table", 2)
	if err != nil {
		return err
	}
	for i := range n {
		t, err := readTableType(r)
		if err != nil {
			return fmt.Errorf("table %d: %w", i, err)
		}
		m.info.Tables = append(m.info.Tables, t)
		m.tables = append(m.tables, t)
		m.space[idxTable]++
	}
	return nil
}

func (m *module) parseMemories(r *reader) error {
	n, err := r.count("memory", 2)
	if err != nil {
		return err
	}
	for i := range n {
		mem, err := readMemoryType(r)
		if err != nil {
			return fmt.Errorf("memory %d: %w", i, err)
		}
		m.info.Memories = append(m.info.Memories, mem)
		m.memories = append(m.memories, mem)
		m.space[idxMemory]++
	}
	return nil
}

func (m *module) parseGlobals(r *reader) error {
	n, err := r.count("global", 3)
	if err != nil {
		return err
	}
	start := r.pos
	for i := range n {
		if err := readGlobalType(r); err != nil {
			return fmt.Errorf("global %d: %w", i, err)
		}
		// An initializer may read only the globals before it.
		if err := m.constExpr(r, fmt.Sprintf("global %d initializer", m.space[idxGlobal])); err != nil {
			return err
		}
		m.space[idxGlobal]++
	}
	m.globals = vecSection{count: n, items: r.buf[start:]}
	return nil
}

// constExpr decodes one constant expression, checking its indices.
func (m *module) constExpr(r *reader, where string) error {
	d := &decoder{r: r, where: where, space: &m.space}
	if err := d.constExpr(); err != nil {
		var unsupported *UnsupportedOpcodeError
		if errors.As(err, &unsupported) {
			return err
		}
		return fmt.Errorf("%s: %w", d.where, err)
	}
	return nil
}

func (m *module) parseTags(r *reader) error {
	n, err := r.count("tag", 2)
	if err != nil {
		return err
	}
	for i := range n {
		if err := m.readTagType(r); err != nil {
			return fmt.Errorf("tag %d: %w", i, err)
		}
		m.space[idxTag]++
	}
	return nil
}

// parseElements checks the table, function and global indices of every
// element segment (all eight encodings) and counts the segments.
func (m *module) parseElements(r *reader) error {
	n, err := r.count("element segment", 1)
	if err != nil {
		return err
	}
	d := &decoder{r: r, space: &m.space}
	for i := range n {
		where := fmt.Sprintf("element segment %d", i)
		at := r.offset()
		flags, err := r.u32()
		if err != nil {
			return err
		}
		if flags > 7 {
			return fmt.Errorf("offset %d: %s: invalid flags %d", at, where, flags)
		}
		active := flags&0x01 == 0
		if flags&0x02 != 0 && active { // explicit table index
			if err := d.index(idxTable); err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
		} else if active {
			if err := m.space.check(idxTable, 0, at); err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
		}
		if active {
			if err := m.constExpr(r, where+" offset"); err != nil {
				return err
			}
		}
		exprs := flags&0x04 != 0
		if flags&0x03 != 0 { // elemkind or reftype
			at := r.offset()
			b, err := r.readByte()
			if err != nil {
				return err
			}
			if (exprs && !isRefType(b)) || (!exprs && b != 0x00) {
				return fmt.Errorf("offset %d: %s: unsupported element type 0x%02x", at, where, b)
			}
		}
		count, err := r.count("element", 1)
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		for range count {
			if exprs {
				err = m.constExpr(r, where)
			} else {
				err = d.index(idxFunc)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
		}
	}
	m.space[idxElem] = uint64(n)
	return nil
}

// parseData checks the memory index and offset of every data segment.
func (m *module) parseData(r *reader) error {
	n, err := r.count("data segment", 1)
	if err != nil {
		return err
	}
	if m.hasDataCount && uint64(n) != m.space[idxData] {
		return fmt.Errorf("%d data segments, but the data count section says %d", n, m.space[idxData])
	}
	m.space[idxData] = uint64(n)
	d := &decoder{r: r, space: &m.space}
	for i := range n {
		where := fmt.Sprintf("data segment %d", i)
		at := r.offset()
		flags, err := r.u32()
		if err != nil {
			return err
		}
		switch flags {
		case 0:
			err = m.space.check(idxMemory, 0, at)
		case 1:
		case 2:
			err = d.index(idxMemory)
		default:
			return fmt.Errorf("offset %d: %s: invalid flags %d", at, where, flags)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if flags != 1 {
			if err := m.constExpr(r, where+" offset"); err != nil {
				return err
			}
		}
		size, err := r.u32()
		if err != nil {
			return err
		}
		if err := r.skip(uint64(size)); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
	}
	return nil
}

func (m *module) parseExports(r *reader) error {
	n, err := r.count("export", 3)
	if err != nil {
		return err
	}
	start := r.pos
	for i := range n {
		name, err := r.name()
		if err != nil {
			return fmt.Errorf("export %d: %w", i, err)
		}
		at := r.offset()
		kind, err := r.readByte()
		if err != nil {
			return err
		}
		if kind > kindTag {
			return fmt.Errorf("offset %d: export %q: unknown kind 0x%02x", at, name, kind)
		}
		space := [...]idxKind{kindFunc: idxFunc, kindTable: idxTable, kindMemory: idxMemory, kindGlobal: idxGlobal, kindTag: idxTag}
		idx, err := (&decoder{r: r, space: &m.space}).indexOf(space[kind])
		if err != nil {
			return fmt.Errorf("export %q: %w", name, err)
		}
		if kind == kindFunc && idx < uint32(m.info.ImportedFuncs) {
			m.info.ReexportedImports = append(m.info.ReexportedImports, name)
		}
		m.exportNames[name] = true
	}
	m.exports = vecSection{count: n, items: r.buf[start:]}
	return nil
}

func (m *module) parseStart(r *reader) error {
	idx, err := r.u32()
	if err != nil {
		return err
	}
	m.info.HasStart = true
	m.info.Start = idx
	return nil
}

// readMemoryType decodes memory limits. Flag bits: 0x01 has max, 0x02
// shared, 0x04 memory64; anything else (e.g. custom page sizes) is refused
// because the page arithmetic of the grow helpers assumes 64 KiB pages.
func readMemoryType(r *reader) (MemoryInfo, error) {
	at := r.offset()
	flags, err := r.readByte()
	if err != nil {
		return MemoryInfo{}, err
	}
	if flags > 0x07 {
		return MemoryInfo{}, fmt.Errorf("offset %d: unsupported memory limits flags 0x%02x", at, flags)
	}
	mem := MemoryInfo{HasMax: flags&0x01 != 0, Shared: flags&0x02 != 0, Memory64: flags&0x04 != 0}
	mem.MinPages, mem.MaxPages, err = readLimits(r, mem.HasMax, mem.Memory64)
	return mem, err
}

// readTableType decodes a reference type and table limits (flag 0x04 marks
// a table64 table, whose size and grow operands are i64).
func readTableType(r *reader) (TableInfo, error) {
	at := r.offset()
	elem, err := r.readByte()
	if err != nil {
		return TableInfo{}, err
	}
	if !isRefType(elem) {
		return TableInfo{}, fmt.Errorf("offset %d: unsupported table element type 0x%02x", at, elem)
	}
	at = r.offset()
	flags, err := r.readByte()
	if err != nil {
		return TableInfo{}, err
	}
	if flags&^0x05 != 0 {
		return TableInfo{}, fmt.Errorf("offset %d: unsupported table limits flags 0x%02x", at, flags)
	}
	t := TableInfo{ElemType: elem, HasMax: flags&0x01 != 0, Table64: flags&0x04 != 0}
	t.Min, t.Max, err = readLimits(r, t.HasMax, t.Table64)
	return t, err
}

func readLimits(r *reader, hasMax, is64 bool) (minimum, maximum uint64, err error) {
	bits := uint(32)
	if is64 {
		bits = 64
	}
	if minimum, err = r.uleb(bits); err != nil || !hasMax {
		return minimum, 0, err
	}
	maximum, err = r.uleb(bits)
	return minimum, maximum, err
}

func readGlobalType(r *reader) error {
	at := r.offset()
	vt, err := r.readByte()
	if err != nil {
		return err
	}
	if !isValType(vt) {
		return fmt.Errorf("offset %d: unsupported global type 0x%02x", at, vt)
	}
	at = r.offset()
	mut, err := r.readByte()
	if err != nil {
		return err
	}
	if mut > 1 {
		return fmt.Errorf("offset %d: invalid global mutability 0x%02x", at, mut)
	}
	return nil
}

func (m *module) readTagType(r *reader) error {
	at := r.offset()
	attr, err := r.readByte()
	if err != nil {
		return err
	}
	if attr != 0 {
		return fmt.Errorf("offset %d: invalid tag attribute 0x%02x", at, attr)
	}
	return (&decoder{r: r, space: &m.space}).index(idxType)
}
