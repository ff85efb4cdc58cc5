package rpc

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/internal/jsonscan"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// runSpec is a decoded `run` request, before the module is compiled.
type runSpec struct {
	source   protocol.Source
	function string
	args     []json.RawMessage
	limits   limits.Limits
	caps     protocol.Capabilities
	// A plugin run's: nil input is none given.
	input  []byte
	config map[string]string
	// defaultFunction: function was omitted, so a WASI command's _start
	// is called when the module exports one (compileRun decides).
	defaultFunction bool
	// hostFunctions are the imports the parent serves; hostCall the host
	// call whose handler sent the run ("" if none).
	hostFunctions []protocol.HostFunction
	hostCall      string
}

// decodeRun reads the (screened) params of `run`. A module sent as wat or
// wasm is left encoded (Source.Encoded): the caller looks it up by its
// literal first, and decodes it (decodeEncoded) if that fails. An error
// found after the module names the module's own problem first, if it has
// one, as when the module was decoded before the rest.
func decodeRun(raw json.RawMessage, defaults, max limits.Limits) (*runSpec, error) {
	spec, err := decodeRunMembers(raw, defaults, max)
	if err != nil && spec != nil && spec.source.Encoded != nil {
		if merr := decodeEncoded(&spec.source); merr != nil {
			return nil, merr
		}
	}
	if err != nil {
		return nil, err
	}
	return spec, nil
}

// decodeRunMembers is decodeRun, but on an error found after the module
// it returns the spec so far with the error.
func decodeRunMembers(raw json.RawMessage, defaults, max limits.Limits) (*runSpec, error) {
	var p members
	if err := runShape.read(raw, &p); err != nil {
		return nil, err
	}
	spec := &runSpec{function: "run", defaultFunction: true}
	var err error
	if v := p.values[runInput]; v != nil {
		if spec.input, err = inputField(v); err != nil {
			return nil, err
		}
	}
	if v := p.values[runConfig]; v != nil {
		if spec.config, err = decodeConfig(v); err != nil {
			return nil, err
		}
	}
	m := p.values[runModule]
	if m == nil {
		return nil, errModuleRequired
	}
	if spec.source, err = decodeRunModule(m); err != nil {
		return spec, err
	}
	if v := p.values[runFunction]; v != nil {
		spec.defaultFunction = false
		if spec.function, err = nonEmptyString(v, "function"); err != nil {
			return spec, err
		}
	}
	if v := p.values[runArgs]; v != nil {
		if spec.args, err = argList(v); err != nil {
			return spec, err
		}
	}
	if spec.limits, err = decodeLimits(p.values[runLimits], defaults, max); err != nil {
		return spec, err
	}
	spec.source.CompileTimeout, spec.source.CompileMemoryBytes = spec.limits.CompileTimeout, spec.limits.CompileMemoryBytes
	if spec.caps, err = decodeCapabilities(p.values[runCapabilities]); err != nil {
		return spec, err
	}
	if spec.hostFunctions, spec.hostCall, err = decodeHostMembers(&p, runHostFunctions, runHostCall); err != nil {
		return spec, err
	}
	return spec, nil
}

var errModuleRequired = paramErr("module", "required: one of {wat}, {wasm}, {id}, {path}")

// decodeCompile reads the (screened) params of `compile`. Its limits may
// set only the compile fields: a run limit there would have nothing to
// fence, and is refused naming it (even given null) rather than silently
// ignored.
func decodeCompile(raw json.RawMessage, defaults, max limits.Limits) (protocol.Source, error) {
	var p members
	if err := compileShape.read(raw, &p); err != nil {
		return protocol.Source{}, err
	}
	m := p.values[compileModule]
	if m == nil {
		return protocol.Source{}, errModuleRequired
	}
	src, err := decodeModule(m)
	if err != nil {
		return src, err
	}
	l := defaults
	if v := p.values[compileLimits]; v != nil {
		var lm members
		err := limitsShape.read(v, &lm)
		for i, f := range limitFields {
			if lm.has(i) && !slices.Contains(compileLimitNames, f.Name) {
				return src, paramErr("limits."+f.Name, "does not apply to compile (only %s do)", strings.Join(compileLimitNames, ", "))
			}
		}
		if err != nil {
			return src, err
		}
		if l, err = limitsFrom(&lm, defaults, max); err != nil {
			return src, err
		}
	}
	src.CompileTimeout, src.CompileMemoryBytes = l.CompileTimeout, l.CompileMemoryBytes
	if v := p.values[compilePreinitialize]; v != nil {
		if src.Preinitialize, err = boolField(v, "preinitialize"); err != nil {
			return src, err
		}
	}
	if src.Preinitialize && src.ID != "" { // a compiled module is what it is
		return src, paramErr("preinitialize", "takes the module's bytes (module.wasm or module.path), not module.id")
	}
	return src, nil
}

