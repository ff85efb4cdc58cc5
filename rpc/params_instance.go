package rpc

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// instantiateSpec is a decoded `instantiate` request.
type instantiateSpec struct {
	source   protocol.Source
	caps     protocol.Capabilities
	limits   limits.Limits
	varBytes uint64
	config   map[string]string
	// As a run's (runSpec).
	hostFunctions []protocol.HostFunction
	hostCall      string
}

// callSpec is a decoded `call` request.
type callSpec struct {
	function string
	args     []protocol.Value
	input    []byte // nil: none given
	limits   protocol.CallLimits
}

// varLimits are the default and the maximum of limits.varBytes
// (Options.DefaultVarBytes, MaxVarBytes).
type varLimits struct{ def, max uint64 }

// decodeInstantiate reads the (screened) params of `instantiate`.
func decodeInstantiate(raw json.RawMessage, defaults, max limits.Limits, vars varLimits) (*instantiateSpec, error) {
	var p members
	if err := instantiateShape.read(raw, &p); err != nil {
		return nil, err
	}
	m := p.values[instantiateModule]
	if m == nil {
		return nil, paramErr("module", "required: one of {wat}, {wasm}, {id}, {path} (or language, for a session)")
	}
	spec := &instantiateSpec{}
	var err error
	if spec.source, err = decodeModule(m); err != nil {
		return nil, err
	}
	if spec.limits, spec.varBytes, err = decodeInstanceLimits(p.values[instantiateLimits], defaults, max, vars); err != nil {
		return nil, err
	}
	spec.source.CompileTimeout, spec.source.CompileMemoryBytes = spec.limits.CompileTimeout, spec.limits.CompileMemoryBytes
	if spec.caps, err = decodeCapabilities(p.values[instantiateCapabilities]); err != nil {
		return nil, err
	}
	spec.config = map[string]string{}
	if v := p.values[instantiateConfig]; v != nil {
		if spec.config, err = decodeConfig(v); err != nil {
			return nil, err
		}
	}
	if spec.hostFunctions, spec.hostCall, err = decodeHostMembers(&p, instantiateHostFunctions, instantiateHostCall); err != nil {
		return nil, err
	}
	return spec, nil
}

// decodeInstanceLimits reads instantiate's limits (raw; nil: none): the
// run limits and varBytes.
func decodeInstanceLimits(raw json.RawMessage, defaults, max limits.Limits, vars varLimits) (limits.Limits, uint64, error) {
	if raw == nil {
		return defaults, vars.def, nil
	}
	var m members
	if err := instanceLimitsShape.read(raw, &m); err != nil {
		return defaults, 0, err
	}
	varBytes := vars.def
	if v := m.values[varBytesMember]; v != nil {
		var err error
		if varBytes, err = uintField(v, "limits."+varBytesField, false, true); err != nil {
			return defaults, 0, err
		}
		if varBytes == 0 || varBytes > vars.max {
			return defaults, 0, paramErr("limits."+varBytesField, "must be in [1, %d], got %d", vars.max, varBytes)
		}
	}
	l, err := limitsFrom(&m, defaults, max)
	return l, varBytes, err
}

// decodeConfig reads a plugin's config: an object of strings, of at most
// MaxConfigKeys keys (counted before anything is decoded).
func decodeConfig(raw json.RawMessage) (map[string]string, error) {
	if _, ok := countElements(bytes.TrimSpace(raw), MaxConfigKeys); !ok {
		return nil, paramErr("config", "has more than %d keys", MaxConfigKeys)
	}
	es, err := entries(raw, "config")
	if err != nil {
		return nil, err
	}
	config := make(map[string]string, len(es))
	for _, e := range es {
		if config[e.key], err = stringField(e.value, "config."+protocol.Escape(e.key)); err != nil {
			return nil, err
		}
	}
	return config, nil
}

// callParams reads a call's (screened) params where the call was read, and
// its instance id; decodeCall reads the rest later.
func callParams(raw json.RawMessage) (members, string, error) {
	var p members
	if err := callShape.read(raw, &p); err != nil {
		return p, "", err
	}
	id, err := instanceID(p.values[callInstance])
	return p, id, err
}

