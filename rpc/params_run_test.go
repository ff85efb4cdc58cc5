package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

const watModule = `"module":{"wat":"(module)"}`

// paramCase is one invalid params object and the start of its error.
type paramCase struct {
	name   string
	params string
	want   string // Error() must start with this
}

func checkParamErr(t *testing.T, name, params string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: %s: no error, want %q", name, params, want)
		return
	}
	var pe *ParamError
	if !errors.As(err, &pe) {
		t.Errorf("%s: %s: error %T %v is not a *ParamError", name, params, err, err)
		return
	}
	if !strings.HasPrefix(pe.Error(), want) {
		t.Errorf("%s: %s:\n got %q\nwant prefix %q", name, params, pe.Error(), want)
	}
	// The error becomes -32602 with the same message.
	if eo := ErrorObject(err); eo.Code != CodeInvalidParams || eo.Message != pe.Error() {
		t.Errorf("%s: ErrorObject = %d %q", name, eo.Code, eo.Message)
	}
}

func moduleCases() []paramCase {
	return []paramCase{
		{"module missing", `{}`, "module: required"},
		{"module a string", `{"module":"x.wat"}`, "module: must be an object, got a string"},
		{"module an array", `{"module":[]}`, "module: must be an object, got an array"},
		{"module null", `{"module":null}`, "module: required"}, // null is absent
		{"module a number", `{"module":1}`, "module: must be an object, got a number"},
		{"module a bool", `{"module":true}`, "module: must be an object, got a boolean"},
		{"module no keys", `{"module":{}}`, "module: give exactly one of wat, wasm, id, path (got 0)"},
		{"module two keys", `{"module":{"wat":"(module)","path":"a.wat"}}`, "module: give exactly one of wat, wasm, id, path (got 2)"},
		{"module unknown key", `{"module":{"text":"(module)"}}`, "module.text: unknown field"},
		{"wat not a string", `{"module":{"wat":1}}`, "module.wat: must be a string, got a number"},
		{"wat null", `{"module":{"wat":null}}`, "module: give exactly one of wat, wasm, id, path (got 0)"},
		{"wat empty", `{"module":{"wat":""}}`, "module.wat: must not be empty"},
		{"wasm not a string", `{"module":{"wasm":[0,97,115,109]}}`, "module.wasm: must be a string, got an array"},
		{"wasm not base64", `{"module":{"wasm":"not base64!"}}`, "module.wasm: not valid base64"},
		{"wasm unpadded", `{"module":{"wasm":"AGFzbQ"}}`, "module.wasm: not valid base64"},
		{"wasm url alphabet", `{"module":{"wasm":"AG-_"}}`, "module.wasm: not valid base64"},
		{"id not a string", `{"module":{"id":{}}}`, "module.id: must be a string, got an object"},
		{"id without prefix", `{"module":{"id":"abcdef"}}`, "module.id: must be sha256: and 64 lowercase hex digits"},
		{"id other hash", `{"module":{"id":"sha512:abcdef"}}`, "module.id: must be sha256: and 64 lowercase hex digits"},
		{"id empty", `{"module":{"id":""}}`, "module.id: must not be empty"},
		{"id uppercase", `{"module":{"id":"sha256:` + strings.Repeat("AB", 32) + `"}}`, "module.id: must be sha256: and 64 lowercase hex digits"},
		{"id short", `{"module":{"id":"sha256:` + strings.Repeat("a", 63) + `"}}`, "module.id: must be sha256: and 64 lowercase hex digits"},
		{"id long", `{"module":{"id":"sha256:` + strings.Repeat("<", 1<<20) + `"}}`,
			`module.id: must be sha256: and 64 lowercase hex digits (an id compile returned), got "sha256:` + strings.Repeat("<", protocol.MaxQuotedBytes-7) + `"…`},
		{"path long", `{"module":{"path":"/` + strings.Repeat("<", 1<<20) + `"}}`,
			`module.path: is 1048577 bytes; a path has at most 4096 (PATH_MAX), got "/` + strings.Repeat("<", protocol.MaxQuotedBytes-1) + `"…`},
		{"path empty", `{"module":{"path":""}}`, "module.path: must not be empty"},
		{"path not a string", `{"module":{"path":false}}`, "module.path: must be a string, got a boolean"},
	}
}

