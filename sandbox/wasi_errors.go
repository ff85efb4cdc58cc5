package sandbox

// The errnos our WASI functions answer, and wasmtime's WASI errors that
// are the guest's faults, not sandboxd's (classify.go reports them as the
// guest's traps).

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// preview1 errnos our functions answer (wasi_fds.go and wasi_open.go
// have those of their bounds).
const (
	errnoSuccess     = 0
	errnoBadf        = 8
	errnoFault       = 21
	errnoInval       = 28
	errnoNameTooLong = 37
)

func errno(n int32) ([]wasmtime.Val, *wasmtime.Trap) {
	return []wasmtime.Val{wasmtime.ValI32(n)}, nil
}

// wasiTrap stops the guest for a bad argument, classified as the
// out-of-bounds trap it is (like host::log's).
func (s *store) wasiTrap(msg string) *wasmtime.Trap {
	s.cur.hostTrap = msg
	return wasmtime.NewTrap(msg)
}

// wasmtime's WASI reports a guest pointer it cannot use (outside the
// guest's memory, misaligned, overflowing) as an error naming the region,
// which would otherwise be classified as sandboxd's own (kind host).
// Compiled at first use, not at package init: every start of the program
// (a compile child's too) would pay for them.
var (
	wasiFaultRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`Pointer (out of bounds|not aligned to \d+): Region \{ start: (\d+), len: (\d+) \}`)
	})
	wasiFuncRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`In func ` + WASIModule + `::(\w+)`) })
)

// wasiErrorMessage is the message of a trap for the error wasmtime's
// function name returned when forwarded, naming the function as wasmtime
// does when the guest calls it directly (for wasiPointerFault).
func wasiErrorMessage(name, err string) string {
	msg := strings.TrimPrefix(cleanMessage(err), "error while executing: ")
	if !strings.Contains(msg, "In func "+WASIModule+"::") {
		msg = "In func " + WASIModule + "::" + name + ": " + msg
	}
	return msg
}

// wasiArgumentRE matches wasmtime's error for an argument of a preview1
// type it cannot convert (an enum or flags value out of range, an
// integer too wide): "In func wasi_snapshot_preview1::fd_seek at convert
// Whence: Invalid enum value Whence".
var wasiArgumentRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`In func ` + WASIModule + `::(\w+) at convert (\w+):`)
})

// wasiFault is the guest's trap a WASI error message describes, or nil
// when it describes none: the guest passed a WASI function a pointer it
// cannot use or an argument out of its type's range, the guest's fault
// like an out-of-bounds load (wasmtime reports them as errors, not as
// errnos, in a message of several lines).
func wasiFault(msg string) *Error {
	if m := wasiArgumentRE().FindStringSubmatch(msg); m != nil {
		return &Error{Kind: KindTrap, TrapCode: TrapCodeHost,
			Message: fmt.Sprintf("guest trapped: %s::%s: its %s argument is out of range", WASIModule, m[1], m[2])}
	}
	return wasiPointerFault(msg)
}

// wasiPointerFault is the guest's trap a WASI error message describes
// when the guest passed a WASI function a pointer it cannot use, or nil.
func wasiPointerFault(msg string) *Error {
	m := wasiFaultRE().FindStringSubmatch(msg)
	overflow := strings.Contains(msg, "Pointer overflow")
	if m == nil && !overflow {
		return nil
	}
	fn := "a WASI function"
	if f := wasiFuncRE().FindStringSubmatch(msg); f != nil {
		fn = WASIModule + "::" + f[1]
	}
	if m == nil {
		return &Error{Kind: KindTrap, TrapCode: "memory_out_of_bounds",
			Message: "guest trapped: " + fn + ": a pointer plus its length overflows"}
	}
	start, _ := strconv.ParseUint(m[2], 10, 64)
	n, _ := strconv.ParseUint(m[3], 10, 64)
	code, what := "memory_out_of_bounds", "lie outside the guest's memory"
	if strings.HasPrefix(m[1], "not aligned") {
		code, what = "heap_misaligned", "are "+m[1]+" bytes, as WASI requires"
	}
	return &Error{Kind: KindTrap, TrapCode: code,
		Message: fmt.Sprintf("guest trapped: %s: bytes [%d, %d) %s", fn, start, start+n, what)}
}
