package rpc

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/sandboxd/sandboxd/internal/jsonscan"
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
}

// callSpec is a decoded `call` request.
type callSpec struct {
	function string
	args     []protocol.Value
	input    []byte // nil: none given
	limits   protocol.CallLimits
}

// callLimitFields are the limits a call may set; the others hold for the
// instance's life and are fixed at instantiate.
var callLimitFields = []string{"fuel", "timeoutMs", "logBytes", "outputBytes"}

// varBytesField is the instance limit that is not a run limit.
const varBytesField = "varBytes"

// varLimits are the default and the maximum of limits.varBytes
// (Options.DefaultVarBytes, MaxVarBytes).
type varLimits struct{ def, max uint64 }

func decodeInstantiate(raw json.RawMessage, defaults, max limits.Limits, vars varLimits) (*instantiateSpec, error) {
	obj, err := object(raw, "params", "module", "capabilities", "limits", "config")
	if err != nil {
		return nil, err
	}
	spec := &instantiateSpec{}
	m, ok := obj["module"]
	if !ok {
		return nil, paramErr("module", "required: one of {wat}, {wasm}, {id}, {path}")
	}
	if spec.source, err = decodeModule(m, "module"); err != nil {
		return nil, err
	}
	if spec.limits, spec.varBytes, err = decodeInstanceLimits(obj["limits"], defaults, max, vars); err != nil {
		return nil, err
	}
	spec.source.CompileTimeout, spec.source.CompileMemoryBytes = spec.limits.CompileTimeout, spec.limits.CompileMemoryBytes
	if spec.caps, err = decodeCapabilities(obj["capabilities"]); err != nil {
		return nil, err
	}
	if spec.config, err = decodeConfig(obj["config"]); err != nil {
		return nil, err
	}
	return spec, nil
}

// instanceLimitNames are the limits instantiate takes: the run limits and
// varBytes.
var instanceLimitNames = append(append([]string{}, limitNames...), varBytesField)

// decodeInstanceLimits reads instantiate's limits: the run limits and
// varBytes.
func decodeInstanceLimits(raw json.RawMessage, defaults, max limits.Limits, vars varLimits) (limits.Limits, uint64, error) {
	if raw == nil {
		return defaults, vars.def, nil
	}
	obj, err := validObject(raw, "limits", instanceLimitNames...)
	if err != nil {
		return defaults, 0, err
	}
	varBytes := vars.def
	if v, ok := obj[varBytesField]; ok {
		if varBytes, err = uintField(v, "limits."+varBytesField, false, true); err != nil {
			return defaults, 0, err
		}
		if varBytes == 0 || varBytes > vars.max {
			return defaults, 0, paramErr("limits."+varBytesField, "must be in [1, %d], got %d", vars.max, varBytes)
		}
	}
	l, err := limitsFrom(obj, defaults, max)
	return l, varBytes, err
}

// MaxConfigKeys bounds the keys of a plugin's config. The instance keeps
// its config for life, and a map spends about 100 bytes per key besides
// the key and value: a 60 MB message of 4 M empty keys held 1.4 GB per
// instance (and took 84 s to decode) before this bound.
const MaxConfigKeys = 4096

// decodeConfig reads a plugin's config: an object of strings.
func decodeConfig(raw json.RawMessage) (map[string]string, error) {
	if raw == nil || string(bytes.TrimSpace(raw)) == "null" {
		return map[string]string{}, nil
	}
	if _, ok := countElements(bytes.TrimSpace(raw), MaxConfigKeys); !ok { // before anything is decoded
		return nil, paramErr("config", "has more than %d keys", MaxConfigKeys)
	}
	obj, err := anyObject(raw, "config")
	if err != nil {
		return nil, err
	}
	config := make(map[string]string, len(obj))
	for k, v := range obj {
		v = bytes.TrimSpace(v)
		var s string
		if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil {
			return nil, paramErr("config."+protocol.Escape(k), "must be a string, got %s", kindOfJSON(v))
		}
		config[k] = s
	}
	return config, nil
}

// callFields are the members of a call's params.
var callFields = []string{"instance", "function", "input", "args", "limits"}