// readModule reads a module spec, which gives exactly one of wat, wasm,
// id, path: that member's index and value.
func readModule(raw json.RawMessage) (int, json.RawMessage, error) {
	var m members
	if err := moduleShape.read(raw, &m); err != nil {
		return 0, nil, err
	}
	which, n := 0, 0
	for i := range moduleShape.names {
		if m.values[i] != nil {
			which, n = i, n+1
		}
	}
	if n != 1 {
		return 0, nil, paramErr("module", "give exactly one of wat, wasm, id, path (got %d)", n)
	}
	return which, m.values[which], nil
}

// decodeModule reads a module spec, decoded.
func decodeModule(raw json.RawMessage) (protocol.Source, error) {
	which, v, err := readModule(raw)
	if err != nil {
		return protocol.Source{}, err
	}
	return moduleMember(which, v)
}

// decodeRunModule is decodeModule for a run, whose module is looked up
// by how it came on the wire before anything is decoded: wat and wasm are
// left as their JSON literals (Source.Encoded), checked only for being
// non-empty strings. decodeEncoded decodes them, with decodeModule's
// errors, when the literal is not known.
func decodeRunModule(raw json.RawMessage) (protocol.Source, error) {
	which, v, err := readModule(raw)
	if err != nil {
		return protocol.Source{}, err
	}
	if which != moduleWAT && which != moduleWasm {
		return moduleMember(which, v)
	}
	name := moduleShape.names[which]
	v = bytes.TrimSpace(v)
	if len(v) == 0 || v[0] != '"' {
		return protocol.Source{}, paramErr("module."+name, "must be a string, got %s", kindOfJSON(v))
	}
	if len(v) == 2 {
		return protocol.Source{}, paramErr("module."+name, "must not be empty")
	}
	return protocol.Source{Encoded: &protocol.Encoded{Field: name, Literal: v}}, nil
}

// moduleMember decodes the module's one member.
func moduleMember(which int, v json.RawMessage) (protocol.Source, error) {
	var src protocol.Source
	field := "module." + moduleShape.names[which]
	if which == moduleWasm {
		b, err := base64Field(v, field)
		src.Wasm = b
		return src, err
	}
	s, err := nonEmptyString(v, field)
	if err != nil {
		return src, err
	}
	switch which {
	case moduleWAT:
		src.WAT = s
	case moduleID:
		if !protocol.IsModuleID(s) {
			return src, paramErr(field, "must be %s and 64 lowercase hex digits (an id compile returned), got %s", protocol.IDPrefix, protocol.Quote(s))
		}
		src.ID = s
	case modulePath:
		if len(s) > protocol.MaxModulePathBytes {
			return src, paramErr(field, "is %d bytes; a path has at most %d (PATH_MAX), got %s", len(s), protocol.MaxModulePathBytes, protocol.Quote(s))
		}
		src.Path = s
	}
	return src, nil
}

// decodeEncoded decodes the wat or wasm that decodeRunModule left encoded
// (nothing, if src was decoded already or is an id or path). The literal
// stays in src: Compile remembers the module by it.
func decodeEncoded(src *protocol.Source) error {
	e := src.Encoded
	if e == nil || src.WAT != "" || src.Wasm != nil {
		return nil
	}
	field := "module." + e.Field
	switch e.Field {
	case "wasm":
		b, err := base64Field(e.Literal, field)
		if err != nil {
			return err
		}
		src.Wasm = b
	case "wat":
		s, err := stringField(e.Literal, field)
		if err != nil {
			return err
		}
		src.WAT = s
	}
	return nil
}

