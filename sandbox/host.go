package sandbox

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/protocol"
)

// Capabilities are the host functions a run grants. Nothing is importable
// unless granted.
type Capabilities struct {
	Log    bool   // host::log(ptr i32, len i32)
	Random bool   // host::random() -> i64, splitmix64 seeded with Seed
	Seed   uint64 // seed of host::random
	Clock  bool   // host::now_ns() -> i64, monotonic ns since the run began
	WASI   *WASI  // WASI preview1 (wasi.go); nil: not granted
}

// HostModule is the import module name of every host function.
const HostModule = "host"

// MaxLogLineBytes caps one guest log line; longer lines are cut (on a
// UTF-8 boundary) and the run is marked as truncated.
const MaxLogLineBytes = 16 << 10

// LogLineOverhead is what every accepted log line costs against the run's
// logBytes on top of the line's JSON-encoded size. It covers the `log`
// notification around the line as the sidecar writes it: the
// Content-Length header (25 bytes for any line), the envelope keys (64),
// seq (at most 7 digits, since no run can keep more lines than
// HardMaximums' logBytes / 128) and a request id of up to 32 encoded
// bytes. Charging it makes a run's notifications on the wire at most
// logBytes whatever the lines' count, length or content: without it,
// empty lines would be free and a looping guest could flood the parent.
const LogLineOverhead = 128

// LogLineCost is what one log line costs against logBytes: its size as a
// JSON string (quotes and escapes, exactly as encoding/json writes it)
// plus LogLineOverhead.
func LogLineCost(line string) uint64 {
	return uint64(jsonStringLen(line)) + LogLineOverhead
}

// jsonStringLen is len(json.Marshal(s)) without encoding: encoding/json
// escapes quote and backslash with one backslash, \b \f \n \r \t likewise,
// other control characters, <, > and & (HTML-safe by default), U+2028,
// U+2029 and each invalid UTF-8 byte as six-byte \uXXXX sequences.
func jsonStringLen(s string) int {
	n := 2 // the quotes
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			switch {
			case b == '"' || b == '\\' || b == '\b' || b == '\f' || b == '\n' || b == '\r' || b == '\t':
				n += 2
			case b < 0x20 || b == '<' || b == '>' || b == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 6
		case r == '\u2028' || r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// hostFunc is one function of the host ABI.
type hostFunc struct {
	name    string
	params  []wasmtime.ValKind
	results []wasmtime.ValKind
	granted func(Capabilities) bool
}

// hostABI is the whole host ABI, in the order documented in the protocol.
var hostABI = []hostFunc{
	{"log", []wasmtime.ValKind{wasmtime.KindI32, wasmtime.KindI32}, nil, func(c Capabilities) bool { return c.Log }},
	{"random", nil, []wasmtime.ValKind{wasmtime.KindI64}, func(c Capabilities) bool { return c.Random }},
	{"now_ns", nil, []wasmtime.ValKind{wasmtime.KindI64}, func(c Capabilities) bool { return c.Clock }},
}

// hostSignatures is the signature text of each host function, built
// once (every run's import check compares with it).
var hostSignatures = sync.OnceValue(func() map[string]string {
	out := map[string]string{}
	for _, h := range hostABI {
		out[h.name] = describeFuncType(kindNames(h.params), kindNames(h.results))
	}
	return out
})

// hostFuncTypes is the wasmtime type of each host function, built once
// per engine: wasmtime registers a type with the engine that first uses
// it, and NewFunc refuses (aborts the process on) a type of another.
type hostFuncTypes struct {
	once  sync.Once
	types map[string]*wasmtime.FuncType
}

func (t *hostFuncTypes) of(name string) *wasmtime.FuncType {
	t.once.Do(func() {
		t.types = map[string]*wasmtime.FuncType{}
		for _, h := range hostABI {
			t.types[h.name] = sharedFuncType(valTypes(h.params), valTypes(h.results))
		}
	})
	return t.types[name]
}

// sharedFuncType makes a function type that any number of runs may use at
// once. wasmtime's C API builds a type's parameter and result lists the
// first time they are asked for (NewFunc and Linker.FuncNew ask), in a cell
// that aborts the process ("reentrant init") when two threads fill it at the
// same moment. Asking once here, before the type is shared, fills both;
// later asks only read.
func sharedFuncType(params, results []*wasmtime.ValType) *wasmtime.FuncType {
	ft := wasmtime.NewFuncType(params, results)
	ft.Params()
	ft.Results()
	return ft
}

// signatureType is the shared function type of a signature written as
// describeFuncType writes it: "(i64, i64) -> ()".
func signatureType(sig string) *wasmtime.FuncType {
	params, results, _ := strings.Cut(sig, " -> ")
	list := func(l string) []string {
		if l = strings.Trim(l, "()"); l == "" {
			return nil
		}
		return strings.Split(l, ", ")
	}
	return sharedFuncType(valTypes(valKinds(list(params))), valTypes(valKinds(list(results))))
}

// valKinds are the kinds of type names: i32, i64, f32, f64, and bytes (an
// Extism memory handle, an i64).
func valKinds(names []string) []wasmtime.ValKind {
	out := make([]wasmtime.ValKind, len(names))
	for i, n := range names {
		switch n {
		case "i32":
			out[i] = wasmtime.KindI32
		case "f32":
			out[i] = wasmtime.KindF32
		case "f64":
			out[i] = wasmtime.KindF64
		default:
			out[i] = wasmtime.KindI64
		}
	}
	return out
}

func (h hostFunc) signature() string { return hostSignatures()[h.name] }

func kindNames(ks []wasmtime.ValKind) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = map[wasmtime.ValKind]string{wasmtime.KindI32: "i32", wasmtime.KindI64: "i64"}[k]
	}
	return out
}

