package wasmbin

// Pre-initialisation: a wizer-style snapshot of a reactor. The host
// instantiates a copy of the module (PrepareSnapshot adds exports of its
// mutable globals), runs its start function and _initialize once, reads
// its linear memory and globals, and ApplySnapshot emits the original
// module with that state as its initial state: the globals' initializers
// replaced by the captured constants, the data section replaced by
// segments covering the non-zero bytes of the memory image, the memory's
// minimum raised to the image's pages, the start section and the
// _initialize export removed (they have run; running them again would
// initialise twice). Every other byte, code included, is the original's,
// so the function indices, the name section and offsets into the code
// stay valid.
//
// Only state inside the instance can be captured, so the module must keep
// all of its state there, and the state must be what instantiation and
// the memory image reproduce. PrepareSnapshot refuses, with a
// *SnapshotError, a module that:
//   - imports a memory, table or global (their state lives in the host);
//   - has more than one memory, or a shared or 64-bit one;
//   - has code that changes a table (table.set, table.grow, table.fill,
//     table.copy, table.init, elem.drop): tables are rebuilt from the
//     element segments at instantiation, so a change made by the
//     initialiser would be lost (checked over all code, since which
//     functions the initialiser reaches is not known statically);
//   - has passive data segments or code using memory.init or data.drop
//     (a segment's dropped state is not in the image);
//   - has a mutable global of a type other than i32, i64, f32, f64;
//   - has neither _initialize nor a start function (nothing to run).

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// InitializeExport is the reactor initialiser WASI defines.
const InitializeExport = "_initialize"

// SnapshotGlobalPrefix followed by a global's index names the exports
// PrepareSnapshot adds to the copy it instantiates. (Not ReservedPrefix:
// Instrument refuses that in what it is given.)
const SnapshotGlobalPrefix = "sandboxd-preinit-global-"

// maxDataSegments is wasmparser's limit on data segments.
const maxDataSegments = 100_000

// SnapshotError says why a module cannot be pre-initialised.
type SnapshotError struct {
	Reason string
}

func (e *SnapshotError) Error() string { return "cannot pre-initialise the module: " + e.Reason }

func refuse(format string, args ...any) error {
	return &SnapshotError{Reason: fmt.Sprintf(format, args...)}
}

// SnapshotGlobal is a defined mutable global the snapshot captures.
type SnapshotGlobal struct {
	Index  uint32 // in the module's global index space
	Type   byte   // 0x7f i32, 0x7e i64, 0x7d f32, 0x7c f64
	Export string // its export in PrepareSnapshot's copy
}

// SnapshotPlan is what the host needs to take a snapshot of a module.
type SnapshotPlan struct {
	Globals    []SnapshotGlobal
	HasMemory  bool       // the module defines a memory (at most one)
	Memory     MemoryInfo // its type, if HasMemory
	Initialize bool       // the module exports _initialize
	HasStart   bool       // the module has a start function
}

// SnapshotImage is the state the host read from the initialised copy.
type SnapshotImage struct {
	Memory  []byte   // the whole linear memory (a multiple of 64 KiB); nil without one
	Globals []uint64 // the bits of each of SnapshotPlan.Globals, in order
}

// globalEntry is one entry of the global section, with its bytes.
type globalEntry struct {
	typ     byte
	mutable bool
	raw     []byte // the whole entry: type, mutability, initializer
}