// TestDecodeModuleQuotesBriefly: a module id or path of a megabyte is
// refused by every method that takes a module, naming the field, in a
// message that quotes it cut.
func TestDecodeModuleQuotesBriefly(t *testing.T) {
	def, max := limits.Defaults(), limits.DefaultMaximums()
	for _, member := range []string{
		`{"id":"sha256:` + strings.Repeat("<", 1<<20) + `"}`,
		`{"path":"/tmp/` + strings.Repeat("<", 1<<20) + `"}`,
		`{"path":"/tmp/` + strings.Repeat("./", 2049) + `"}`,
	} {
		params := json.RawMessage(`{"module":` + member + `}`)
		_, runErr := decodeRunFully(params, def, max)
		_, compileErr := decodeCompile(params, def, max)
		_, instErr := decodeInstantiate(params, def, max, varLimits{})
		for method, err := range map[string]error{"run": runErr, "compile": compileErr, "instantiate": instErr} {
			var pe *ParamError
			if !errors.As(err, &pe) || !strings.HasPrefix(pe.Field, "module.") || len(pe.Error()) > 256 {
				t.Errorf("%s %.40s…: %.300v", method, member, err)
			}
		}
	}
}

func TestDecodeRunInvalid(t *testing.T) {
	def, max := limits.Defaults(), limits.DefaultMaximums()
	cases := moduleCases()
	cases = append(cases, []paramCase{
		{"params null", `null`, "params: must be an object, got null"},
		{"params array", `[{"module":{"wat":"(module)"}}]`, "params: must be an object, got an array"},
		{"params string", `"run"`, "params: must be an object, got a string"},
		{"params nothing", ``, "params: must be an object, got nothing"},
		{"unknown top-level field", `{` + watModule + `,"timeout":5}`, "timeout: unknown field"},
		{"function not a string", `{` + watModule + `,"function":7}`, "function: must be a string, got a number"},
		{"function empty", `{` + watModule + `,"function":""}`, "function: must not be empty"},
		{"args an object", `{` + watModule + `,"args":{}}`, "args: must be an array, got an object"},
		{"args a string", `{` + watModule + `,"args":"1,2"}`, "args: must be an array, got a string"},
		{"args a number", `{` + watModule + `,"args":1}`, "args: must be an array, got a number"},
		{"limits not an object", `{` + watModule + `,"limits":[]}`, "limits: must be an object, got an array"},
		{"limits a number", `{` + watModule + `,"limits":5}`, "limits: must be an object, got a number"},
		{"limits unknown", `{` + watModule + `,"limits":{"timeout":5}}`, "limits.timeout: unknown field"},
		{"capabilities not an object", `{` + watModule + `,"capabilities":true}`, "capabilities: must be an object, got a boolean"},
		{"capabilities an array", `{` + watModule + `,"capabilities":["log"]}`, "capabilities: must be an object, got an array"},
		{"capabilities unknown", `{` + watModule + `,"capabilities":{"net":true}}`, "capabilities.net: unknown field"},
		{"log not a bool", `{` + watModule + `,"capabilities":{"log":"yes"}}`, "capabilities.log: must be true or false, got a string"},
		{"log a number", `{` + watModule + `,"capabilities":{"log":1}}`, "capabilities.log: must be true or false, got a number"},
		{"clock not a bool", `{` + watModule + `,"capabilities":{"clock":"true"}}`, "capabilities.clock: must be true or false, got a string"},
		{"clock an object", `{` + watModule + `,"capabilities":{"clock":{}}}`, "capabilities.clock: must be true or false, got an object"},
		{"random not an object", `{` + watModule + `,"capabilities":{"random":true}}`, "capabilities.random: must be an object, got a boolean"},
		{"random a number", `{` + watModule + `,"capabilities":{"random":42}}`, "capabilities.random: must be an object, got a number"},
		{"random without seed", `{` + watModule + `,"capabilities":{"random":{}}}`, "capabilities.random.seed: required"},
		{"random unknown", `{` + watModule + `,"capabilities":{"random":{"seed":1,"algo":"x"}}}`, "capabilities.random.algo: unknown field"},
		{"seed negative", `{` + watModule + `,"capabilities":{"random":{"seed":-1}}}`, "capabilities.random.seed: "},
		{"seed fraction", `{` + watModule + `,"capabilities":{"random":{"seed":1.5}}}`, "capabilities.random.seed: must be an integer"},
		{"seed string fraction", `{` + watModule + `,"capabilities":{"random":{"seed":"1.5"}}}`, "capabilities.random.seed: must be an integer"},
		{"seed beyond 2^64", `{` + watModule + `,"capabilities":{"random":{"seed":18446744073709551616}}}`, "capabilities.random.seed: must be at most 18446744073709551615"},
		{"seed string beyond 2^64", `{` + watModule + `,"capabilities":{"random":{"seed":"18446744073709551616"}}}`, "capabilities.random.seed: must be at most 18446744073709551615"},
		{"seed string not a number", `{` + watModule + `,"capabilities":{"random":{"seed":"abc"}}}`, "capabilities.random.seed: must be an integer"},
		{"seed string negative", `{` + watModule + `,"capabilities":{"random":{"seed":"-5"}}}`, "capabilities.random.seed: "},
		{"seed string Inf", `{` + watModule + `,"capabilities":{"random":{"seed":"Inf"}}}`, "capabilities.random.seed: must be an integer"},
		{"seed bool", `{` + watModule + `,"capabilities":{"random":{"seed":true}}}`, "capabilities.random.seed: must be an integer, got a boolean"},
		{"seed null", `{` + watModule + `,"capabilities":{"random":{"seed":null}}}`, "capabilities.random.seed: required"},
		{"seed huge digits", `{` + watModule + `,"capabilities":{"random":{"seed":"` + strings.Repeat("9", 500) + `"}}}`, "capabilities.random.seed: must be an integer that fits in 64 bits"},
	}...)
	// Each of the limits.
	for _, f := range limits.Fields() {
		lim := func(v string) string { return `{` + watModule + `,"limits":{"` + f.Name + `":` + v + `}}` }
		field := "limits." + f.Name + ": "
		cases = append(cases, []paramCase{
			{f.Name + " a string", lim(`"5"`), field + "must be an integer, got a string"},
			{f.Name + " negative", lim(`-1`), field + "must be > 0"},
			{f.Name + " fraction", lim(`1.5`), field + "must be an integer"},
			{f.Name + " zero", lim(`0`), field + "must be > 0"},
			{f.Name + " zero float", lim(`0.0`), field + "must be > 0"},
			{f.Name + " above the maximum", lim(uintString(f.Get(max) + 1)), field + "must be <= " + uintString(f.Get(max))},
			{f.Name + " beyond 2^64", lim(`18446744073709551616`), field + "must be at most"},
			{f.Name + " bool", lim(`true`), field + "must be an integer, got a boolean"},
			{f.Name + " object", lim(`{}`), field + "must be an integer, got an object"},
		}...)
	}
	// timeoutMs large enough to overflow a time.Duration.
	cases = append(cases,
		paramCase{"timeoutMs overflow", `{` + watModule + `,"limits":{"timeoutMs":18446744073709551615}}`, "limits.timeoutMs: must be <= 600000"},
		paramCase{"timeoutMs overflow 2", `{` + watModule + `,"limits":{"timeoutMs":9223372036855}}`, "limits.timeoutMs: must be <= 600000"},
	)
	for _, c := range cases {
		spec, err := decodeRunFully(json.RawMessage(c.params), def, max)
		if err == nil {
			t.Errorf("%s: %s: decoded %+v, want error %q", c.name, c.params, spec, c.want)
			continue
		}
		checkParamErr(t, c.name, c.params, err, c.want)
	}
}

