package wasmbin

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// errEOF is wrapped by every read past the end of the input, so that
// truncated modules produce an error (never a panic) that still names the
// offset at which the data ran out.
var errEOF = errors.New("unexpected end of data")

// reader decodes the primitive encodings of the wasm binary format from a
// byte slice. base is the offset of buf inside the whole module, so that
// error messages carry absolute file offsets that can be checked with any
// wasm dump tool.
type reader struct {
	buf  []byte
	pos  int
	base int
}

func newReader(buf []byte, base int) *reader {
	return &reader{buf: buf, base: base}
}

// offset returns the absolute module offset of the next unread byte.
func (r *reader) offset() int { return r.base + r.pos }

func (r *reader) eof() bool { return r.pos >= len(r.buf) }

func (r *reader) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", r.offset(), fmt.Sprintf(format, args...))
}

func (r *reader) readByte() (byte, error) {
	if r.pos >= len(r.buf) {
		return 0, fmt.Errorf("offset %d: %w", r.offset(), errEOF)
	}
	b := r.buf[r.pos]
	r.pos++
	return b, nil
}

// bytes returns the next n bytes without copying them.
func (r *reader) bytes(n uint64) ([]byte, error) {
	if n > uint64(len(r.buf)-r.pos) {
		return nil, fmt.Errorf("offset %d: need %d bytes, have %d: %w", r.offset(), n, len(r.buf)-r.pos, errEOF)
	}
	b := r.buf[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return b, nil
}

func (r *reader) skip(n uint64) error {
	_, err := r.bytes(n)
	return err
}

// uleb decodes an unsigned LEB128 of at most bits significant bits, rejecting
// over-long encodings and set bits beyond the width exactly as the spec does.
func (r *reader) uleb(bits uint) (uint64, error) {
	start := r.offset()
	var result uint64
	maxBytes := (bits + 6) / 7
	for i := uint(0); i < maxBytes; i++ {
		b, err := r.readByte()
		if err != nil {
			return 0, err
		}
		shift := 7 * i
		if i == maxBytes-1 {
			if b&0x80 != 0 {
				break
			}
			if remaining := bits - shift; remaining < 7 && b>>remaining != 0 {
				return 0, fmt.Errorf("offset %d: integer too large for u%d", start, bits)
			}
		}
		result |= uint64(b&0x7f) << shift
		if b&0x80 == 0 {
			return result, nil
		}
	}
	return 0, fmt.Errorf("offset %d: integer representation too long", start)
}

// sleb decodes a signed LEB128 of at most bits significant bits.
func (r *reader) sleb(bits uint) (int64, error) {
	start := r.offset()
	var result int64
	maxBytes := (bits + 6) / 7
	for i := uint(0); i < maxBytes; i++ {
		b, err := r.readByte()
		if err != nil {
			return 0, err
		}
		shift := 7 * i
		if i == maxBytes-1 {
			if b&0x80 != 0 {
				break
			}
			// Sign-extend the 7 payload bits; the bits beyond the
			// width must all equal the sign bit.
			remaining := bits - shift
			if v := int8(b<<1) >> 1 >> (remaining - 1); v != 0 && v != -1 {
				return 0, fmt.Errorf("offset %d: integer too large for s%d", start, bits)
			}
		}
		result |= int64(b&0x7f) << shift
		if b&0x80 == 0 {
			if shift+7 < 64 && b&0x40 != 0 {
				result |= -1 << (shift + 7)
			}
			return result, nil
		}
	}
	return 0, fmt.Errorf("offset %d: integer representation too long", start)
}

func (r *reader) u32() (uint32, error) {
	v, err := r.uleb(32)
	return uint32(v), err
}

func (r *reader) u64() (uint64, error) { return r.uleb(64) }

// count reads a vector length and sanity-checks it against the bytes left,
// since every vector element takes at least minSize bytes; this keeps a
// hostile length from driving a huge allocation or a long loop.
func (r *reader) count(what string, minSize int) (uint32, error) {
	at := r.offset()
	n, err := r.u32()
	if err != nil {
		return 0, fmt.Errorf("%s count: %w", what, err)
	}
	if minSize > 0 && uint64(n)*uint64(minSize) > uint64(len(r.buf)-r.pos) {
		return 0, fmt.Errorf("offset %d: %s count %d exceeds remaining %d bytes", at, what, n, len(r.buf)-r.pos)
	}
	return n, nil
}

// name reads a length-prefixed UTF-8 string.
func (r *reader) name() (string, error) {
	at := r.offset()
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	b, err := r.bytes(uint64(n))
	if err != nil {
		return "", err
	}
	if !utf8.Valid(b) {
		return "", fmt.Errorf("offset %d: name is not valid UTF-8", at)
	}
	return string(b), nil
}

// appendULEB appends the minimal unsigned LEB128 encoding of v.
func appendULEB(dst []byte, v uint64) []byte {
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(dst, b)
		}
		dst = append(dst, b|0x80)
	}
}

// appendSLEB appends the minimal signed LEB128 encoding of v.
func appendSLEB(dst []byte, v int64) []byte {
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && b&0x40 == 0) || (v == -1 && b&0x40 != 0) {
			return append(dst, b)
		}
		dst = append(dst, b|0x80)
	}
}