// decodeRelease reads the (screened) params of `release`: the instance id.
func decodeRelease(raw json.RawMessage) (string, error) {
	var p members
	if err := releaseShape.read(raw, &p); err != nil {
		return "", err
	}
	return instanceID(p.values[releaseInstance])
}

func instanceID(raw json.RawMessage) (string, error) {
	if raw == nil {
		return "", paramErr("instance", "required: the id instantiate returned")
	}
	id, err := nonEmptyString(raw, "instance")
	if err != nil {
		return "", err
	}
	if len(id) > protocol.MaxInstanceIDBytes {
		return "", paramErr("instance", "not an id instantiate returned (longer than %d bytes)", protocol.MaxInstanceIDBytes)
	}
	return id, nil
}

// decodeCall reads the members of a call's params, as callParams read
// them, for a call on in.
func decodeCall(p *members, in Instance, defaults, max limits.Limits) (*callSpec, error) {
	v := p.values[callFunction]
	if v == nil {
		return nil, paramErr("function", "required: the export to call")
	}
	var err error
	spec := &callSpec{}
	if spec.function, err = nonEmptyString(v, "function"); err != nil {
		return nil, err
	}
	info := in.Module()
	if v := p.values[callInput]; v != nil {
		if spec.input, err = inputField(v); err != nil {
			return nil, err
		}
		if err := checkInput(info, spec.function); err != nil {
			return nil, err
		}
	}
	if v := p.values[callArgs]; v != nil {
		rawArgs, err := argList(v)
		if err != nil {
			return nil, err
		}
		if exp, ok := info.Export(spec.function); ok && exp.Kind == "func" {
			if spec.args, err = decodeArgs(rawArgs, exp.Params); err != nil {
				return nil, err
			}
		} else {
			spec.args = make([]protocol.Value, len(rawArgs)) // the engine names the missing export
		}
	}
	if v := p.values[callLimits]; v != nil {
		if spec.limits, err = decodeCallLimits(v, defaults, max); err != nil {
			return nil, err
		}
	}
	return spec, nil
}

// inputField reads a plugin function's input (empty, not nil, when given
// empty).
func inputField(v json.RawMessage) ([]byte, error) {
	b, err := bytesField(v, "input")
	if err == nil && b == nil {
		b = []byte{}
	}
	return b, err
}

// checkInput refuses input for an export that exists and is not a plugin
// function (a missing export is the engine's export error).
func checkInput(info *protocol.ModuleInfo, fn string) error {
	exp, ok := info.Export(fn)
	if !ok || info.IsPluginFunction(fn) {
		return nil
	}
	why := "the module is not an Extism plugin"
	if info.IsPlugin() {
		why = protocol.PluginFunctionShape
		if exp.Kind != "func" {
			why = "it is a " + exp.Kind
		}
	}
	return paramErr("input", "%s is not a plugin function (%s)", protocol.Quote(fn), why)
}

// decodeCallLimits reads a call's limits: only the per-call fences. A
// limit fixed at instantiate is refused saying so; anything else is an
// unknown field, with the four a call takes as the allowed list.
func decodeCallLimits(raw json.RawMessage, defaults, max limits.Limits) (protocol.CallLimits, error) {
	var cl protocol.CallLimits
	var m members
	if err := callLimitsShape.read(raw, &m); err != nil {
		return cl, err
	}
	for i, name := range callLimitsShape.names {
		if m.values[i] != nil && !slices.Contains(callLimitNames, name) {
			return cl, paramErr("limits."+name, "fixed at instantiate (only %s apply to a call)", strings.Join(callLimitNames, ", "))
		}
	}
	l, err := limitsFrom(&m, defaults, max) // bad values, named
	if err != nil {
		return cl, err
	}
	for i, f := range limitFields {
		if m.values[i] == nil {
			continue
		}
		switch f.Name {
		case "fuel":
			cl.Fuel = l.Fuel
		case "timeoutMs":
			cl.Timeout = l.Timeout
		case "logBytes":
			cl.LogBytes = l.LogBytes
		case "outputBytes":
			cl.OutputBytes = l.OutputBytes
		}
	}
	return cl, nil
}
