package rpc

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// TestDecodeHostFunctions: hostFunctions and hostCall, for run and
// instantiate alike; every problem is -32602 naming the entry, and the
// counts are refused before an element is decoded.
func TestDecodeHostFunctions(t *testing.T) {
	def, max := limits.Defaults(), limits.DefaultMaximums()
	many := strings.Repeat(`{"module":"m","name":"f"},`, protocol.MaxHostFunctions) + `{"module":"m","name":"g"}`
	types := `"i32"` + strings.Repeat(`,"i32"`, protocol.MaxHostFunctionValues)
	cases := []struct{ host, want string }{
		{`"hostFunctions":{}`, `hostFunctions: must be an array, got an object`},
		{`"hostFunctions":[` + many + `]`, `hostFunctions: has more than 1024 entries`},
		{`"hostFunctions":[1]`, `hostFunctions[0]: must be an object, got a number`},
		{`"hostFunctions":[{"module":"env","name":"f","result":["i32"]}]`, `hostFunctions[0].result: unknown field (allowed: module, name, params, results)`},
		{`"hostFunctions":[{"name":"f"}]`, `hostFunctions[0].module: required (a string)`},
		{`"hostFunctions":[{"module":"env","name":7}]`, `hostFunctions[0].name: must be a string, got a number`},
		{`"hostFunctions":[{"module":"","name":"f"}]`, `hostFunctions[0].module: must not be empty`},
		{`"hostFunctions":[{"module":"env","name":"f\u0000"}]`, `hostFunctions[0].name: must not contain a NUL byte`},
		{`"hostFunctions":[{"module":"host","name":"log"}]`, `hostFunctions[0].module: "host" is sandboxd's own host functions`},
		{`"hostFunctions":[{"module":"env","name":"f","params":"i32"}]`, `hostFunctions[0].params: must be an array of types, got a string`},
		{`"hostFunctions":[{"module":"env","name":"f","results":[` + types + `]}]`, `hostFunctions[0].results: has more than 1000 entries`},
		{`"hostFunctions":[{"module":"env","name":"f"},{"module":"env","name":"g","params":["i32","i128"]}]`, `hostFunctions[1].params[1]: unknown type "i128" (i32, i64, f32, f64, bytes)`},
		{`"hostFunctions":[{"module":"env","name":"f","params":[null]}]`, `hostFunctions[0].params[0]: must be a string, got null`},
		{`"hostFunctions":[{"module":"env","name":"f"},{"module":"env","name":"f","params":["i32"]}]`, `hostFunctions[1]: "env::f" is declared twice (also hostFunctions[0])`},
		{`"hostCall":7`, `hostCall: must be a string, got a number`},
		{`"hostCall":""`, `hostCall: must not be empty`},
		{`"hostCall":"7"`, `hostCall: not the id of a host call the sidecar sent ("sbx-" followed by digits), got "7"`},
		{`"hostCall":"sbx-1x"`, `hostCall: not the id of a host call`},
		{`"hostCall":"sbx-123456789012345678901"`, `hostCall: not the id of a host call`},
	}
	for _, c := range cases {
		params := `{` + watModule + `,` + c.host + `}`
		_, err := decodeRunFully(json.RawMessage(params), def, max)
		checkParamErr(t, "run", params, err, c.want)
		_, err = decodeInstantiate(json.RawMessage(params), def, max, varLimits{protocol.DefaultVarBytes, protocol.MaxVarBytes})
		checkParamErr(t, "instantiate", params, err, c.want)
	}

	params := `{` + watModule + `,"hostFunctions":[{"module":"extism:host/user","name":"kv","params":["bytes"],"results":["bytes","i64"]},` +
		`{"module":"env","name":"none","params":null}],"hostCall":"sbx-12"}`
	spec, err := decodeRunFully(json.RawMessage(params), def, max)
	if err != nil {
		t.Fatal(err)
	}
	want := []protocol.HostFunction{{Module: "extism:host/user", Name: "kv", Params: []string{"bytes"}, Results: []string{"bytes", "i64"}},
		{Module: "env", Name: "none", Params: []string{}, Results: []string{}}}
	if len(spec.hostFunctions) != 2 || spec.hostCall != "sbx-12" {
		t.Fatalf("decoded %+v from %q", spec.hostFunctions, spec.hostCall)
	}
	for i, f := range spec.hostFunctions {
		if f.String() != want[i].String() || f.Signature() != want[i].Signature() || len(f.Params) != len(want[i].Params) {
			t.Errorf("declaration %d: %+v, want %+v", i, f, want[i])
		}
	}
}