// PrepareSnapshot checks that wasm can be pre-initialised and returns the
// copy to instantiate (wasm with an export of every mutable global) and the
// plan ApplySnapshot follows.
func PrepareSnapshot(wasm []byte) (instrumentable []byte, plan *SnapshotPlan, err error) {
	m, err := parseModule(wasm)
	if err != nil {
		return nil, nil, err
	}
	plan = &SnapshotPlan{HasStart: m.info.HasStart}
	switch {
	case m.info.ImportedMemories > 0:
		return nil, nil, refuse("it imports a memory, whose contents live outside the module")
	case m.info.ImportedTables > 0:
		return nil, nil, refuse("it imports a table, whose contents live outside the module")
	case m.info.ImportedGlobals > 0:
		return nil, nil, refuse("it imports a global, whose value lives outside the module")
	case len(m.memories) > 1:
		return nil, nil, refuse("it has %d memories; pre-initialisation takes at most one", len(m.memories))
	}
	if len(m.memories) == 1 {
		mem := m.memories[0]
		if mem.Shared {
			return nil, nil, refuse("its memory is shared, so other threads could see it change")
		}
		if mem.Memory64 {
			return nil, nil, refuse("its memory is 64-bit")
		}
		plan.HasMemory, plan.Memory = true, mem
	}
	globals, err := m.globalEntries()
	if err != nil {
		return nil, nil, err
	}
	for i, g := range globals {
		if !g.mutable {
			continue
		}
		switch g.typ {
		case valI32, valI64, valF32, valF64:
		default:
			return nil, nil, refuse("global %d is a mutable global of type 0x%02x; only numbers can be captured", i, g.typ)
		}
		plan.Globals = append(plan.Globals, SnapshotGlobal{Index: uint32(i), Type: g.typ, Export: SnapshotGlobalPrefix + strconv.Itoa(i)})
	}
	if err := m.checkSnapshotData(); err != nil {
		return nil, nil, err
	}
	if err := m.checkSnapshotCode(); err != nil {
		return nil, nil, err
	}
	exports, err := m.exportList()
	if err != nil {
		return nil, nil, err
	}
	for _, x := range exports {
		if strings.HasPrefix(x.name, SnapshotGlobalPrefix) {
			return nil, nil, refuse("it exports %q, a name pre-initialisation uses for itself", x.name)
		}
		if x.name == InitializeExport && x.kind == kindFunc {
			plan.Initialize = true
		}
	}
	if !plan.Initialize && !plan.HasStart {
		return nil, nil, refuse("it has neither an %q export nor a start function: there is no initialiser to run ahead of time", InitializeExport)
	}
	var extra []byte
	for _, g := range plan.Globals {
		extra = appendName(extra, g.Export)
		extra = append(extra, kindGlobal)
		extra = appendULEB(extra, uint64(g.Index))
	}
	replaced := map[byte][]byte{secExport: m.exports.append(len(plan.Globals), extra)}
	return m.emit(m.withNewSections(replaced), replaced, nil), plan, nil
}

