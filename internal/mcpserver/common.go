package mcpserver

import (
	"encoding/base64"
	"path/filepath"
	"strings"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// The arguments every tool shares: the module and the limits.

// limitsAndSource reads what every tool reads first: the call's limits
// (and a plugin's varBytes, if wanted), then its module under them.
func (s *Server) limitsAndSource(args *object, varBytes *uint64) (limits.Limits, protocol.Source, error) {
	l, err := s.limits(args, varBytes)
	if err != nil {
		return l, protocol.Source{}, err
	}
	src, err := s.source(args, l)
	return l, src, err
}

// moduleFields are the ways to give a module; exactly one is used.
var moduleFields = []string{"wat", "base64", "path"}

// source reads the module argument. A path must be absolute and is read
// only if the operator allowed a directory (the engine checks the opened
// file is inside one); base64 is a binary module (or its text).
func (s *Server) source(args *object, l limits.Limits) (protocol.Source, error) {
	src := protocol.Source{CompileTimeout: l.CompileTimeout, CompileMemoryBytes: l.CompileMemoryBytes}
	if !args.has("module") {
		return src, inputErr("module", "is required: {\"wat\": text}, {\"base64\": wasm} or {\"path\": file}")
	}
	m, err := readObject("module", args.members["module"], moduleFields)
	if err != nil {
		return src, err
	}
	given := 0
	for _, f := range moduleFields {
		if m.has(f) {
			given++
		}
	}
	if given != 1 {
		return src, inputErr("module", "must have exactly one of wat, base64 and path, got %d", given)
	}
	var b64 string
	for _, e := range []error{m.string("wat", &src.WAT), m.string("base64", &b64), m.string("path", &src.Path)} {
		if e != nil {
			return src, e
		}
	}
	switch {
	case m.has("base64"):
		if src.Wasm, err = base64.StdEncoding.DecodeString(b64); err != nil {
			return src, inputErr("module.base64", "is not base64 (standard alphabet, padded): %v", err)
		}
	case m.has("path"):
		if len(s.opts.ModuleDirs) == 0 {
			return src, inputErr("module.path", "reading modules from files is off: the operator allowed no directory (sandboxd mcp --allow-path-dir DIR)")
		}
		if !filepath.IsAbs(src.Path) || strings.ContainsRune(src.Path, 0) || len(src.Path) > protocol.MaxWASIPathBytes {
			return src, inputErr("module.path", "must be an absolute file path of at most %d bytes, inside %s", protocol.MaxWASIPathBytes, strings.Join(s.opts.ModuleDirs, " or "))
		}
		if !s.namesModuleDir(src.Path) {
			return src, inputErr("module.path", "is outside the directories the operator allowed: %s", strings.Join(s.opts.ModuleDirs, ", "))
		}
	case src.WAT == "":
		return src, inputErr("module.wat", "must not be empty")
	}
	return src, nil
}

// namesModuleDir says whether path, cleaned, is inside an allowed
// module directory as the operator wrote it or with its symlinks
// resolved. It is checked here, by name, so that a path elsewhere ("..",
// /etc/passwd) is the caller's invalid_params naming module.path and is
// never opened; the engine checks the file it opens against the same
// directories (a symlink inside one that leads out is refused there).
func (s *Server) namesModuleDir(path string) bool {
	path = filepath.Clean(path)
	for _, d := range s.moduleDirs {
		if path == d || strings.HasPrefix(path, d+string(filepath.Separator)) || d == string(filepath.Separator) {
			return true
		}
	}
	return false
}

// limitFields are the names of the limits a call may give.
func limitFields(extra ...string) []string {
	var names []string
	for _, f := range limits.Fields() {
		names = append(names, f.Name)
	}
	return append(names, extra...)
}

// limits reads the limits argument: each given limit replaces the
// operator's default, and may not pass the operator's maximum. varBytes,
// if wanted (plugins), is read into varBytes.
func (s *Server) limits(args *object, varBytes *uint64) (limits.Limits, error) {
	if varBytes != nil {
		*varBytes = s.opts.DefaultVarBytes
		return s.readLimits(args, s.opts.Defaults, limitFields("varBytes"), varBytes)
	}
	return s.readLimits(args, s.opts.Defaults, limitFields(), nil)
}

// readLimits reads the limits argument, whose members may be names (of
// limits.Fields(), and "varBytes" read into varBytes): each given limit
// replaces base's, and may not pass the operator's maximum.
func (s *Server) readLimits(args *object, base limits.Limits, names []string, varBytes *uint64) (limits.Limits, error) {
	l := base
	if !args.has("limits") {
		return l, nil
	}
	o, err := readObject("limits", args.members["limits"], names)
	if err != nil {
		return l, err
	}
	read := func(name string, most uint64, set func(uint64)) error {
		if !o.has(name) {
			return nil
		}
		var v uint64
		if err := o.uint(name, &v); err != nil {
			return err
		}
		switch {
		case v == 0:
			return inputErr(o.field(name), "must be > 0")
		case v > most:
			return inputErr(o.field(name), "asks for %d, more than the operator's maximum of %d: ask for %d or less", v, most, most)
		}
		set(v)
		return nil
	}
	for _, f := range limits.Fields() {
		if err := read(f.Name, f.Get(s.opts.Maximums), func(v uint64) { f.Set(&l, v) }); err != nil {
			return l, err
		}
	}
	if varBytes != nil {
		if err := read("varBytes", s.opts.MaxVarBytes, func(v uint64) { *varBytes = v }); err != nil {
			return l, err
		}
	}
	return l, nil
}
