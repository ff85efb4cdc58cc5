package protocol

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Host functions served by the parent (docs/protocol.md, "Host functions
// served by the parent"): a run or an instance declares imports the
// parent answers; when the guest calls one, the sidecar asks the parent
// with a host/call request and the guest waits, within its fences, for
// the answer.

// MethodHostCall is the method of the request the sidecar sends the
// parent when a guest calls a host function it serves.
const MethodHostCall = "host/call"

// HostFunctionsField is the params member that declares them.
const HostFunctionsField = "hostFunctions"

// TypeBytes is the host-function type of an Extism memory handle: an i64
// in the module (Extism's PTR), the bytes behind it on the wire.
const TypeBytes ValType = "bytes"

// Bounds of a declaration.
const (
	// MaxHostFunctions bounds the entries of hostFunctions.
	MaxHostFunctions = 1024
	// MaxHostFunctionValues bounds a declaration's params and its results
	// (wasm's own limit on a function's parameters).
	MaxHostFunctionValues = 1000
	// MaxHostNameBytes bounds a declaration's module and name.
	MaxHostNameBytes = 1024
)

// ReservedHostModules are the import modules a declaration may not name:
// they are sandboxd's own ABIs.
var reservedHostModules = map[string]string{
	"host":                   `sandboxd's own host functions (host::log, random, now_ns)`,
	"wasi_snapshot_preview1": "WASI preview1, granted with capabilities.wasi",
	"extism:host/env":        "the Extism kernel's and sandboxd's (extism:host/user is the one for a plugin's host functions)",
}

// HostFunction declares an import the parent serves.
type HostFunction struct {
	Module  string   `json:"module"`
	Name    string   `json:"name"`
	Params  []string `json:"params"`  // i32, i64, f32, f64, bytes
	Results []string `json:"results"` // likewise
}

// Signature is the declaration's signature as the module sees it (a
// bytes value is an i64 handle), written as Import.Type is:
// "(i64) -> (i32)".
func (f HostFunction) Signature() string {
	in := func(ts []string) string {
		out := make([]string, len(ts))
		for i, t := range ts {
			if ValType(t) == TypeBytes {
				t = string(I64)
			}
			out[i] = t
		}
		return "(" + strings.Join(out, ", ") + ")"
	}
	return in(f.Params) + " -> " + in(f.Results)
}

// UsesBytes says whether any param or result is bytes.
func (f HostFunction) UsesBytes() bool {
	for _, ts := range [2][]string{f.Params, f.Results} {
		for _, t := range ts {
			if ValType(t) == TypeBytes {
				return true
			}
		}
	}
	return false
}

// String names the function as errors do: "env::lookup".
func (f HostFunction) String() string { return f.Module + "::" + f.Name }

// CheckHostFunctions returns the first problem of a list of declarations
// (a *GrantError naming the entry: "hostFunctions[2].params[0]"), or nil.
func CheckHostFunctions(fs []HostFunction) error {
	if len(fs) > MaxHostFunctions {
		return &GrantError{HostFunctionsField, fmt.Sprintf("has %d entries; at most %d", len(fs), MaxHostFunctions)}
	}
	seen := make(map[[2]string]int, len(fs))
	for i, f := range fs {
		field := HostFunctionsField + "[" + strconv.Itoa(i) + "]"
		for _, n := range [2]struct{ name, v string }{{".module", f.Module}, {".name", f.Name}} {
			switch {
			case n.v == "":
				return &GrantError{field + n.name, "must not be empty"}
			case len(n.v) > MaxHostNameBytes:
				return &GrantError{field + n.name, fmt.Sprintf("is %d bytes long; at most %d", len(n.v), MaxHostNameBytes)}
			}
			if err := cString(field+n.name, n.v); err != nil {
				return err
			}
		}
		if why, reserved := reservedHostModules[f.Module]; reserved {
			return &GrantError{field + ".module", fmt.Sprintf("%s is %s; serve yours under another module", Quote(f.Module), why)}
		}
		for _, vs := range [2]struct {
			name  string
			types []string
		}{{".params", f.Params}, {".results", f.Results}} {
			if len(vs.types) > MaxHostFunctionValues {
				return &GrantError{field + vs.name, fmt.Sprintf("has %d entries; at most %d", len(vs.types), MaxHostFunctionValues)}
			}
			for j, t := range vs.types {
				switch ValType(t) {
				case I32, I64, F32, F64, TypeBytes:
				default:
					return &GrantError{field + vs.name + "[" + strconv.Itoa(j) + "]",
						fmt.Sprintf("unknown type %s (i32, i64, f32, f64, bytes)", Quote(t))}
				}
			}
		}
		key := [2]string{f.Module, f.Name}
		if other, dup := seen[key]; dup {
			return &GrantError{field, fmt.Sprintf("%s is declared twice (also %s[%d])", Quote(f.String()), HostFunctionsField, other)}
		}
		seen[key] = i
	}
	return nil
}

// HostValue is an argument or a result of a host call: a wasm value, or,
// when Type is TypeBytes, Bytes (Bits unused).
type HostValue struct {
	Value
	Bytes []byte
}

// HostCall is one call of a host function served by the parent.
type HostCall struct {
	Module, Name string
	Args         []HostValue
}

// HostCaller serves a run's (an instantiation's, a call's) host calls: it
// asks the parent and waits for the answer, or until ctx is done (the
// run's deadline or cancellation), returning ctx.Err() then. A
// *HostCallError is the parent's own error answer; any other error is
// the sidecar's (the answer could not be asked or read).
type HostCaller func(ctx context.Context, call HostCall) ([]HostValue, error)

// HostCallError is the parent's error answer to a host call: the run ends
// with kind host_function_error, carrying it.
type HostCallError struct {
	Code    int64
	Message string
}

func (e *HostCallError) Error() string { return e.Message }
