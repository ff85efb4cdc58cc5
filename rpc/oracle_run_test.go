package rpc

// The oracle (oracle_test.go) for run params: docs/protocol.md's `run`,
// *Values*, *WASI programs* and *Instances and plugins* (a plugin run's
// input and config).

import (
	"encoding/base64"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// oracleDecodeRun reads run params by docs/protocol.md: *Messages*,
// `run`, *Values*, *WASI programs*, *Instances and plugins* (a plugin
// run's input and config).
func oracleDecodeRun(data []byte, defaults, max limits.Limits) (spec *runSpec, args []string, faults []string) {
	v, err := readPlain(data)
	if err != nil {
		panic(fmt.Sprintf("%q is valid JSON, yet: %v", data, err))
	}
	o := &oracle{}
	spec = &runSpec{function: "run", defaultFunction: true, limits: defaults}
	params, ok := o.object(v, "params", "module", "function", "args", "limits", "capabilities", "input", "config", "hostFunctions", "hostCall")
	if !ok {
		return nil, nil, o.faults
	}
	if m, ok := params.get("module"); !ok {
		o.fault("module")
	} else {
		spec.source = o.module(m)
	}
	if f, ok := params.get("function"); ok {
		spec.defaultFunction = false
		if spec.function = o.str(f, "function"); spec.function == "" {
			o.fault("function")
		}
	}
	if a, ok := params.get("args"); ok && a != nil {
		list, ok := a.([]any)
		if !ok || len(list) > 1000 { // a wasm function takes at most 1,000 parameters
			o.fault("args")
		}
		for _, e := range list {
			args = append(args, canonical(e))
		}
	}
	if l, ok := params.get("limits"); ok {
		spec.limits = o.limits(l, defaults, max)
	}
	spec.source.CompileTimeout, spec.source.CompileMemoryBytes = spec.limits.CompileTimeout, spec.limits.CompileMemoryBytes
	if c, ok := params.get("capabilities"); ok && c != nil {
		spec.caps = o.capabilities(c)
	}
	if in, ok := params.get("input"); ok {
		if spec.input = o.bytesValue(in, "input"); spec.input == nil {
			spec.input = []byte{}
		}
	}
	if c, ok := params.get("config"); ok {
		spec.config = o.config(c)
	}
	spec.hostFunctions, spec.hostCall = o.host(params)
	if len(o.faults) > 0 {
		return nil, nil, o.faults
	}
	return spec, args, nil
}

// module: exactly one of {"wat"}, {"wasm": base64}, {"id": "sha256:" and
// 64 lowercase hex digits}, {"path"} of at most 4096 bytes, a non-empty
// string. (Whether an id names a compiled module is
// the run's outcome, error 6, not a params problem.)
func (o *oracle) module(v any) protocol.Source {
	var src protocol.Source
	obj, ok := o.object(v, "module", "wat", "wasm", "id", "path")
	if !ok {
		return src
	}
	if len(obj.names()) != 1 {
		o.fault("module")
		return src
	}
	name := obj.names()[0]
	field := "module." + name
	val, _ := obj.get(name)
	s := o.str(val, field)
	if _, isString := val.(string); isString && s == "" {
		o.fault(field)
	}
	switch name {
	case "wat":
		src.WAT = s
	case "path":
		if len(s) > 4096 {
			o.fault(field)
		}
		src.Path = s
	case "id":
		if !moduleIDShape.MatchString(s) {
			o.fault(field)
		}
		src.ID = s
	case "wasm":
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			o.fault(field)
		}
		src.Wasm = b
	}
	return src
}

var moduleIDShape = regexp.MustCompile(`\Asha256:[0-9a-f]{64}\z`)

// limits: an object of the limits' names; each value an integer in
// 1..the sidecar's maximum, overlaid on the defaults.
// With extra, the object may have those members too (the caller's).
func (o *oracle) limits(v any, defaults, max limits.Limits, extra ...string) limits.Limits {
	l := defaults
	names := make([]string, len(limits.Fields()))
	for i, f := range limits.Fields() {
		names[i] = f.Name
	}
	obj, ok := o.object(v, "limits", append(names, extra...)...)
	if !ok {
		return l
	}
	for _, f := range limits.Fields() {
		val, ok := obj.get(f.Name)
		if !ok {
			continue
		}
		field := "limits." + f.Name
		n := o.integer(val, field, false)
		if n == 0 || n > f.Get(max) {
			o.fault(field)
			continue
		}
		f.Set(&l, n)
	}
	return l
}