// decodeRunFully reads run params from any bytes as the server reads a
// message's: screening refuses what is not valid JSON, and a module left
// encoded is decoded (as after a cache miss).
func decodeRunFully(raw json.RawMessage, def, max limits.Limits) (*runSpec, error) {
	if err := screenedParams(raw); err != nil {
		return nil, err
	}
	spec, err := decodeRun(raw, def, max)
	if err != nil {
		return nil, err
	}
	if err := decodeEncoded(&spec.source); err != nil {
		return nil, err
	}
	return spec, nil
}

// screenedParams is the error of params that are not valid JSON, which
// the decoders never see on the wire (screening answers -32700 first).
func screenedParams(raw json.RawMessage) error {
	if json.Valid(raw) {
		return nil
	}
	if raw = bytes.TrimSpace(raw); len(raw) == 0 || raw[0] != '{' {
		return paramErr("params", "must be an object, got %s", kindOfJSON(raw))
	}
	return paramErr("params", "must be an object: %v", json.Unmarshal(raw, &struct{}{}))
}

func uintString(v uint64) string { return strconv.FormatUint(v, 10) }

// TestDecodeRunSeedNegativeMessage: a seed may be 0, so a negative seed's
// message must not say "must be > 0" (that is the limits' rule).
func TestDecodeRunSeedNegativeMessage(t *testing.T) {
	def, max := limits.Defaults(), limits.DefaultMaximums()
	for _, seed := range []string{`-1`, `"-1"`} {
		params := `{` + watModule + `,"capabilities":{"random":{"seed":` + seed + `}}}`
		_, err := decodeRunFully(json.RawMessage(params), def, max)
		if err == nil {
			t.Fatalf("seed %s accepted", seed)
		}
		if strings.Contains(err.Error(), "must be > 0") {
			t.Errorf("seed %s: %q, but 0 is a valid seed (want e.g. \"must be >= 0\")", seed, err)
		}
	}
	// 0 is indeed accepted.
	spec, err := decodeRunFully(json.RawMessage(`{`+watModule+`,"capabilities":{"random":{"seed":0}}}`), def, max)
	if err != nil || !spec.caps.Random || spec.caps.Seed != 0 {
		t.Errorf("seed 0: %+v, %v", spec, err)
	}
}

