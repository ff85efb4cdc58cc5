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

// Check returns the first problem of the grant that needs no file system
// (a *GrantError), or nil. What needs one (a directory's host path is an
// allowed, existing directory) is the engine's to check. The sidecar
// checks at params decode, the engine again before every run, so a grant
// that reaches wasmtime's configuration cannot fail there for a reason of
// the parent's making.
func (w *WASI) Check() error {
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
			return &GrantError{WASIField + ".env", fmt.Sprintf("name %q must be non-empty and contain no '='", k)}
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
		if err := cString(field+".guest", d.Guest); err != nil {
			return err
		}
		if other, dup := guests[d.Guest]; dup {
			return &GrantError{field + ".guest", fmt.Sprintf("%q is already preopened by %s", d.Guest, other)}
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
	for i, p := range paths {
		field := WASIField + ".files[" + strconv.Quote(p) + "]"
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
		if i+1 < len(paths) && strings.HasPrefix(paths[i+1], p+"/") {
			return &GrantError{field, fmt.Sprintf("is a file, so %q cannot be under it", paths[i+1])}
		}
		for g, other := range guests {
			if g != "/" && (p == g || strings.HasPrefix(p, strings.TrimSuffix(g, "/")+"/")) {
				return &GrantError{field, "lies under " + other + " (guest " + strconv.Quote(g) + "), which would hide it"}
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