func (o *oracle) capabilities(v any) protocol.Capabilities {
	var caps protocol.Capabilities
	obj, ok := o.object(v, "capabilities", "log", "random", "clock", "wasi")
	if !ok {
		return caps
	}
	if b, ok := obj.get("log"); ok {
		caps.Log = o.boolean(b, "capabilities.log")
	}
	if b, ok := obj.get("clock"); ok {
		caps.Clock = o.boolean(b, "capabilities.clock")
	}
	if r, ok := obj.get("random"); ok {
		if random, ok := o.object(r, "capabilities.random", "seed"); ok {
			if seed, ok := random.get("seed"); !ok {
				o.fault("capabilities.random.seed")
			} else {
				caps.Random, caps.Seed = true, o.integer(seed, "capabilities.random.seed", true)
			}
		}
	}
	if w, ok := obj.get("wasi"); ok {
		caps.WASI = o.wasi(w)
	}
	return caps
}

// wasi: true (the zero grant), false or null (none), or an object of
// args, env, stdin, files, dirs (a null member as if absent), whose
// values pass the grant's checks (*WASI programs*; docs/wasi.md).
func (o *oracle) wasi(v any) *protocol.WASI {
	const field = "capabilities.wasi"
	switch v {
	case true:
		return &protocol.WASI{}
	case false, nil:
		return nil
	}
	obj, ok := o.object(v, field, "args", "env", "stdin", "files", "dirs")
	if !ok {
		return nil
	}
	get := func(name string) (any, bool) {
		val, ok := obj.get(name)
		return val, ok && val != nil
	}
	w := &protocol.WASI{}
	if a, ok := get("args"); ok {
		list, ok := a.([]any)
		if !ok {
			o.fault(field + ".args")
		}
		for i, e := range list {
			f := fmt.Sprintf("%s.args[%d]", field, i)
			s := o.str(e, f)
			if strings.Contains(s, "\x00") {
				o.fault(f)
			}
			w.Args = append(w.Args, s)
		}
	}
	if e, ok := get("env"); ok {
		if env, ok := e.(plainObject); !ok {
			o.fault(field + ".env")
		} else {
			w.Env = map[string]string{}
			for _, k := range env.names() {
				val, _ := env.get(k)
				w.Env[k] = o.str(val, field+".env."+shown(k))
				if k == "" || strings.Contains(k, "=") {
					o.fault(field + ".env")
				}
				if strings.Contains(k+w.Env[k], "\x00") {
					o.fault(field + ".env." + shown(k))
				}
			}
		}
	}
	if s, ok := get("stdin"); ok {
		w.Stdin = o.bytesValue(s, field+".stdin")
	}
	guests := map[string]bool{}
	if d, ok := get("dirs"); ok {
		list, ok := d.([]any)
		if !ok {
			o.fault(field + ".dirs")
		}
		for i, e := range list {
			f := fmt.Sprintf("%s.dirs[%d]", field, i)
			dir, ok := o.object(e, f, "host", "guest", "writable")
			if !ok {
				continue
			}
			var pd protocol.Dir
			for _, key := range []string{"host", "guest"} {
				val, ok := dir.get(key)
				if !ok {
					o.fault(f + "." + key)
				}
				s := o.str(val, f+"."+key)
				if s == "" || strings.Contains(s, "\x00") {
					o.fault(f + "." + key)
				}
				if key == "host" {
					pd.Host = s
				} else {
					pd.Guest = s
				}
			}
			if guests[pd.Guest] {
				o.fault(f + ".guest")
			}
			guests[pd.Guest] = true
			if val, ok := dir.get("writable"); ok {
				pd.Writable = o.boolean(val, f+".writable")
			}
			w.Dirs = append(w.Dirs, pd)
		}
	}
	if fs, ok := get("files"); ok {
		files, ok := fs.(plainObject)
		if !ok {
			o.fault(field + ".files")
			return w
		}
		w.Files = map[string][]byte{}
		if len(files) > 0 && guests["/"] {
			o.fault(field + ".files")
		}
		for _, p := range files.names() {
			f := field + ".files[" + strconv.Quote(p) + "]"
			val, _ := files.get(p)
			w.Files[p] = o.bytesValue(val, f)
			badName := false
			for _, name := range strings.Split(p, "/")[1:] {
				badName = badName || len(name) > 255
			}
			if !strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "/" || len(p) > 4096 || badName || strings.Contains(p, "\x00") {
				o.fault(f)
			}
			for _, q := range files.names() {
				if strings.HasPrefix(q, p+"/") { // a file cannot hold another
					o.fault(f)
				}
			}
			for g := range guests {
				if g != "/" && (p == g || strings.HasPrefix(p, strings.TrimSuffix(g, "/")+"/")) { // hidden by the preopen
					o.fault(f)
				}
			}
		}
	}
	return w
}