// ApplySnapshot returns wasm (the module PrepareSnapshot was given) with
// img as its initial state; see the package comment at the top of this
// file for what changes. maxBytes (0: no bound) bounds the module it
// emits: an initialiser that leaves its memory full of data is refused
// with a *SnapshotError before that data is copied, so what the host
// holds to pre-initialise a module is bounded as the module it is sent is.
func ApplySnapshot(wasm []byte, plan *SnapshotPlan, img SnapshotImage, maxBytes int) ([]byte, error) {
	m, err := parseModule(wasm)
	if err != nil {
		return nil, err
	}
	if len(img.Globals) != len(plan.Globals) {
		return nil, fmt.Errorf("wasmbin: snapshot has %d globals, the plan %d", len(img.Globals), len(plan.Globals))
	}
	globals, err := m.globalEntries()
	if err != nil {
		return nil, err
	}
	replaced := map[byte][]byte{}
	// Globals: the captured constants in place of the mutable ones'
	// initializers.
	captured := map[uint32]uint64{}
	for i, g := range plan.Globals {
		if int(g.Index) >= len(globals) || globals[g.Index].typ != g.Type || !globals[g.Index].mutable {
			return nil, fmt.Errorf("wasmbin: snapshot global %d does not match the module", g.Index)
		}
		captured[g.Index] = img.Globals[i]
	}
	if len(globals) > 0 {
		out := appendULEB(nil, uint64(len(globals)))
		for i, g := range globals {
			bits, ok := captured[uint32(i)]
			if !ok {
				out = append(out, g.raw...)
				continue
			}
			out = append(out, g.typ, 0x01)
			out = appendConst(out, g.typ, bits)
			out = append(out, opEnd)
		}
		replaced[secGlobal] = out
	}
	// Memory: the image's size as its minimum, the image as its data.
	if plan.HasMemory {
		if len(img.Memory)%(1<<pageShift) != 0 {
			return nil, fmt.Errorf("wasmbin: memory image of %d bytes is not a whole number of pages", len(img.Memory))
		}
		pages := uint64(len(img.Memory) >> pageShift)
		mem := plan.Memory
		if pages < mem.MinPages || (mem.HasMax && pages > mem.MaxPages) {
			return nil, fmt.Errorf("wasmbin: memory image of %d pages is outside the memory's limits", pages)
		}
		out := []byte{1}
		if mem.HasMax {
			out = append(out, 0x01)
			out = appendULEB(out, pages)
			out = appendULEB(out, mem.MaxPages)
		} else {
			out = append(out, 0x00)
			out = appendULEB(out, pages)
		}
		replaced[secMemory] = out
		budget := math.MaxInt
		if maxBytes > 0 {
			budget = maxBytes // the module is checked whole below
		}
		data, ok := dataSegments(img.Memory, budget)
		if !ok {
			return nil, tooMuchData(maxBytes)
		}
		replaced[secData] = data
	} else if len(img.Memory) != 0 {
		return nil, fmt.Errorf("wasmbin: memory image for a module without a memory")
	}
	// Exports: _initialize no longer (it has run).
	exports, err := m.exportList()
	if err != nil {
		return nil, err
	}
	var kept []byte
	n := 0
	for _, x := range exports {
		if x.name == InitializeExport && x.kind == kindFunc {
			continue
		}
		kept = append(kept, x.raw...)
		n++
	}
	replaced[secExport] = append(appendULEB(nil, uint64(n)), kept...)

	secs := m.withNewSections(replaced)
	if _, ok := replaced[secData]; ok && !hasSection(secs, secData) {
		at := insertPos(secs, sectionRank[secData])
		secs = append(secs[:at], append([]section{{id: secData}}, secs[at:]...)...)
	}
	drop := map[byte]bool{secStart: true, secDataCount: true}
	out := m.emit(secs, replaced, drop)
	if maxBytes > 0 && len(out) > maxBytes {
		return nil, tooMuchData(maxBytes)
	}
	return out, nil
}

func tooMuchData(maxBytes int) error {
	return refuse("its memory after the initialiser holds more data than a module may hold: the module would be over %d bytes, the largest the host accepts", maxBytes)
}

// emit assembles secs, with the payloads of replaced and without the
// sections of the ids in drop.
func (m *module) emit(secs []section, replaced map[byte][]byte, drop map[byte]bool) []byte {
	out := append([]byte(nil), wasmHeader...)
	for _, s := range secs {
		if drop[s.id] && s.id != secCustom {
			continue
		}
		payload := s.payload
		if p, ok := replaced[s.id]; ok && s.id != secCustom {
			payload = p
		}
		out = append(out, s.id)
		out = appendULEB(out, uint64(len(payload)))
		out = append(out, payload...)
	}
	return out
}

// globalEntries decodes the global section entry by entry.
func (m *module) globalEntries() ([]globalEntry, error) {
	r := newReader(m.globals.items, 0)
	out := make([]globalEntry, 0, m.globals.count)
	for range m.globals.count {
		start := r.pos
		typ, err := r.readByte()
		if err != nil {
			return nil, err
		}
		mut, err := r.readByte()
		if err != nil {
			return nil, err
		}
		if err := (&decoder{r: r, where: "global initializer"}).constExpr(); err != nil {
			return nil, err
		}
		out = append(out, globalEntry{typ: typ, mutable: mut == 1, raw: r.buf[start:r.pos]})
	}
	return out, nil
}