func TestDecodeRunValid(t *testing.T) {
	def, max := limits.Defaults(), limits.DefaultMaximums()

	t.Run("defaults", func(t *testing.T) {
		spec, err := decodeRunFully(json.RawMessage(`{"module":{"wat":"(module)"}}`), def, max)
		if err != nil {
			t.Fatal(err)
		}
		if spec.function != "run" || spec.args != nil || spec.limits != def ||
			spec.caps != (protocol.Capabilities{}) || spec.source.WAT != "(module)" {
			t.Errorf("spec = %+v", spec)
		}
	})
	t.Run("everything", func(t *testing.T) {
		params := `{"module":{"wasm":"AGFzbQEAAAA="},"function":"add","args":[1,"2",{"type":"i32","value":3}],
			"limits":{"fuel":1000,"timeoutMs":250,"memoryBytes":65536,"tableElements":5,"instances":2,"memories":3,"logBytes":100,
				"compileTimeoutMs":1500,"compileMemoryBytes":1048576},
			"capabilities":{"log":true,"clock":true,"random":{"seed":"18446744073709551615"}}}`
		spec, err := decodeRunFully(json.RawMessage(params), def, max)
		if err != nil {
			t.Fatal(err)
		}
		if string(spec.source.Wasm) != "\x00asm\x01\x00\x00\x00" {
			t.Errorf("wasm = %q", spec.source.Wasm)
		}
		if spec.function != "add" || len(spec.args) != 3 || string(spec.args[1]) != `"2"` {
			t.Errorf("function %q args %q", spec.function, spec.args)
		}
		want := limits.Limits{Fuel: 1000, Timeout: 250 * time.Millisecond, MemoryBytes: 65536,
			TableElements: 5, Instances: 2, Memories: 3, LogBytes: 100, OutputBytes: limits.DefaultOutputBytes,
			CompileTimeout: 1500 * time.Millisecond, CompileMemoryBytes: 1 << 20}
		if spec.limits != want {
			t.Errorf("limits = %+v, want %+v", spec.limits, want)
		}
		if !spec.caps.Log || !spec.caps.Clock || !spec.caps.Random || spec.caps.Seed != math.MaxUint64 {
			t.Errorf("caps = %+v", spec.caps)
		}
	})
	t.Run("partial limits keep defaults", func(t *testing.T) {
		spec, err := decodeRunFully(json.RawMessage(`{"module":{"id":"sha256:0000000000000000000000000000000000000000000000000000000000000000"},"limits":{"fuel":7}}`), def, max)
		if err != nil {
			t.Fatal(err)
		}
		want := def
		want.Fuel = 7
		if spec.limits != want || spec.source.ID != "sha256:0000000000000000000000000000000000000000000000000000000000000000" {
			t.Errorf("spec = %+v", spec)
		}
	})
	t.Run("limits at the maximum", func(t *testing.T) {
		var parts []string
		for _, f := range limits.Fields() {
			parts = append(parts, `"`+f.Name+`":`+uintString(f.Get(max)))
		}
		spec, err := decodeRunFully(json.RawMessage(`{"module":{"path":"a.wat"},"limits":{`+strings.Join(parts, ",")+`}}`), def, max)
		if err != nil {
			t.Fatal(err)
		}
		if spec.limits != max || spec.source.Path != "a.wat" {
			t.Errorf("limits = %+v, want %+v", spec.limits, max)
		}
	})
	t.Run("integral number forms", func(t *testing.T) {
		spec, err := decodeRunFully(json.RawMessage(`{"module":{"wat":"x"},"limits":{"fuel":1e3,"timeoutMs":5.0}}`), def, max)
		if err != nil {
			t.Fatal(err)
		}
		if spec.limits.Fuel != 1000 || spec.limits.Timeout != 5*time.Millisecond {
			t.Errorf("limits = %+v", spec.limits)
		}
	})
	for _, c := range []struct {
		seed string
		want uint64
	}{
		{`0`, 0},
		{`42`, 42},
		{`9007199254740993`, 1<<53 + 1}, // exact as a JSON number too
		{`"9007199254740993"`, 1<<53 + 1},
		{`"18446744073709551615"`, math.MaxUint64},
		{`18446744073709551615`, math.MaxUint64},
		{`"12345678901234567890"`, 12345678901234567890},
	} {
		spec, err := decodeRunFully(json.RawMessage(`{"module":{"wat":"x"},"capabilities":{"random":{"seed":`+c.seed+`}}}`), def, max)
		if err != nil {
			t.Errorf("seed %s: %v", c.seed, err)
			continue
		}
		if !spec.caps.Random || spec.caps.Seed != c.want {
			t.Errorf("seed %s: caps %+v, want seed %d", c.seed, spec.caps, c.want)
		}
	}
	t.Run("args null and empty", func(t *testing.T) {
		for _, a := range []string{`null`, `[]`} {
			spec, err := decodeRunFully(json.RawMessage(`{"module":{"wat":"x"},"args":`+a+`}`), def, max)
			if err != nil || len(spec.args) != 0 {
				t.Errorf("args %s: %+v, %v", a, spec, err)
			}
		}
	})
	t.Run("capabilities null and false", func(t *testing.T) {
		for _, c := range []string{`null`, `{}`, `{"log":false,"clock":false}`} {
			spec, err := decodeRunFully(json.RawMessage(`{"module":{"wat":"x"},"capabilities":`+c+`}`), def, max)
			if err != nil || spec.caps != (protocol.Capabilities{}) {
				t.Errorf("capabilities %s: %+v, %v", c, spec, err)
			}
		}
	})
}

