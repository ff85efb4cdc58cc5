package rpc

// The oracle (oracle_test.go) for the params of compile and instantiate,
// which share run's module, limits, capabilities and config:
// docs/protocol.md's `compile` and *Instances and plugins*.

import (
	"fmt"
	"slices"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// oracleDecodeCompile reads compile params: a module and limits, of which
// only the compile limits (a run limit is refused naming it, given null
// or not).
func oracleDecodeCompile(data []byte, defaults, max limits.Limits) (src *protocol.Source, faults []string) {
	v, err := readPlain(data)
	if err != nil {
		panic(fmt.Sprintf("%q is valid JSON, yet: %v", data, err))
	}
	o := &oracle{}
	params, ok := o.object(v, "params", "module", "limits", "preinitialize")
	if !ok {
		return nil, o.faults
	}
	src = &protocol.Source{}
	if m, ok := params.get("module"); !ok {
		o.fault("module")
	} else {
		*src = o.module(m)
	}
	l := defaults
	if lv, ok := params.get("limits"); ok {
		if given, ok := lv.(plainObject); ok {
			for _, name := range given.names() {
				if slices.ContainsFunc(limits.Fields(), func(f limits.Field) bool { return f.Name == name }) &&
					name != "compileTimeoutMs" && name != "compileMemoryBytes" {
					o.fault("limits." + shown(name))
				}
			}
		}
		l = o.limits(lv, defaults, max)
	}
	src.CompileTimeout, src.CompileMemoryBytes = l.CompileTimeout, l.CompileMemoryBytes
	if pv, ok := params.get("preinitialize"); ok {
		src.Preinitialize = o.boolean(pv, "preinitialize")
		if src.Preinitialize && src.ID != "" {
			o.fault("preinitialize")
		}
	}
	if len(o.faults) > 0 {
		return nil, o.faults
	}
	return src, nil
}

// oracleDecodeInstantiate reads instantiate params: a module, capabilities,
// limits (a run's, and varBytes in 1..vars.max) and config (none is
// empty).
func oracleDecodeInstantiate(data []byte, defaults, max limits.Limits, vars varLimits) (spec *instantiateSpec, faults []string) {
	v, err := readPlain(data)
	if err != nil {
		panic(fmt.Sprintf("%q is valid JSON, yet: %v", data, err))
	}
	o := &oracle{}
	params, ok := o.object(v, "params", "module", "capabilities", "limits", "config", "hostFunctions", "hostCall")
	if !ok {
		return nil, o.faults
	}
	spec = &instantiateSpec{limits: defaults, varBytes: vars.def, config: map[string]string{}}
	if m, ok := params.get("module"); !ok {
		o.fault("module")
	} else {
		spec.source = o.module(m)
	}
	if lv, ok := params.get("limits"); ok {
		spec.limits = o.limits(lv, defaults, max, "varBytes")
		if obj, ok := lv.(plainObject); ok {
			if vb, ok := obj.get("varBytes"); ok && vb != nil {
				spec.varBytes = o.integer(vb, "limits.varBytes", false)
				if spec.varBytes == 0 || spec.varBytes > vars.max {
					o.fault("limits.varBytes")
				}
			}
		}
	}
	spec.source.CompileTimeout, spec.source.CompileMemoryBytes = spec.limits.CompileTimeout, spec.limits.CompileMemoryBytes
	if c, ok := params.get("capabilities"); ok && c != nil {
		spec.caps = o.capabilities(c)
	}
	if c, ok := params.get("config"); ok {
		spec.config = o.config(c)
	}
	spec.hostFunctions, spec.hostCall = o.host(params)
	if len(o.faults) > 0 {
		return nil, o.faults
	}
	return spec, nil
}

// instantiateSummary renders what decoded instantiate params mean.
func instantiateSummary(s *instantiateSpec) string {
	caps := s.caps
	caps.WASI = nil // printed by value below
	return fmt.Sprintf("src=%+v limits=%+v varBytes=%d caps=%+v wasi=%+v config=%v host=%q from %q",
		s.source, s.limits, s.varBytes, caps, s.caps.WASI, s.config, s.hostFunctions, s.hostCall)
}