// exportEntry is one export with its encoded bytes.
type exportEntry struct {
	name string
	kind byte
	raw  []byte
}

func (m *module) exportList() ([]exportEntry, error) {
	r := newReader(m.exports.items, 0)
	out := make([]exportEntry, 0, m.exports.count)
	for range m.exports.count {
		start := r.pos
		name, err := r.name()
		if err != nil {
			return nil, err
		}
		kind, err := r.readByte()
		if err != nil {
			return nil, err
		}
		if _, err := r.u32(); err != nil {
			return nil, err
		}
		out = append(out, exportEntry{name: name, kind: kind, raw: r.buf[start:r.pos]})
	}
	return out, nil
}

// checkSnapshotData refuses passive data segments: memory.init would
// need them as they were, and whether the initialiser dropped one is not
// in the image.
func (m *module) checkSnapshotData() error {
	for _, s := range m.sections {
		if s.id != secData {
			continue
		}
		r := newReader(s.payload, s.offset)
		n, err := r.u32()
		if err != nil {
			return err
		}
		for i := range n {
			flags, err := r.u32()
			if err != nil {
				return err
			}
			if flags == 1 {
				return refuse("data segment %d is passive: whether the initialiser used or dropped it cannot be captured", i)
			}
			if flags == 2 {
				if _, err := r.u32(); err != nil {
					return err
				}
			}
			if err := (&decoder{r: r, where: "data segment offset"}).constExpr(); err != nil {
				return err
			}
			size, err := r.u32()
			if err != nil {
				return err
			}
			if err := r.skip(uint64(size)); err != nil {
				return err
			}
		}
	}
	return nil
}

// snapshotRefused names the instructions whose effects a memory image
// cannot carry.
var snapshotRefused = map[instrKind]string{
	kindTableSet: "table.set", kindTableGrow: "table.grow", kindTableFill: "table.fill",
	kindTableCopy: "table.copy", kindTableInit: "table.init", kindElemDrop: "elem.drop",
	kindMemoryInit: "memory.init", kindDataDrop: "data.drop",
}

// checkSnapshotCode refuses code that changes a table or uses a data
// segment at run time, anywhere in the module.
func (m *module) checkSnapshotCode() error {
	if m.code == nil {
		return nil
	}
	r := newReader(m.code.payload, m.code.offset)
	n, err := r.count("function body", 1)
	if err != nil {
		return err
	}
	for i := range n {
		funcIdx := uint64(m.info.ImportedFuncs) + uint64(i)
		size, err := r.u32()
		if err != nil {
			return err
		}
		base := r.offset()
		body, err := r.bytes(uint64(size))
		if err != nil {
			return err
		}
		br := newReader(body, base)
		if err := skipLocals(br); err != nil {
			return err
		}
		d := &decoder{r: br, where: fmt.Sprintf("function %d", funcIdx), space: &m.space}
		for depth := 0; ; {
			at := br.offset()
			in, err := d.next()
			if err != nil {
				return wrapDecodeError(d.where, err)
			}
			if name, bad := snapshotRefused[in.kind]; bad {
				return refuse("function %d uses %s (at offset %d): a table or data segment it changes is not part of the snapshot", funcIdx, name, at)
			}
			if in.kind == kindBlockStart {
				depth++
			} else if in.kind == kindEnd {
				if depth == 0 {
					break
				}
				depth--
			}
		}
	}
	return nil
}

// appendConst appends the constant instruction of type typ with bits.
func appendConst(b []byte, typ byte, bits uint64) []byte {
	switch typ {
	case valI32:
		return appendSLEB(append(b, opI32Const), int64(int32(uint32(bits))))
	case valI64:
		return appendSLEB(append(b, opI64Const), int64(bits))
	case valF32:
		return binary.LittleEndian.AppendUint32(append(b, 0x43), uint32(bits))
	default: // valF64
		return binary.LittleEndian.AppendUint64(append(b, 0x44), bits)
	}
}

