package sandbox

import (
	"fmt"
	"sort"
	"strings"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/sandbox/internal/wasmbin"
)

// WASIModule is the import module of WASI preview1.
const WASIModule = "wasi_snapshot_preview1"

// wasiFuncs is every preview1 function a granted guest may import, with its
// core signature. It is the list docs/protocol.md documents;
// wasi_imports_internal_test.go checks each entry links against wasmtime's
// own implementation with exactly this signature.
var wasiFuncs = map[string]string{
	"args_get":                "(i32, i32) -> (i32)",
	"args_sizes_get":          "(i32, i32) -> (i32)",
	"environ_get":             "(i32, i32) -> (i32)",
	"environ_sizes_get":       "(i32, i32) -> (i32)",
	"clock_res_get":           "(i32, i32) -> (i32)",
	"clock_time_get":          "(i32, i64, i32) -> (i32)",
	"fd_advise":               "(i32, i64, i64, i32) -> (i32)",
	"fd_allocate":             "(i32, i64, i64) -> (i32)",
	"fd_close":                "(i32) -> (i32)",
	"fd_datasync":             "(i32) -> (i32)",
	"fd_fdstat_get":           "(i32, i32) -> (i32)",
	"fd_fdstat_set_flags":     "(i32, i32) -> (i32)",
	"fd_fdstat_set_rights":    "(i32, i64, i64) -> (i32)",
	"fd_filestat_get":         "(i32, i32) -> (i32)",
	"fd_filestat_set_size":    "(i32, i64) -> (i32)",
	"fd_filestat_set_times":   "(i32, i64, i64, i32) -> (i32)",
	"fd_pread":                "(i32, i32, i32, i64, i32) -> (i32)",
	"fd_prestat_get":          "(i32, i32) -> (i32)",
	"fd_prestat_dir_name":     "(i32, i32, i32) -> (i32)",
	"fd_pwrite":               "(i32, i32, i32, i64, i32) -> (i32)",
	"fd_read":                 "(i32, i32, i32, i32) -> (i32)",
	"fd_readdir":              "(i32, i32, i32, i64, i32) -> (i32)",
	"fd_renumber":             "(i32, i32) -> (i32)",
	"fd_seek":                 "(i32, i64, i32, i32) -> (i32)",
	"fd_sync":                 "(i32) -> (i32)",
	"fd_tell":                 "(i32, i32) -> (i32)",
	"fd_write":                "(i32, i32, i32, i32) -> (i32)",
	"path_create_directory":   "(i32, i32, i32) -> (i32)",
	"path_filestat_get":       "(i32, i32, i32, i32, i32) -> (i32)",
	"path_filestat_set_times": "(i32, i32, i32, i32, i64, i64, i32) -> (i32)",
	"path_link":               "(i32, i32, i32, i32, i32, i32, i32) -> (i32)",
	"path_open":               "(i32, i32, i32, i32, i32, i64, i64, i32, i32) -> (i32)",
	"path_readlink":           "(i32, i32, i32, i32, i32, i32) -> (i32)",
	"path_remove_directory":   "(i32, i32, i32) -> (i32)",
	"path_rename":             "(i32, i32, i32, i32, i32, i32) -> (i32)",
	"path_symlink":            "(i32, i32, i32, i32, i32) -> (i32)",
	"path_unlink_file":        "(i32, i32, i32) -> (i32)",
	"poll_oneoff":             "(i32, i32, i32, i32) -> (i32)",
	"proc_exit":               "(i32) -> ()",
	"proc_raise":              "(i32) -> (i32)",
	"sched_yield":             "() -> (i32)",
	"random_get":              "(i32, i32) -> (i32)",
	"sock_accept":             "(i32, i32, i32) -> (i32)",
	"sock_recv":               "(i32, i32, i32, i32, i32, i32) -> (i32)",
	"sock_send":               "(i32, i32, i32, i32, i32) -> (i32)",
	"sock_shutdown":           "(i32, i32) -> (i32)",
}

// WASIFunctions lists the preview1 functions a granted guest may import,
// sorted.
func WASIFunctions() []string {
	names := make([]string, 0, len(wasiFuncs))
	for n := range wasiFuncs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// wasiFuncType is the wasmtime type of a preview1 function, safe to share
// among runs.
func wasiFuncType(name string) (*wasmtime.FuncType, error) {
	sig, ok := wasiFuncs[name]
	if !ok {
		return nil, fmt.Errorf("%s is not a preview1 function", name)
	}
	return signatureType(sig), nil
}

// watSignature turns "(i32, i64) -> (i32)" into "(param i32 i64)" and
// "(result i32)".
func watSignature(sig string) (params, results string) {
	in, out, _ := strings.Cut(sig, " -> ")
	list := func(s, kw string) string {
		s = strings.ReplaceAll(strings.Trim(s, "()"), ",", "")
		if s == "" {
			return ""
		}
		return "(" + kw + " " + s + ")"
	}
	return list(in, "param"), list(out, "result")
}

// CheckWASIGrant refuses, before any compilation, a module that imports
// WASI when caps does not grant it: the error is the same disallowed_import
// Run would return, naming every WASI function imported. It reads only the
// import section (a Go guest takes seconds to compile; this takes
// microseconds). Any other problem with the bytes is left to Compile: a
// module this cannot read is not refused here.
func (e *Engine) CheckWASIGrant(src Source, caps Capabilities) error {
	if caps.WASI != nil {
		return nil
	}
	if src.ID != "" {
		if m, ok := e.cache.peek(src.ID); ok {
			if err := checkWASIImports(m, caps, nil); err != nil {
				return err
			}
		}
		return nil
	}
	mod, err := e.loadBytes(src)
	if err != nil {
		return nil // Compile reports it
	}
	names, _ := wasmbin.ImportNames(mod.peekWasm(), WASIModule)
	if len(names) > 0 {
		return wasiRefusal(names)
	}
	return nil
}
