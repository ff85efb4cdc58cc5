package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/sandboxd/sandboxd/protocol"
)

const wasiField = "capabilities.wasi"

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
	obj, err := object(raw, wasiField, "args", "env", "stdin", "files", "dirs")
	if err != nil {
		return nil, err
	}
	for k, v := range obj {
		if string(bytes.TrimSpace(v)) == "null" { // as if absent
			delete(obj, k)
		}
	}
	w := &protocol.WASI{}
	if v, ok := obj["args"]; ok {
		var items []json.RawMessage
		if err := decodeArray(v, wasiField+".args", &items); err != nil {
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
	if v, ok := obj["env"]; ok {
		entries, err := anyObject(v, wasiField+".env")
		if err != nil {
			return nil, err
		}
		w.Env = make(map[string]string, len(entries))
		for k, val := range entries {
			s, err := stringField(val, wasiField+".env."+protocol.Escape(k))
			if err != nil {
				return nil, err
			}
			w.Env[k] = s
		}
	}
	if v, ok := obj["stdin"]; ok {
		b, problem := protocol.DecodeBytes(v)
		if problem != "" {
			return nil, paramErr(wasiField+".stdin", "%s", problem)
		}
		w.Stdin = b
	}
	if v, ok := obj["files"]; ok {
		entries, err := anyObject(v, wasiField+".files")
		if err != nil {
			return nil, err
		}
		w.Files = make(map[string][]byte, len(entries))
		for p, val := range entries {
			b, problem := protocol.DecodeBytes(val)
			if problem != "" {
				return nil, paramErr(wasiField+".files["+strconv.Quote(p)+"]", "%s", problem)
			}
			w.Files[p] = b
		}
	}
	if v, ok := obj["dirs"]; ok {
		var items []json.RawMessage
		if err := decodeArray(v, wasiField+".dirs", &items); err != nil {
			return nil, err
		}
		for i, it := range items {
			field := wasiField + ".dirs[" + strconv.Itoa(i) + "]"
			d, err := object(it, field, "host", "guest", "writable")
			if err != nil {
				return nil, err
			}
			var dir protocol.Dir
			for _, key := range []string{"host", "guest"} {
				val, ok := d[key]
				if !ok {
					return nil, paramErr(field+"."+key, "required (a string)")
				}
				s, err := stringField(val, field+"."+key)
				if err != nil {
					return nil, err
				}
				if key == "host" {
					dir.Host = s
				} else {
					dir.Guest = s
				}
			}
			if val, ok := d["writable"]; ok {
				if dir.Writable, err = boolField(val, field+".writable"); err != nil {
					return nil, err
				}
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

func decodeArray(raw json.RawMessage, field string, out *[]json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return paramErr(field, "must be an array, got %s", kindOfJSON(raw))
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return paramErr(field, "must be an array: %v", err)
	}
	return nil
}

// anyObject decodes a JSON object with arbitrary keys.
func anyObject(raw json.RawMessage, field string) (map[string]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, paramErr(field, "must be an object, got %s", kindOfJSON(raw))
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, paramErr(field, "must be an object: %v", err)
	}
	return obj, nil
}
