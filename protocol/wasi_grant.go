package protocol

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// GrantError is a WASI grant refused before anything runs: a malformed
// argument, environment entry or path, or a directory the operator did not
// allow. Field is the offending field's wire path (e.g.
// "capabilities.wasi.dirs[0].host"). The sidecar answers it as invalid
// params (-32602): it is the parent's mistake, never the sidecar's.
type GrantError struct {
	Field   string
	Problem string
}

func (e *GrantError) Error() string { return e.Field + ": " + e.Problem }

// WASIField is the wire path of the WASI grant.
const WASIField = "capabilities.wasi"

// Bounds on a path of the files grant. A guest's path functions refuse
// paths longer than MaxWASIPathBytes (ENAMETOOLONG), so a longer file could
// never be opened; a name longer than MaxWASINameBytes cannot exist on the
// host's file systems (NAME_MAX), where the files are laid out.
const (
	MaxWASIPathBytes = 4096
	MaxWASINameBytes = 255
)

// Bounds on the counts of a grant: what a store keeps for its life costs
// host memory per entry besides the bytes (wasmtime's own copies), so the
// counts are bounded and every entry is charged in HostBytes.
const (
	MaxWASIArgs  = 65536
	MaxWASIEnv   = 4096
	MaxWASIFiles = 65536
	MaxWASIDirs  = 64
)

// What HostBytes charges besides the bytes themselves.
const (
	// WASIEntryBytes is charged per argument and environment entry:
	// wasmtime keeps each as a string of its own (measured: 35 bytes per
	// empty argument, 184 per short environment entry).
	WASIEntryBytes = 192
	// WASIPageBytes is what one file or directory of the files tree, or
	// one preopen, costs at the least: a page (a file's bytes are rounded
	// up to whole pages, as tmpfs holds them).
	WASIPageBytes = 4096
)

// HostBytes is what a store granted w holds on the host besides the
// guest's own memory, for its whole life: stdin, the arguments and the
// environment (each entry's bytes, its NUL and WASIEntryBytes), the files
// (each rounded up to whole pages, and a page per directory on its path),
// and a page per preopen and its guest path. A store may keep at most its memory cap of it,
// besides the guest's memory (docs/wasi.md). Zero for a nil grant.
func (w *WASI) HostBytes() uint64 {
	if w == nil {
		return 0
	}
	n := uint64(len(w.Stdin)) + uint64(len(w.Argv0)) + 1 + WASIEntryBytes
	for _, a := range w.Args {
		n += uint64(len(a)) + 1 + WASIEntryBytes
	}
	for k, v := range w.Env {
		n += uint64(len(k)+len(v)) + 2 + WASIEntryBytes
	}
	for p, b := range w.Files {
		pages := (uint64(len(b)) + WASIPageBytes - 1) / WASIPageBytes
		n += (max(pages, 1) + uint64(strings.Count(p, "/")) - 1) * WASIPageBytes
	}
	if len(w.Files) > 0 {
		n += WASIPageBytes // the tree's preopen
	}
	for _, d := range w.Dirs {
		n += WASIPageBytes + uint64(len(d.Guest))
	}
	return n
}