func TestDecodeCompile(t *testing.T) {
	cases := moduleCases()
	cases = append(cases,
		paramCase{"function not allowed", `{` + watModule + `,"function":"run"}`, "function: unknown field"},
		paramCase{"params null", `null`, "params: must be an object, got null"},
		paramCase{"params array", `[]`, "params: must be an object, got an array"},
		paramCase{"run limit", `{` + watModule + `,"limits":{"compileTimeoutMs":100,"fuel":5}}`, "limits.fuel: does not apply to compile (only compileTimeoutMs, compileMemoryBytes do)"},
		paramCase{"unknown limit", `{` + watModule + `,"limits":{"compileTimeout":100}}`, "limits.compileTimeout: unknown field"},
		paramCase{"limits not an object", `{` + watModule + `,"limits":[]}`, "limits: must be an object, got an array"},
		paramCase{"zero compile timeout", `{` + watModule + `,"limits":{"compileTimeoutMs":0}}`, "limits.compileTimeoutMs: must be > 0"},
		paramCase{"preinitialize an id", `{"module":{"id":"sha256:abcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabca"},"preinitialize":true}`, "preinitialize: takes the module's bytes (module.wasm or module.path), not module.id"},
		paramCase{"compile memory past the maximum", `{` + watModule + `,"limits":{"compileMemoryBytes":4294967297}}`, "limits.compileMemoryBytes: must be <= 4294967296"},
	)
	def, max := limits.Defaults(), limits.DefaultMaximums()
	for _, c := range cases {
		src, err := decodeCompile(json.RawMessage(c.params), def, max)
		if err == nil {
			t.Errorf("%s: %s: decoded %+v, want error %q", c.name, c.params, src, c.want)
			continue
		}
		checkParamErr(t, c.name, c.params, err, c.want)
	}
	for _, c := range []struct {
		params string
		want   protocol.Source
	}{
		{`{"module":{"wat":"(module)"}}`, protocol.Source{WAT: "(module)"}},
		{`{"module":{"path":"/tmp/x.wasm"}}`, protocol.Source{Path: "/tmp/x.wasm"}},
		{`{"module":{"id":"sha256:abcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabca"}}`, protocol.Source{ID: "sha256:abcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabca"}},
		{` { "module" : { "wat" : "(module)" } } `, protocol.Source{WAT: "(module)"}},
	} {
		src, err := decodeCompile(json.RawMessage(c.params), def, max)
		if err != nil || src.WAT != c.want.WAT || src.Path != c.want.Path || src.ID != c.want.ID {
			t.Errorf("%s: %+v, %v", c.params, src, err)
		}
	}
	src, err := decodeCompile(json.RawMessage(`{"module":{"wasm":"AGFzbQEAAAA="}}`), def, max)
	if err != nil || string(src.Wasm) != "\x00asm\x01\x00\x00\x00" {
		t.Errorf("wasm: %q, %v", src.Wasm, err)
	}
	if src.CompileTimeout != def.CompileTimeout || src.CompileMemoryBytes != def.CompileMemoryBytes {
		t.Errorf("compile without limits: %v, %d; want the defaults", src.CompileTimeout, src.CompileMemoryBytes)
	}
	src, err = decodeCompile(json.RawMessage(`{"module":{"wat":"(module)"},"limits":{"compileTimeoutMs":250}}`), def, max)
	if err != nil || src.CompileTimeout != 250*time.Millisecond || src.CompileMemoryBytes != def.CompileMemoryBytes {
		t.Errorf("compile with compileTimeoutMs 250: %v, %d, %v", src.CompileTimeout, src.CompileMemoryBytes, err)
	}
}

func TestDecodeArgs(t *testing.T) {
	raw := []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`"2"`), json.RawMessage(`1.5`), json.RawMessage(`"NaN"`)}
	vals, err := decodeArgs(raw, []string{"i32", "i64", "f32", "f64"})
	if err != nil {
		t.Fatal(err)
	}
	want := []protocol.Value{protocol.ValueI32(1), protocol.ValueI64(2), protocol.ValueF32(1.5), {Type: protocol.F64, Bits: 0x7ff8000000000000}}
	for i := range want {
		if vals[i] != want[i] {
			t.Errorf("arg %d = %v, want %v", i, vals[i], want[i])
		}
	}
	// The message names the argument and what came.
	_, err = decodeArgs([]json.RawMessage{json.RawMessage(`1`), json.RawMessage(`true`)}, []string{"i32", "i64"})
	checkParamErr(t, "wrong type", "args", err, "args[1]: expected i64, got true")
	// A count mismatch is left to the engine: placeholders, no error.
	vals, err = decodeArgs([]json.RawMessage{json.RawMessage(`1`)}, []string{"i32", "i32"})
	if err != nil || len(vals) != 1 {
		t.Errorf("count mismatch: %v, %v", vals, err)
	}
}