// decodeLimits overlays the given limits (raw; nil: none) on defaults and
// checks them against the server's maximums.
func decodeLimits(raw json.RawMessage, defaults, max limits.Limits) (limits.Limits, error) {
	if raw == nil {
		return defaults, nil
	}
	var m members
	if err := limitsShape.read(raw, &m); err != nil {
		return defaults, err
	}
	return limitsFrom(&m, defaults, max)
}

// limitsFrom overlays the limits.Fields() members of m (a shape that has
// them at their index in limits.Fields(), and maybe more, the caller's) on
// defaults and checks them against max.
func limitsFrom(m *members, defaults, max limits.Limits) (limits.Limits, error) {
	l := defaults
	for i, f := range limitFields {
		v := m.values[i]
		if v == nil {
			continue
		}
		n, err := uintField(v, "limits."+f.Name, false, true)
		if err != nil {
			return l, err
		}
		if n == 0 {
			return l, paramErr("limits."+f.Name, "must be > 0")
		}
		if f.Name == "timeoutMs" && n > uint64(math.MaxInt64/1_000_000) {
			return l, paramErr("limits.timeoutMs", "must be <= %d (the sidecar's maximum)", f.Get(max))
		}
		f.Set(&l, n)
	}
	if err := l.Validate(max); err != nil {
		if fe, ok := err.(*limits.FieldError); ok {
			return l, paramErr("limits."+fe.Field, "%s", fe.Problem)
		}
		return l, paramErr("limits", "%v", err)
	}
	return l, nil
}

// decodeCapabilities reads a run's grants (raw; nil: none).
func decodeCapabilities(raw json.RawMessage) (protocol.Capabilities, error) {
	var caps protocol.Capabilities
	if raw == nil {
		return caps, nil
	}
	var m members
	err := capabilitiesShape.read(raw, &m)
	if err != nil {
		return caps, err
	}
	if v := m.values[capWASI]; v != nil {
		if caps.WASI, err = decodeWASI(v); err != nil {
			return caps, err
		}
	}
	if v := m.values[capLog]; v != nil {
		if caps.Log, err = boolField(v, "capabilities.log"); err != nil {
			return caps, err
		}
	}
	if v := m.values[capClock]; v != nil {
		if caps.Clock, err = boolField(v, "capabilities.clock"); err != nil {
			return caps, err
		}
	}
	if v := m.values[capRandom]; v != nil {
		var r members
		if err := randomShape.read(v, &r); err != nil {
			return caps, err
		}
		seed := r.values[randomSeed]
		if seed == nil {
			return caps, paramErr("capabilities.random.seed", "required (an integer 0..2^64-1 or a decimal string)")
		}
		if caps.Seed, err = uintField(seed, "capabilities.random.seed", true, false); err != nil {
			return caps, err
		}
		caps.Random = true
	}
	return caps, nil
}

// argList checks and splits an args array (at most MaxArgs elements,
// counted before any is decoded); null is none.
func argList(v json.RawMessage) ([]json.RawMessage, error) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 || (v[0] != '[' && string(v) != "null") {
		return nil, paramErr("args", "must be an array, got %s", kindOfJSON(v))
	}
	if n, ok := countElements(v, MaxArgs); !ok {
		return nil, paramErr("args", "has more than %d elements: no wasm function takes more than %d parameters", n-1, MaxArgs)
	}
	if string(v) == "null" {
		return nil, nil
	}
	return jsonscan.Elements(v), nil
}

// decodeArgs converts raw args to values of the export's parameter types.
// A count mismatch is left to the engine, which reports it as an export
// error naming the signature.
func decodeArgs(raw []json.RawMessage, params []string) ([]protocol.Value, error) {
	if len(raw) != len(params) {
		vals := make([]protocol.Value, len(raw))
		for i := range vals {
			vals[i] = protocol.Value{Type: "?"}
		}
		return vals, nil
	}
	vals := make([]protocol.Value, len(raw))
	for i, r := range raw {
		switch params[i] {
		case "i32", "i64", "f32", "f64":
		default:
			return nil, nil // the engine reports the unsupported type
		}
		v, err := protocol.DecodeArg(r, protocol.ValType(params[i]))
		if err != nil {
			return nil, paramErr(argField(i), "%v", err)
		}
		vals[i] = v
	}
	return vals, nil
}

func argField(i int) string { return "args[" + strconv.Itoa(i) + "]" }