// config: an object of strings, at most 4,096 members (counted as
// written), or null (none).
func (o *oracle) config(v any) map[string]string {
	out := map[string]string{}
	switch v := v.(type) {
	case nil:
		return out
	case plainObject:
		if len(v) > 4096 {
			o.fault("config")
		}
		for _, k := range v.names() {
			val, _ := v.get(k)
			out[k] = o.str(val, "config."+shown(k))
		}
	case []any:
		o.fault("config")
	default:
		o.fault("config")
	}
	return out
}

// bytesValue: a string (its UTF-8 bytes), {"text": string} or
// {"base64": string}, exactly one member.
func (o *oracle) bytesValue(v any, field string) []byte {
	if s, ok := v.(string); ok {
		return []byte(s)
	}
	obj, ok := v.(plainObject)
	if !ok || len(obj.names()) != 1 {
		o.fault(field)
		return nil
	}
	name := obj.names()[0]
	s, ok := obj[len(obj)-1].value.(string)
	switch {
	case !ok:
	case name == "text":
		return []byte(s)
	case name == "base64":
		if b, err := base64.StdEncoding.DecodeString(s); err == nil {
			return b
		}
	}
	o.fault(field)
	return nil
}

// host reads hostFunctions and hostCall (*Host functions served by the
// parent*): at most 1,024 declarations {module, name, params, results},
// module and name non-empty strings of at most 1,024 bytes without NUL,
// the module not one of sandboxd's own, params and results (absent or
// null: none) at most 1,000 types of i32, i64, f32, f64, bytes, no
// module and name declared twice; hostCall "sbx-" and digits' worth of
// a string (at most 24 bytes).
func (o *oracle) host(params plainObject) ([]protocol.HostFunction, string) {
	const field = "hostFunctions"
	var fns []protocol.HostFunction
	if v, ok := params.get(field); ok {
		list, ok := v.([]any)
		if !ok || len(list) > 1024 {
			o.fault(field)
		}
		seen := map[[2]string]bool{}
		for i, e := range list {
			f := fmt.Sprintf("%s[%d]", field, i)
			decl, ok := o.object(e, f, "module", "name", "params", "results")
			if !ok {
				continue
			}
			fn := protocol.HostFunction{Params: []string{}, Results: []string{}}
			for _, key := range []string{"module", "name"} {
				val, ok := decl.get(key)
				if !ok {
					o.fault(f + "." + key)
				}
				s := o.str(val, f+"."+key)
				if s == "" || len(s) > 1024 || strings.Contains(s, "\x00") {
					o.fault(f + "." + key)
				}
				if key == "module" {
					fn.Module = s
				} else {
					fn.Name = s
				}
			}
			switch fn.Module {
			case "host", "wasi_snapshot_preview1", "extism:host/env":
				o.fault(f + ".module")
			}
			for _, key := range []string{"params", "results"} {
				val, ok := decl.get(key)
				if !ok {
					continue
				}
				types, ok := val.([]any)
				if !ok || len(types) > 1000 {
					o.fault(f + "." + key)
				}
				for j, t := range types {
					s := o.str(t, fmt.Sprintf("%s.%s[%d]", f, key, j))
					switch s {
					case "i32", "i64", "f32", "f64", "bytes":
					default:
						o.fault(fmt.Sprintf("%s.%s[%d]", f, key, j))
					}
					if key == "params" {
						fn.Params = append(fn.Params, s)
					} else {
						fn.Results = append(fn.Results, s)
					}
				}
			}
			if k := [2]string{fn.Module, fn.Name}; seen[k] {
				o.fault(f)
			} else {
				seen[k] = true
			}
			fns = append(fns, fn)
		}
	}
	var from string
	if v, ok := params.get("hostCall"); ok {
		from = o.str(v, "hostCall")
		digits, ok := strings.CutPrefix(from, "sbx-")
		if !ok || digits == "" || strings.Trim(digits, "0123456789") != "" || len(from) > 24 {
			o.fault("hostCall")
		}
	}
	return fns, from
}