// callParams splits a call's params (screened, so valid JSON) into its
// members and reads the instance, where the call was read; decodeCall
// reads the rest from the members later.
func callParams(raw json.RawMessage) (map[string]json.RawMessage, string, error) {
	obj, err := validObject(raw, "params", callFields...)
	if err != nil {
		return nil, "", err
	}
	id, err := instanceID(obj["instance"])
	return obj, id, err
}

func instanceID(raw json.RawMessage) (string, error) {
	if raw == nil {
		return "", paramErr("instance", "required: the id instantiate returned")
	}
	id, err := validStringField(raw, "instance")
	if err != nil {
		return "", err
	}
	if id == "" {
		return "", paramErr("instance", "must not be empty")
	}
	if len(id) > protocol.MaxInstanceIDBytes {
		return "", paramErr("instance", "not an id instantiate returned (longer than %d bytes)", protocol.MaxInstanceIDBytes)
	}
	return id, nil
}

func decodeRelease(raw json.RawMessage) (string, error) {
	obj, err := validObject(raw, "params", "instance")
	if err != nil {
		return "", err
	}
	return instanceID(obj["instance"])
}

// decodeCall reads the members of a call's (screened) params, as
// callParams split them, for a call on in.
func decodeCall(obj map[string]json.RawMessage, in Instance, defaults, max limits.Limits) (*callSpec, error) {
	var err error
	spec := &callSpec{}
	v, ok := obj["function"]
	if !ok {
		return nil, paramErr("function", "required: the export to call")
	}
	if spec.function, err = validStringField(v, "function"); err != nil {
		return nil, err
	}
	if spec.function == "" {
		return nil, paramErr("function", "must not be empty")
	}
	info := in.Module()
	if v, ok := obj["input"]; ok {
		if spec.input, err = decodeInput(v); err != nil {
			return nil, err
		}
		if err := checkInput(info, spec.function); err != nil {
			return nil, err
		}
	}
	if v, ok := obj["args"]; ok {
		rawArgs, err := decodeArgList(v)
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
	if v, ok := obj["limits"]; ok {
		if spec.limits, err = decodeCallLimits(v, defaults, max); err != nil {
			return nil, err
		}
	}
	return spec, nil
}

// decodeArgList checks and splits a (screened) args array.
func decodeArgList(v json.RawMessage) ([]json.RawMessage, error) {
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

func decodeInput(v json.RawMessage) ([]byte, error) {
	b, problem := protocol.DecodeBytes(v)
	if problem != "" {
		return nil, paramErr("input", "%s", problem)
	}
	if b == nil {
		b = []byte{}
	}
	return b, nil
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
	if raw == nil {
		return cl, nil
	}
	obj, err := validMembers(raw, "limits", instanceLimitNames, callLimitFields)
	if err != nil {
		return cl, err
	}
	for _, name := range instanceLimitNames {
		if _, ok := obj[name]; ok && !contains(callLimitFields, name) {
			return cl, paramErr("limits."+name, "fixed at instantiate (only %s apply to a call)", strings.Join(callLimitFields, ", "))
		}
	}
	l, err := limitsFrom(obj, defaults, max) // bad values, named
	if err != nil {
		return cl, err
	}
	if _, ok := obj["fuel"]; ok {
		cl.Fuel = l.Fuel
	}
	if _, ok := obj["timeoutMs"]; ok {
		cl.Timeout = l.Timeout
	}
	if _, ok := obj["logBytes"]; ok {
		cl.LogBytes = l.LogBytes
	}
	if _, ok := obj["outputBytes"]; ok {
		cl.OutputBytes = l.OutputBytes
	}
	return cl, nil
}

func limitField(name string) bool {
	for _, f := range limits.Fields {
		if f.Name == name {
			return true
		}
	}
	return false
}

// decodePluginRun reads what a plugin run adds to `run`: input and config.
func decodePluginRun(obj map[string]json.RawMessage, spec *runSpec) (err error) {
	if v, ok := obj["input"]; ok {
		if spec.input, err = decodeInput(v); err != nil {
			return err
		}
	}
	if v, ok := obj["config"]; ok {
		if spec.config, err = decodeConfig(v); err != nil {
			return err
		}
	}
	return nil
}
