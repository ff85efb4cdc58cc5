package rpc

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// evalSpec is a decoded `eval` request: one-shot (language) or in a
// session (instance).
type evalSpec struct {
	language protocol.Language // one-shot; a session's is the session's
	instance string            // a session's id; "" one-shot
	code     string
	input    json.RawMessage // nil: none given (the snippet's input is null)
	// rawLimits are the limits as given, until the evaluation's kind says
	// how to read them (evalLimits, sessionEvalLimits).
	rawLimits json.RawMessage
}

// decodeEval reads the (screened) params of `eval`, but its limits:
// exactly one of language and instance, the code, the input.
func decodeEval(raw json.RawMessage) (*evalSpec, error) {
	var p members
	if err := evalShape.read(raw, &p); err != nil {
		return nil, err
	}
	spec := &evalSpec{rawLimits: p.values[evalLimits]}
	lang, inst := p.values[evalLanguage], p.values[evalInstance]
	var err error
	switch {
	case lang != nil && inst != nil:
		return nil, paramErr("instance", "give language (a one-shot evaluation) or instance (a session, which has its language), not both")
	case inst != nil:
		if spec.instance, err = instanceID(inst); err != nil {
			return nil, err
		}
	case lang != nil:
		name, err := stringField(lang, "language")
		if err != nil {
			return nil, err
		}
		if spec.language, err = protocol.ParseLanguage(name); err != nil {
			return nil, paramErr("language", "%v", err)
		}
	default:
		return nil, paramErr("language", "required: one of %s (or instance, a session)", languageNames())
	}
	code := p.values[evalCode]
	if code == nil {
		return nil, paramErr("code", "required: the snippet, a string")
	}
	if spec.code, err = stringField(code, "code"); err != nil {
		return nil, err
	}
	if v := p.values[evalInput]; v != nil {
		v = bytes.TrimSpace(v)
		if err := protocol.CheckEvalInput(v); err != nil {
			return nil, paramErr("input", "%s", strings.TrimPrefix(err.Error(), "input: "))
		}
		spec.input = v
	}
	if err := checkUnneededHostCall(p.values[evalHostCall]); err != nil {
		return nil, err
	}
	return spec, nil
}

// checkUnneededHostCall checks a hostCall member (raw, nil when absent)
// that the request does not need: a snippet declares no host functions,
// so no interpreter waits for a handler and an eval or session sent from
// one cannot wait for itself. Accepting it lets a client tag every
// request that runs a guest, as docs/protocol.md says they do.
func checkUnneededHostCall(raw json.RawMessage) error {
	if raw == nil {
		return nil
	}
	_, err := decodeHostCall(raw)
	return err
}

// evalLimits reads a one-shot evaluation's limits over defaults, its
// language's.
func (spec *evalSpec) evalLimits(defaults, max limits.Limits) (limits.Limits, error) {
	return decodeLimits(spec.rawLimits, defaults, max)
}

// sessionEvalLimits reads an evaluation's limits in a session: only a
// call's four, each zero when not given (the session's applies).
func (spec *evalSpec) sessionEvalLimits(defaults, max limits.Limits) (protocol.CallLimits, error) {
	if spec.rawLimits == nil {
		return protocol.CallLimits{}, nil
	}
	return decodeCallLimits(spec.rawLimits, defaults, max)
}

func languageNames() string {
	var names []string
	for _, l := range protocol.Languages() {
		names = append(names, string(l))
	}
	return strings.Join(names, ", ")
}

// sessionSpec is a decoded `instantiate` that makes a session.
type sessionSpec struct {
	language  protocol.Language
	rawLimits json.RawMessage // read for the language's defaults (prepareSession)
}

// decodeSessionInstantiate reads instantiate's (screened) params when
// they name a language: a session, which takes no module and none of
// the grants and declarations an instance of a module takes. Both nil:
// they do not (or cannot be read: decodeInstantiate says why).
func decodeSessionInstantiate(raw json.RawMessage) (*sessionSpec, error) {
	var p members
	if instantiateShape.read(raw, &p) != nil || p.values[instantiateLanguage] == nil {
		return nil, nil
	}
	if p.values[instantiateModule] != nil {
		return nil, paramErr("module", "give module (an instance of it) or language (a session), not both")
	}
	for _, i := range []int{instantiateCapabilities, instantiateConfig, instantiateHostFunctions} {
		if p.values[i] != nil {
			return nil, paramErr(instantiateShape.names[i], "not offered for a session (instantiate with language)")
		}
	}
	if err := checkUnneededHostCall(p.values[instantiateHostCall]); err != nil {
		return nil, err
	}
	name, err := stringField(p.values[instantiateLanguage], "language")
	if err != nil {
		return nil, err
	}
	lang, err := protocol.ParseLanguage(name)
	if err != nil {
		return nil, paramErr("language", "%v", err)
	}
	return &sessionSpec{language: lang, rawLimits: p.values[instantiateLimits]}, nil
}