// Check returns the first problem of the grant that needs no file system
// (a *GrantError), or nil. What needs one (a directory's host path is an
// allowed, existing directory) is the engine's to check. The sidecar
// checks at params decode, the engine again before every run, so a grant
// that reaches wasmtime's configuration cannot fail there for a reason of
// the parent's making.
func (w *WASI) Check() error {
	switch {
	case len(w.Args) > MaxWASIArgs:
		return &GrantError{WASIField + ".args", fmt.Sprintf("has %d entries; at most %d", len(w.Args), MaxWASIArgs)}
	case len(w.Env) > MaxWASIEnv:
		return &GrantError{WASIField + ".env", fmt.Sprintf("has %d entries; at most %d", len(w.Env), MaxWASIEnv)}
	case len(w.Files) > MaxWASIFiles:
		return &GrantError{WASIField + ".files", fmt.Sprintf("has %d entries; at most %d", len(w.Files), MaxWASIFiles)}
	case len(w.Dirs) > MaxWASIDirs:
		return &GrantError{WASIField + ".dirs", fmt.Sprintf("has %d entries; at most %d", len(w.Dirs), MaxWASIDirs)}
	}
	if w.Argv0 != "" {
		if err := cString(WASIField+".argv0", w.Argv0); err != nil {
			return err
		}
	}
	for i, a := range w.Args {
		if err := cString(WASIField+".args["+strconv.Itoa(i)+"]", a); err != nil {
			return err
		}
	}
	for _, k := range sortedKeys(w.Env) {
		field := WASIField + ".env." + Escape(k) // the parent's name, shown as messages show names
		if k == "" || strings.Contains(k, "=") {
			return &GrantError{WASIField + ".env", fmt.Sprintf("name %s must be non-empty and contain no '='", Quote(k))}
		}
		if err := cString(field, k); err != nil {
			return err
		}
		if err := cString(field, w.Env[k]); err != nil {
			return err
		}
	}
	guests := map[string]string{} // guest preopen path → the field that claims it
	for i, d := range w.Dirs {
		field := WASIField + ".dirs[" + strconv.Itoa(i) + "]"
		if d.Host == "" {
			return &GrantError{field + ".host", "must not be empty"}
		}
		if err := cString(field+".host", d.Host); err != nil {
			return err
		}
		if d.Guest == "" {
			return &GrantError{field + ".guest", "must not be empty"}
		}
		for _, p := range [2]struct{ name, v string }{{".host", d.Host}, {".guest", d.Guest}} {
			if len(p.v) > MaxWASIPathBytes {
				return &GrantError{field + p.name, fmt.Sprintf("is %d bytes long; at most %d", len(p.v), MaxWASIPathBytes)}
			}
		}
		if err := cString(field+".guest", d.Guest); err != nil {
			return err
		}
		if other, dup := guests[d.Guest]; dup {
			return &GrantError{field + ".guest", fmt.Sprintf("%s is already preopened by %s", Quote(d.Guest), other)}
		}
		guests[d.Guest] = field
	}
	if len(w.Files) == 0 {
		return nil
	}
	if other, dup := guests["/"]; dup {
		return &GrantError{WASIField + ".files", "files live in a read-only tree preopened at \"/\", which " + other + " also claims"}
	}
	paths := sortedKeys(w.Files)
	for _, p := range paths {
		field := WASIField + ".files[" + Quote(p) + "]"
		if err := cString(field, p); err != nil {
			return err
		}
		if !strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "/" {
			return &GrantError{field, "must be an absolute, clean file path like \"/data/in.json\""}
		}
		if len(p) > MaxWASIPathBytes {
			return &GrantError{field, fmt.Sprintf("is %d bytes long; at most %d (a guest cannot open a longer path)", len(p), MaxWASIPathBytes)}
		}
		for _, name := range strings.Split(p[1:], "/") {
			if len(name) > MaxWASINameBytes {
				return &GrantError{field, fmt.Sprintf("has a name of %d bytes; at most %d per name", len(name), MaxWASINameBytes)}
			}
		}
		// Nothing can be under a file. The paths under p are contiguous in
		// sorted order but need not follow it ("/a", "/a-b", "/a/c": '-'
		// sorts before '/'), so the first one is searched for.
		if j := sort.SearchStrings(paths, p+"/"); j < len(paths) && strings.HasPrefix(paths[j], p+"/") {
			return &GrantError{field, fmt.Sprintf("is a file, so %s cannot be under it", Quote(paths[j]))}
		}
		for g, other := range guests {
			if g != "/" && (p == g || strings.HasPrefix(p, strings.TrimSuffix(g, "/")+"/")) {
				return &GrantError{field, "lies under " + other + " (guest " + Quote(g) + "), which would hide it"}
			}
		}
	}
	return nil
}

// cString refuses what cannot cross wasmtime's C API: a NUL byte ends a C
// string early, and wasmtime takes arguments, names and guest paths as
// UTF-8 only.
func cString(field, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return &GrantError{field, "must not contain a NUL byte"}
	}
	if !utf8.ValidString(s) {
		return &GrantError{field, "must be valid UTF-8"}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
