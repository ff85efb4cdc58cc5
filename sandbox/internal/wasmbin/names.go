package wasmbin

import "unicode/utf8"

// MaxFuncNameBytes bounds each function name the rewritten module keeps.
//
// wasmtime copies a frame's function name out of the name section into
// every frame of every trap's backtrace (a stack overflow has thousands of
// frames), so a module that names its recursive function with 4 MiB of
// text made one trap allocate tens of gigabytes. The rewriter therefore
// replaces every "name" custom section with one of its own, at the end of
// the module: the module name GuestModuleName, then the function names of
// the module's first name section, each cut to MaxFuncNameBytes on a rune
// boundary. Local and every other kind of name are dropped; a name section
// that does not decode contributes no function names (wasmtime would
// ignore it too).
const MaxFuncNameBytes = 128

// GuestModuleName is the module name every rewritten module carries, so
// that a trap's frames can be told apart from those of modules sandboxd
// instantiates beside it (a plugin's kernel, say): only rewritten modules
// have it, since the module's own module name is dropped.
const GuestModuleName = "sandboxd:guest"

// Ids of the name subsections the rewriter writes.
const (
	nameSubsectionModule = 0
	nameSubsectionFuncs  = 1
)

// isNameSection says whether s is a "name" custom section.
func isNameSection(s section) bool {
	if s.id != secCustom {
		return false
	}
	name, err := newReader(s.payload, s.offset).name()
	return err == nil && name == "name"
}

// nameSection encodes the rewritten module's name section (the whole
// section, id and size included).
func (m *module) nameSection() []byte {
	var funcs []byte
	for _, s := range m.sections {
		if isNameSection(s) {
			r := newReader(s.payload, s.offset)
			_, _ = r.name()
			funcs, _ = boundedFuncNames(r)
			break
		}
	}
	p := appendULEB(nil, uint64(len("name")))
	p = append(p, "name"...)
	p = append(p, nameSubsectionModule)
	p = appendULEB(p, uint64(len(GuestModuleName)+1))
	p = appendULEB(p, uint64(len(GuestModuleName)))
	p = append(p, GuestModuleName...)
	if funcs != nil {
		p = append(p, nameSubsectionFuncs)
		p = appendULEB(p, uint64(len(funcs)))
		p = append(p, funcs...)
	}
	out := appendULEB([]byte{secCustom}, uint64(len(p)))
	return append(out, p...)
}

// boundedFuncNames finds the function names subsection and re-encodes it
// with every name cut to MaxFuncNameBytes. It returns nil when there is
// none, and false when the section does not decode.
func boundedFuncNames(r *reader) ([]byte, bool) {
	for !r.eof() {
		id, err := r.readByte()
		if err != nil {
			return nil, false
		}
		size, err := r.u32()
		if err != nil {
			return nil, false
		}
		body, err := r.bytes(uint64(size))
		if err != nil {
			return nil, false
		}
		if id != nameSubsectionFuncs {
			continue
		}
		sub := newReader(body, 0)
		n, err := sub.count("function name", 2)
		if err != nil {
			return nil, false
		}
		out := appendULEB(nil, uint64(n))
		for range n {
			idx, err := sub.u32()
			if err != nil {
				return nil, false
			}
			name, err := sub.name()
			if err != nil {
				return nil, false
			}
			name = cutName(name)
			out = appendULEB(out, uint64(idx))
			out = appendULEB(out, uint64(len(name)))
			out = append(out, name...)
		}
		if !sub.eof() {
			return nil, false
		}
		return out, true
	}
	return nil, true
}

// cutName returns the longest prefix of a valid UTF-8 name of at most
// MaxFuncNameBytes bytes that ends on a rune boundary.
func cutName(s string) string {
	if len(s) <= MaxFuncNameBytes {
		return s
	}
	n := MaxFuncNameBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
