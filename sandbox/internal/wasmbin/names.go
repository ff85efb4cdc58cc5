package wasmbin

import "unicode/utf8"

// MaxFuncNameBytes bounds each function name the rewritten module keeps.
//
// wasmtime copies a frame's function name out of the name section into
// every frame of every trap's backtrace (a stack overflow has thousands of
// frames), so a module that names its recursive function with 4 MiB of
// text made one trap allocate tens of gigabytes. The rewriter therefore
// rewrites the "name" custom section: only function names survive, each
// cut to MaxFuncNameBytes on a rune boundary; module, local and every
// other kind of name are dropped, and so is any later name section. A
// name section that does not decode is dropped whole (wasmtime would
// ignore it too).
const MaxFuncNameBytes = 128

// nameSubsectionFuncs is the id of the function names subsection.
const nameSubsectionFuncs = 1

// customPayload returns what the rewritten module keeps of custom section
// s: other custom sections unchanged, the first name section bounded, and
// nothing (drop=true) for any further or undecodable name section.
func customPayload(s section, seenNames *bool) (payload []byte, drop bool) {
	r := newReader(s.payload, s.offset)
	name, err := r.name()
	if err != nil || name != "name" {
		return s.payload, false // wasmtime reads no other custom section
	}
	if *seenNames {
		return nil, true
	}
	*seenNames = true
	funcs, ok := boundedFuncNames(r)
	if !ok || funcs == nil {
		return nil, true
	}
	out := appendULEB(nil, uint64(len("name")))
	out = append(out, "name"...)
	out = append(out, nameSubsectionFuncs)
	out = appendULEB(out, uint64(len(funcs)))
	return append(out, funcs...), false
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