func appendName(b []byte, name string) []byte {
	return append(appendULEB(b, uint64(len(name))), name...)
}

// dataSegments encodes a data section (without its id and size) whose
// active segments put mem's non-zero bytes in place; the rest of a fresh
// memory is zero already. Runs of zeros shorter than the gap are kept
// inside a segment (a segment costs about a dozen bytes), and the gap
// grows until the segments fit wasmparser's limit and are dense enough
// for wasmtime's copy-on-write memory image: wasmtime makes one only if
// the data is at least half of the range it spans, or that range is at
// most 1 MiB (wasmtime-environ's try_static_init); without one, every
// instance would copy the segments in.
//
// ok is false, and nothing is allocated for the section, when it would be
// larger than budget bytes: mem is the guest's (up to 4 GiB), so neither
// the section nor the list of runs is built beyond what budget allows.
func dataSegments(mem []byte, budget int) (section []byte, ok bool) {
	type run struct{ start, end int }
	var runs []run
	size := 0 // the section's encoded size
	for gap := 32; ; gap *= 8 {
		runs = runs[:0]
		data := 0
		i := 0
		for i < len(mem) {
			i = skipZeros(mem, i)
			if i == len(mem) {
				break
			}
			start := i
			zeros := 0
			for i < len(mem) && zeros < gap {
				if mem[i] != 0 {
					zeros = 0
					i++
				} else { // up to the next non-zero byte, or the gap's end
					j := min(skipZeros(mem, i), i+gap-zeros)
					zeros += j - i
					i = j
				}
				if i-zeros-start > budget-data {
					return nil, false // a wider gap only adds zeros
				}
			}
			runs = append(runs, run{start, i - zeros})
			data += i - zeros - start
			if len(runs) > maxDataSegments {
				break // too many: the next gap merges them
			}
		}
		extent := 0
		if len(runs) > 0 {
			extent = runs[len(runs)-1].end - runs[0].start
		}
		if len(runs) <= 1 || (len(runs) <= maxDataSegments && (extent <= 1<<20 || 2*data >= extent)) || gap > len(mem) {
			size = uvarintLen(uint64(len(runs))) + data
			for _, r := range runs {
				size += 3 + svarintLen(int64(int32(uint32(r.start)))) + uvarintLen(uint64(r.end-r.start))
			}
			break
		}
	}
	if size > budget {
		return nil, false
	}
	out := make([]byte, 0, size)
	out = appendULEB(out, uint64(len(runs)))
	for _, r := range runs {
		out = append(out, 0x00, opI32Const)
		out = appendSLEB(out, int64(int32(uint32(r.start))))
		out = append(out, opEnd)
		out = appendULEB(out, uint64(r.end-r.start))
		out = append(out, mem[r.start:r.end]...)
	}
	return out, true
}

// zeroChunk is what skipZeros compares memory with, a chunk at a time
// (bytes.Equal is the vectorised memcmp).
var zeroChunk [4096]byte

// skipZeros returns the index of the first non-zero byte of mem at or
// after i (len(mem) if none), a chunk, then a word at a time: most of a
// large memory is zero pages the guest never touched, and the scan runs
// after the initialiser, outside its fences.
func skipZeros(mem []byte, i int) int {
	for i < len(mem) && i%8 != 0 && mem[i] == 0 {
		i++
	}
	for i+len(zeroChunk) <= len(mem) && bytes.Equal(mem[i:i+len(zeroChunk)], zeroChunk[:]) {
		i += len(zeroChunk)
	}
	for i+8 <= len(mem) && binary.LittleEndian.Uint64(mem[i:]) == 0 {
		i += 8
	}
	for i < len(mem) && mem[i] == 0 {
		i++
	}
	return i
}

// uvarintLen and svarintLen are the lengths of v's LEB128 encodings.
func uvarintLen(v uint64) int { return len(appendULEB(nil, v)) }
func svarintLen(v int64) int  { return len(appendSLEB(nil, v)) }
