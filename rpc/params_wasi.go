package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/sandboxd/sandboxd/protocol"
)

// decodeWASI reads capabilities.wasi: true (the zero grant), false or null
// (none), or an object with any of args, env, stdin, files, dirs (a null
// value is as if absent; docs/protocol.md). Every problem names its field.
func decodeWASI(raw json.RawMessage) (*protocol.WASI, error) {
	raw = bytes.TrimSpace(raw)
	switch string(raw) {
	case "true":
		return &protocol.WASI{}, nil
	case "false", "null":
		return nil, nil
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, paramErr(wasiField, "must be true or an object, got %s", kindOfJSON(raw))
	}
	var m members
	if err := wasiShape.read(raw, &m); err != nil {
		return nil, err
	}
	// The counts are bounded before anything is decoded: 60 MB of empty
	// args decoded first took 3 GiB to be refused.
	for _, b := range []struct {
		i     int
		name  string
		limit int
	}{{wasiArgs, "args", protocol.MaxWASIArgs}, {wasiEnv, "env", protocol.MaxWASIEnv},
		{wasiFiles, "files", protocol.MaxWASIFiles}, {wasiDirs, "dirs", protocol.MaxWASIDirs}} {
		if v := bytes.TrimSpace(m.values[b.i]); v != nil {
			if _, ok := countElements(v, b.limit); !ok {
				return nil, paramErr(wasiField+"."+b.name, "has more than %d entries", b.limit)
			}
		}
	}
	w := &protocol.WASI{}
	if v := m.values[wasiArgs]; v != nil {
		items, err := elements(v, wasiField+".args")
		if err != nil {
			return nil, err
		}
		for i, it := range items {
			s, err := stringField(it, wasiField+".args["+strconv.Itoa(i)+"]")
			if err != nil {
				return nil, err
			}
			w.Args = append(w.Args, s)
		}
	}
	if v := m.values[wasiEnv]; v != nil {
		es, err := entries(v, wasiField+".env")
		if err != nil {
			return nil, err
		}
		w.Env = make(map[string]string, len(es))
		for _, e := range es {
			if w.Env[e.key], err = stringField(e.value, wasiField+".env."+protocol.Escape(e.key)); err != nil {
				return nil, err
			}
		}
	}
	if v := m.values[wasiStdin]; v != nil {
		b, err := bytesField(v, wasiField+".stdin")
		if err != nil {
			return nil, err
		}
		w.Stdin = b
	}
	if v := m.values[wasiFiles]; v != nil {
		es, err := entries(v, wasiField+".files")
		if err != nil {
			return nil, err
		}
		w.Files = make(map[string][]byte, len(es))
		for _, e := range es {
			if w.Files[e.key], err = bytesField(e.value, wasiField+".files["+protocol.Quote(e.key)+"]"); err != nil {
				return nil, err
			}
		}
	}
	if v := m.values[wasiDirs]; v != nil {
		items, err := elements(v, wasiField+".dirs")
		if err != nil {
			return nil, err
		}
		for i, it := range items {
			dir, err := decodeDir(it, wasiField+".dirs["+strconv.Itoa(i)+"]")
			if err != nil {
				return nil, err
			}
			w.Dirs = append(w.Dirs, dir)
		}
	}
	// What would fail inside wasmtime's configuration (a NUL, a path no
	// file system holds) is the parent's mistake: refused here, naming the
	// field, before the run is queued or its module compiled.
	var ge *protocol.GrantError
	if err := w.Check(); errors.As(err, &ge) {
		return nil, &ParamError{Field: ge.Field, Problem: ge.Problem}
	}
	return w, nil
}

// decodeDir reads one of capabilities.wasi.dirs, whose field path is field.
func decodeDir(raw json.RawMessage, field string) (protocol.Dir, error) {
	var dir protocol.Dir
	var m members
	if err := dirShape.readAt(raw, field, &m); err != nil {
		return dir, err
	}
	for _, i := range []int{dirHost, dirGuest} {
		name := field + "." + dirShape.names[i]
		v := m.values[i]
		if v == nil {
			return dir, paramErr(name, "required (a string)")
		}
		s, err := stringField(v, name)
		if err != nil {
			return dir, err
		}
		if i == dirHost {
			dir.Host = s
		} else {
			dir.Guest = s
		}
	}
	if v := m.values[dirWritable]; v != nil {
		var err error
		if dir.Writable, err = boolField(v, field+".writable"); err != nil {
			return dir, err
		}
	}
	return dir, nil
}
