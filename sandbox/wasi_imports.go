package sandbox

import (
	"errors"
	"fmt"
	"sort"
)

// WASIModule is the import module of WASI preview1.
const WASIModule = "wasi_snapshot_preview1"

// wasiFuncs is every preview1 function a granted guest may import, with its
// core signature. It is the list docs/protocol.md documents; wasi_test.go
// checks each entry links against wasmtime's own implementation with exactly
// this signature.
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
	names, _ := importNames(mod.peekWasm(), WASIModule)
	if len(names) > 0 {
		return wasiRefusal(names)
	}
	return nil
}

var errShortModule = errors.New("module ends early")

// importNames returns the names of the imports of wasm from module, in
// order, reading only up to the import section. It stops at the first
// thing it cannot decode and returns what it found.
func importNames(wasm []byte, module string) ([]string, error) {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" {
		return nil, errors.New("not a wasm binary")
	}
	r := byteReader{b: wasm[8:]}
	for !r.done() {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		size, err := r.u32()
		if err != nil {
			return nil, err
		}
		body, err := r.bytes(int(size))
		if err != nil {
			return nil, err
		}
		if id == 2 {
			return importSection(byteReader{b: body}, module)
		}
		if id > 2 { // sections are ordered: past where imports would be
			return nil, nil
		}
	}
	return nil, nil
}

func importSection(r byteReader, module string) ([]string, error) {
	var names []string
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	for i := uint32(0); i < n; i++ {
		mod, err := r.name()
		if err != nil {
			return names, err
		}
		field, err := r.name()
		if err != nil {
			return names, err
		}
		if mod == module {
			names = append(names, field)
		}
		kind, err := r.byte()
		if err != nil {
			return names, err
		}
		switch kind {
		case 0x00: // func: type index
			_, err = r.u32()
		case 0x01: // table: reftype, limits
			if _, err = r.byte(); err == nil {
				err = r.limits()
			}
		case 0x02: // memory: limits
			err = r.limits()
		case 0x03: // global: valtype, mutability
			if _, err = r.byte(); err == nil {
				_, err = r.byte()
			}
		case 0x04: // tag: attribute, type index
			if _, err = r.byte(); err == nil {
				_, err = r.u32()
			}
		default:
			return names, fmt.Errorf("import kind %#x", kind)
		}
		if err != nil {
			return names, err
		}
	}
	return names, nil
}

// byteReader decodes the few wasm encodings importNames needs.
type byteReader struct {
	b []byte
	i int
}

func (r *byteReader) done() bool { return r.i >= len(r.b) }

func (r *byteReader) byte() (byte, error) {
	if r.i >= len(r.b) {
		return 0, errShortModule
	}
	r.i++
	return r.b[r.i-1], nil
}

func (r *byteReader) bytes(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.i {
		return nil, errShortModule
	}
	r.i += n
	return r.b[r.i-n : r.i], nil
}

func (r *byteReader) u64() (uint64, error) {
	var v uint64
	for shift := 0; shift < 70; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, errors.New("LEB128 too long")
}

func (r *byteReader) u32() (uint32, error) {
	v, err := r.u64()
	if err == nil && v > 1<<32-1 {
		err = errors.New("u32 out of range")
	}
	return uint32(v), err
}

func (r *byteReader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	b, err := r.bytes(int(n))
	return string(b), err
}

func (r *byteReader) limits() error {
	flags, err := r.byte()
	if err != nil {
		return err
	}
	if _, err := r.u64(); err != nil {
		return err
	}
	if flags&1 != 0 {
		_, err = r.u64()
	}
	return err
}
