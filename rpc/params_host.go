package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/internal/jsonscan"
	"github.com/sandboxd/sandboxd/protocol"
)

// decodeHostFunctions reads hostFunctions (run and instantiate): an array
// of at most protocol.MaxHostFunctions declarations {module, name,
// params, results}, params and results optional (none), each list of at
// most protocol.MaxHostFunctionValues types; null is none. The counts are
// bounded on the raw text before anything is decoded, as
// capabilities.wasi's are. Every problem names the entry:
// hostFunctions[2].params[0].
func decodeHostFunctions(raw json.RawMessage) ([]protocol.HostFunction, error) {
	const field = protocol.HostFunctionsField
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, paramErr(field, "must be an array, got %s", kindOfJSON(raw))
	}
	if _, ok := countElements(raw, protocol.MaxHostFunctions); !ok {
		return nil, paramErr(field, "has more than %d entries", protocol.MaxHostFunctions)
	}
	items := jsonscan.Elements(raw)
	fs := make([]protocol.HostFunction, 0, len(items))
	for i, it := range items {
		f, err := decodeHostFunction(it, field+"["+strconv.Itoa(i)+"]")
		if err != nil {
			return nil, err
		}
		fs = append(fs, f)
	}
	var ge *protocol.GrantError
	if err := protocol.CheckHostFunctions(fs); errors.As(err, &ge) {
		return nil, &ParamError{Field: ge.Field, Problem: ge.Problem}
	} else if err != nil {
		return nil, paramErr(field, "%v", err)
	}
	return fs, nil
}

// decodeHostFunction reads one declaration, whose field path is path.
func decodeHostFunction(raw json.RawMessage, path string) (protocol.HostFunction, error) {
	var f protocol.HostFunction
	var m members
	if err := hostFunctionShape.readAt(raw, path, &m); err != nil {
		return f, err
	}
	for _, i := range []int{hostFnModule, hostFnName} {
		name := path + "." + hostFunctionShape.names[i]
		v := m.values[i]
		if v == nil {
			return f, paramErr(name, "required (a string)")
		}
		s, err := stringField(v, name)
		if err != nil {
			return f, err
		}
		if i == hostFnModule {
			f.Module = s
		} else {
			f.Name = s
		}
	}
	var err error
	if f.Params, err = hostTypes(m.values[hostFnParams], path+".params"); err != nil {
		return f, err
	}
	f.Results, err = hostTypes(m.values[hostFnResults], path+".results")
	return f, err
}

// hostTypes reads a declaration's params or results: an array of type
// names (checked by protocol.CheckHostFunctions), at most
// protocol.MaxHostFunctionValues; nil (absent or null) is none.
func hostTypes(raw json.RawMessage, field string) ([]string, error) {
	types := []string{}
	if raw == nil {
		return types, nil
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, paramErr(field, "must be an array of types, got %s", kindOfJSON(raw))
	}
	if _, ok := countElements(raw, protocol.MaxHostFunctionValues); !ok {
		return nil, paramErr(field, "has more than %d entries", protocol.MaxHostFunctionValues)
	}
	for j, it := range jsonscan.Elements(raw) {
		t, err := stringField(it, field+"["+strconv.Itoa(j)+"]")
		if err != nil {
			return nil, err
		}
		types = append(types, t)
	}
	return types, nil
}

// decodeHostCall reads hostCall (run, instantiate, call): the id of the
// host call whose handler sent the request, as the sidecar sent it.
// Whether that host call still waits is not the parent's mistake (its
// answer and this request may cross): an id the sidecar does not know
// simply names no chain.
func decodeHostCall(raw json.RawMessage) (string, error) {
	const field = protocol.HostCallField
	id, err := nonEmptyString(raw, field)
	if err != nil {
		return "", err
	}
	digits, ok := strings.CutPrefix(id, protocol.HostCallIDPrefix)
	if !ok || digits == "" || strings.Trim(digits, "0123456789") != "" || len(id) > protocol.MaxHostCallIDBytes {
		return "", paramErr(field, "not the id of a host call the sidecar sent (%s followed by digits), got %s",
			protocol.Quote(protocol.HostCallIDPrefix), protocol.Quote(id))
	}
	return id, nil
}

// decodeHostMembers reads hostFunctions and hostCall, the members of
// indices fns and from of p (either may be absent).
func decodeHostMembers(p *members, fns, from int) ([]protocol.HostFunction, string, error) {
	var hf []protocol.HostFunction
	var hc string
	var err error
	if v := p.values[fns]; v != nil {
		if hf, err = decodeHostFunctions(v); err != nil {
			return nil, "", err
		}
	}
	if v := p.values[from]; v != nil {
		if hc, err = decodeHostCall(v); err != nil {
			return nil, "", err
		}
	}
	return hf, hc, nil
}