// hostNames lists the host functions, as module::name, that keep passes
// (all of them when keep is nil), or "none".
func hostNames(keep func(hostFunc) bool) string {
	var names []string
	for _, h := range hostABI {
		if keep == nil || keep(h) {
			names = append(names, HostModule+"::"+h.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// grantedNames says what caps grant, for a refusal message.
func grantedNames(caps Capabilities) string {
	return "granted to this run: " + hostNames(func(h hostFunc) bool { return h.granted(caps) })
}

func lookupHost(module, name string) (hostFunc, bool) {
	if module != HostModule {
		return hostFunc{}, false
	}
	for _, h := range hostABI {
		if h.name == name {
			return h, true
		}
	}
	return hostFunc{}, false
}

func capabilityOf(fn string) string {
	if fn == "now_ns" {
		return "clock"
	}
	return fn
}

// hostRandom is host::random: the next value of the run's stream.
func (s *store) hostRandom(*wasmtime.Caller, []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	return []wasmtime.Val{wasmtime.ValI64(int64(s.random.next()))}, nil
}

// hostNow is host::now_ns: the nanoseconds since the call began.
func (s *store) hostNow(*wasmtime.Caller, []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	return []wasmtime.Val{wasmtime.ValI64(int64(time.Since(s.cur.started)))}, nil
}

func valTypes(ks []wasmtime.ValKind) []*wasmtime.ValType {
	out := make([]*wasmtime.ValType, len(ks))
	for i, k := range ks {
		out[i] = wasmtime.NewValType(k)
	}
	return out
}

// hostLog copies a line out of the guest's exported memory, bounds-checked,
// and hands it to the run's sink. It never blocks on I/O: the sink only
// queues (see Request.Log), so a slow reader cannot stall the time fence.
func (s *store) hostLog(c *wasmtime.Caller, args []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	ptr, n := uint64(uint32(args[0].I32())), uint64(uint32(args[1].I32()))
	mem := s.guestMemory(c)
	if mem == nil {
		s.cur.hostTrap = "host::log needs the guest to export its memory as \"memory\""
		return nil, wasmtime.NewTrap(s.cur.hostTrap)
	}
	data := mem.UnsafeData(c)
	if ptr+n > uint64(len(data)) {
		s.cur.hostTrap = fmt.Sprintf("host::log: bytes [%d, %d) lie outside the guest's memory of %d bytes", ptr, ptr+n, len(data))
		return nil, wasmtime.NewTrap(s.cur.hostTrap)
	}
	if s.cur.log.full {
		return nil, nil // dropped without copying: a looping guest costs the host almost nothing
	}
	if n > MaxLogLineBytes {
		n = MaxLogLineBytes
		s.cur.log.truncated = true
	}
	line := validUTF8(data[ptr : ptr+n])
	if len(line) > MaxLogLineBytes { // replacement characters can grow it
		line = protocol.CutUTF8(line, MaxLogLineBytes)
	}
	s.cur.log.emit(line)
	return nil, nil
}

// guestMemory is the guest's export "memory". A module may export the
// host function itself (`(export "run" (func $log))`): called by the host,
// it has no calling instance to ask, so the run's instance is asked.
func (s *store) guestMemory(c *wasmtime.Caller) *wasmtime.Memory {
	if m := callerMemory(c, "memory"); m != nil {
		return m
	}
	if s.instance != nil {
		return exportedMemory(c, s.instance, "memory")
	}
	return nil
}

// validUTF8 copies b into a string, replacing each byte that is not part of
// a valid UTF-8 sequence with U+FFFD (as Python's and WHATWG's decoders do).
func validUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			sb.WriteRune(utf8.RuneError)
		} else {
			sb.Write(b[:size])
		}
		b = b[size:]
	}
	return sb.String()
}

// logSink enforces the per-run log budget and forwards accepted lines.
// Each line costs LogLineCost; the first line that does not fit is
// dropped with every later one, so the log the parent sees is a prefix.
type logSink struct {
	budget    uint64
	used      uint64
	lines     int
	truncated bool // some line was cut or dropped
	full      bool // a line was dropped: drop every later one
	dropped   int  // a plugin's lines dropped for want of the log capability
	forward   func(line string)
}

func (s *logSink) emit(line string) {
	if s.full {
		return
	}
	cost := LogLineCost(line)
	if cost > s.budget-s.used {
		s.truncated, s.full = true, true
		return
	}
	s.used += cost
	s.lines++
	if s.forward != nil {
		s.forward(line)
	}
}

// splitmix64 is the generator behind host::random. Its stream is part of
// the contract: with seed 42 the first value, wrapped to i32, is 803958421.
type splitmix64 struct{ state uint64 }

func (s *splitmix64) next() uint64 {
	s.state += 0x9E3779B97F4A7C15
	z := s.state
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// fill writes the stream's next values into dst, little-endian, 8 bytes
// each (the last one cut to what is left).
func (s *splitmix64) fill(dst []byte) {
	var word [8]byte
	for len(dst) > 0 {
		binary.LittleEndian.PutUint64(word[:], s.next())
		dst = dst[copy(dst, word[:]):]
	}
}
