package rpc

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// Red team, issue 14: the params of a run are read by walking the text
// screening checked (fastjson.go) instead of by encoding/json. The
// documented protocol is what encoding/json reads (exact member names,
// the last of a repeated member counts, escapes and invalid UTF-8 as
// encoding/json decodes them). FuzzRedteamDecodeRunDifferential compares
// the whole of decodeScreenedRun with an oracle that reads every level
// with encoding/json, field by field as the decoder did before the walker
// (81282c9^), on every valid JSON input: the same spec, or the same
// error.

// oracleDecodeRun reads run params with encoding/json at every level.
func oracleDecodeRun(raw json.RawMessage, defaults, max limits.Limits) (*runSpec, error) {
	obj, err := object(raw, "params", runFields...)
	if err != nil {
		return nil, err
	}
	spec := &runSpec{function: "run", defaultFunction: true}
	if err := decodePluginRun(obj, spec); err != nil {
		return nil, err
	}
	m, ok := obj["module"]
	if !ok {
		return nil, paramErr("module", "required: one of {wat}, {wasm}, {id}, {path}")
	}
	if spec.source, err = oracleDecodeModule(m, "module"); err != nil {
		return nil, err
	}
	if v, ok := obj["function"]; ok {
		spec.defaultFunction = false
		if spec.function, err = stringField(v, "function"); err != nil {
			return nil, err
		}
		if spec.function == "" {
			return nil, paramErr("function", "must not be empty")
		}
	}
	if v, ok := obj["args"]; ok {
		v = bytes.TrimSpace(v)
		if len(v) == 0 || (v[0] != '[' && string(v) != "null") {
			return nil, paramErr("args", "must be an array, got %s", kindOfJSON(v))
		}
		if n, ok := countElements(v, MaxArgs); !ok {
			return nil, paramErr("args", "has more than %d elements: no wasm function takes more than %d parameters", n-1, MaxArgs)
		}
		if err := json.Unmarshal(v, &spec.args); err != nil {
			return nil, paramErr("args", "must be an array: %v", err)
		}
	}
	if spec.limits, err = oracleDecodeLimits(obj["limits"], defaults, max); err != nil {
		return nil, err
	}
	spec.source.CompileTimeout, spec.source.CompileMemoryBytes = spec.limits.CompileTimeout, spec.limits.CompileMemoryBytes
	if spec.caps, err = oracleDecodeCapabilities(obj["capabilities"]); err != nil {
		return nil, err
	}
	return spec, nil
}

func oracleDecodeModule(raw json.RawMessage, field string) (protocol.Source, error) {
	obj, err := object(raw, field, "wat", "wasm", "id", "path")
	if err != nil {
		return protocol.Source{}, err
	}
	if len(obj) != 1 {
		return protocol.Source{}, paramErr(field, "give exactly one of wat, wasm, id, path (got %d)", len(obj))
	}
	var src protocol.Source
	for k, v := range obj {
		var s string
		if b := bytes.TrimSpace(v); len(b) == 0 || b[0] != '"' || json.Unmarshal(b, &s) != nil {
			return src, paramErr(join(field, k), "must be a string, got %s", kindOfJSON(b))
		}
		if s == "" {
			return src, paramErr(join(field, k), "must not be empty")
		}
		switch k {
		case "wat":
			src.WAT = s
		case "wasm":
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return src, paramErr(join(field, k), "not valid base64: %v", err)
			}
			src.Wasm = b
		case "id":
			if !strings.HasPrefix(s, protocol.IDPrefix) {
				return src, paramErr(join(field, k), "must look like %s<hex>, got %q", protocol.IDPrefix, truncate(s, 80))
			}
			src.ID = s
		case "path":
			src.Path = s
		}
	}
	return src, nil
}

func oracleDecodeLimits(raw json.RawMessage, defaults, max limits.Limits) (limits.Limits, error) {
	l := defaults
	if raw == nil {
		return l, nil
	}
	obj, err := object(raw, "limits", limitNames...)
	if err != nil {
		return l, err
	}
	for _, f := range limits.Fields {
		v, ok := obj[f.Name]
		if !ok {
			continue
		}
		n, err := oracleUint(v, "limits."+f.Name, false, true)
		if err != nil {
			return l, err
		}
		if n == 0 {
			return l, paramErr("limits."+f.Name, "must be > 0")
		}
		if f.Name == "timeoutMs" && n > uint64(1<<63-1)/1_000_000 {
			return l, paramErr("limits.timeoutMs", "must be <= %d (the sidecar's maximum)", f.Get(max))
		}
		f.Set(&l, n)
	}
	if err := l.Validate(max); err != nil {
		var fe *limits.FieldError
		if errors.As(err, &fe) {
			return l, paramErr("limits."+fe.Field, "%s", fe.Problem)
		}
		return l, paramErr("limits", "%v", err)
	}
	return l, nil
}

// oracleUint is uintField without its plain-digits fast path: every
// literal goes through protocol.ExactInteger.
func oracleUint(raw json.RawMessage, field string, allowString, positive bool) (uint64, error) {
	raw = bytes.TrimSpace(raw)
	lit := string(raw)
	if allowString && len(raw) > 0 && raw[0] == '"' {
		if err := json.Unmarshal(raw, &lit); err != nil {
			return 0, paramErr(field, "must be an integer")
		}
	} else if len(raw) == 0 || !(raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')) {
		return 0, paramErr(field, "must be an integer, got %s", kindOfJSON(raw))
	}
	if len(lit) > 400 {
		return 0, paramErr(field, "must be an integer that fits in 64 bits")
	}
	n, ok := protocol.ExactInteger(lit)
	if !ok {
		return 0, paramErr(field, "must be an integer, got %s", lit)
	}
	if n.Sign() < 0 {
		if positive {
			return 0, paramErr(field, "must be > 0, got %s", lit)
		}
		return 0, paramErr(field, "must be >= 0, got %s", lit)
	}
	if !n.IsUint64() {
		return 0, paramErr(field, "must be at most %d", uint64(1<<64-1))
	}
	return n.Uint64(), nil
}

func oracleDecodeCapabilities(raw json.RawMessage) (protocol.Capabilities, error) {
	var caps protocol.Capabilities
	if raw == nil || string(bytes.TrimSpace(raw)) == "null" {
		return caps, nil
	}
	obj, err := object(raw, "capabilities", "log", "random", "clock", "wasi")
	if err != nil {
		return caps, err
	}
	if v, ok := obj["wasi"]; ok {
		if caps.WASI, err = decodeWASI(v); err != nil {
			return caps, err
		}
	}
	if v, ok := obj["log"]; ok {
		if caps.Log, err = boolField(v, "capabilities.log"); err != nil {
			return caps, err
		}
	}
	if v, ok := obj["clock"]; ok {
		if caps.Clock, err = boolField(v, "capabilities.clock"); err != nil {
			return caps, err
		}
	}
	if v, ok := obj["random"]; ok {
		r, err := object(v, "capabilities.random", "seed")
		if err != nil {
			return caps, err
		}
		seed, ok := r["seed"]
		if !ok {
			return caps, paramErr("capabilities.random.seed", "required (an integer 0..2^64-1 or a decimal string)")
		}
		if caps.Seed, err = oracleUint(seed, "capabilities.random.seed", true, false); err != nil {
			return caps, err
		}
		caps.Random = true
	}
	return caps, nil
}

// specSummary renders what a decoded run means, args as the values
// encoding/json reads from them (so `1` and ` 1` compare equal, `1` and
// `1.0` do not: DecodeArg reads the text).
func specSummary(t *testing.T, s *runSpec) string {
	args := make([]string, len(s.args))
	for i, a := range s.args {
		if !json.Valid(a) {
			t.Fatalf("arg %d is not a JSON value: %q", i, a)
		}
		var c bytes.Buffer
		if err := json.Compact(&c, a); err != nil {
			t.Fatal(err)
		}
		args[i] = c.String()
	}
	caps := s.caps
	caps.WASI = nil // printed by value below
	return fmt.Sprintf("src=%+v function=%q default=%v args=%q limits=%+v caps=%+v wasi=%+v input=%q (nil %v) config=%v",
		s.source, s.function, s.defaultFunction, args, s.limits, caps, s.caps.WASI, s.input, s.input == nil, s.config)
}

// redteamDecodeSeeds are the inputs the brief names: duplicate members,
// escaped and case-variant names, nesting in unexpected places, numbers
// in every spelling, strings with every escape, invalid UTF-8, surrogate
// halves, NUL, deep nesting and whitespace.
var redteamDecodeSeeds = []string{
	`{"module":{"wat":"(module)"}}`,
	`{"module":{"wat":"a"},"module":{"id":"sha256:00"}}`,
	`{"module":{"wat":"a","wat":"b"}}`,
	`{"module":{"wat":"a","wasm":"AGFzbQEAAAA="}}`,
	`{"module":{"\u0077at":"(module)"},"\u0066unction":"f"}`,
	`{"module":{"Wat":"(module)"}}`,
	`{"Module":{"wat":"(module)"}}`,
	`{"module":{"wat":"x"},"limits":{"Fuel":1}}`,
	`{"module":{"wat":"x"},"limits":{"\u0066uel":7,"fuel":8}}`,
	`{"module":{"wat":"x"},"limits":{"fuel":8,"\u0066uel":7}}`,
	`{"module":{"wat":"x"},"limits":{"fuel":1e3}}`,
	`{"module":{"wat":"x"},"limits":{"fuel":1E+3}}`,
	`{"module":{"wat":"x"},"limits":{"fuel":-0}}`,
	`{"module":{"wat":"x"},"limits":{"fuel":1.0}}`,
	`{"module":{"wat":"x"},"limits":{"fuel":1.5}}`,
	`{"module":{"wat":"x"},"limits":{"fuel":1e999999999}}`,
	`{"module":{"wat":"x"},"limits":{"fuel":1e-999999999}}`,
	`{"module":{"wat":"x"},"limits":{"fuel":18446744073709551616}}`,
	`{"module":{"wat":"x"},"limits":{"fuel":18446744073709551615}}`,
	`{"module":{"wat":"x"},"limits":{"fuel":9999999999999999999}}`,
	`{"module":{"wat":"x"},"limits":{"fuel":0.00000000000000000001e20}}`,
	`{"module":{"wat":"x"},"limits":{"fuel":"5"}}`,
	`{"module":{"wat":"x"},"limits":{"fuel":{"fuel":5}}}`,
	`{"module":{"wat":"x"},"limits":{"fuel":[5]}}`,
	`{"module":{"wat":"x"},"limits":{"fuel":null}}`,
	`{"module":{"wat":"x"},"limits":null}`,
	`{"module":{"wat":"x"},"limits":[]}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":"18446744073709551615"}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":"\u0031\u0032"}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":"012"}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":" 12"}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":"NaN"}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":1e19}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":00}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":5,"seed":6}}}`,
	`{"module":{"wat":"x"},"capabilities":{"log":true,"log":false}}`,
	`{"module":{"wat":"x"},"capabilities":{"log":"true"}}`,
	`{"module":{"wat":"x"},"capabilities":{"wasi":true,"wasi":false}}`,
	`{"module":{"wat":"x"},"capabilities":{"wasi":{"args":["a\u0000b","\ud800"],"env":{"K":"v","K":"w"}}}}`,
	`{"module":{"wat":"x"},"function":"\ud83d\ude00"}`,
	`{"module":{"wat":"x"},"function":"\ud83d"}`,
	`{"module":{"wat":"x"},"function":"\ude00\ud83d"}`,
	`{"module":{"wat":"x"},"function":"\u0000"}`,
	"{\"module\":{\"wat\":\"x\"},\"function\":\"\xff\xfe\"}",
	"{\"module\":{\"wat\":\"x\"},\"function\":\"\xed\xa0\x80\"}",
	"{\"module\":{\"wat\":\"x\"},\"function\":\"\xef\xbb\xbfrun\"}",
	"{\"mod\xffule\":{\"wat\":\"x\"}}",
	`{"module":{"wat":"x"},"function":""}`,
	`{"module":{"wat":"x"},"function":null}`,
	`{"module":{"wat":"x"},"function":["run"]}`,
	`{"module":{"wasm":"AGFz\/bQ=="}}`,
	`{"module":{"wasm":"AGFz\nbQEAAAA="}}`,
	`{"module":{"wasm":"\r\n"}}`,
	`{"module":{"wasm":"AGFzbQEAAAA"}}`,
	`{"module":{"wasm":"AGFzbQEAAAA=\u0000"}}`,
	"{\"module\":{\"wasm\":\"AGFz\xffbQEAAAA=\"}}",
	`{"module":{"wasm":""}}`,
	`{"module":{"wasm":null}}`,
	`{"module":{"id":"sha256:abc","id":"nope"}}`,
	`{"module":{"id":"\u0073ha256:abc"}}`,
	`{"module":{"path":"/tmp/x\u0000y"}}`,
	`{"module":{}}`,
	`{"module":[]}`,
	`{"module":null}`,
	`{"module":"(module)"}`,
	`{"module":{"wat":"x"},"args":[1,"2",{"type":"i32","value":3},[4],null,true,-0,1e3,1.0]}`,
	`{"module":{"wat":"x"},"args":[ 1 , 2 ]}`,
	`{"module":{"wat":"x"},"args":[]}`,
	`{"module":{"wat":"x"},"args":null}`,
	`{"module":{"wat":"x"},"args":{}}`,
	`{"module":{"wat":"x"},"args":"[]"}`,
	`{"module":{"wat":"x"},"args":[1],"args":[2,3]}`,
	`{"module":{"wat":"x"},"args":[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]}`,
	`{"module":{"wat":"x"},"args":["\\",{"\"":"]"},"\"]"]}`,
	"\t{ \"module\" :\n{\r\"wat\" : \"x\" } , \"args\" : [ ] }\n",
	`{"module":{"wat":"x"},"input":"aGk=","config":{"a":"b","a":"c"}}`,
	`{"module":{"wat":"x"},"input":{"text":"hi"},"config":null}`,
	`{"module":{"wat":"x"},"":1}`,
	`{"module":{"wat":"x"},"unknown":1,"other":2}`,
	`{}`,
}

func FuzzRedteamDecodeRunDifferential(f *testing.F) {
	for _, s := range redteamDecodeSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"module":{"wat":"x"},"args":[` + strings.Repeat("1,", 999) + `1]}`))
	f.Add([]byte(`{"module":{"wat":"x"},"args":[` + strings.Repeat("1,", 1000) + `1]}`))
	f.Add([]byte(`{"module":{"wat":"x"},"args":[` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `]}`))
	def, max := limits.Defaults(), limits.DefaultMaximums()
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return // screening answers -32700 before any decoding
		}
		got, gotErr := decodeScreenedRun(data, def, max)
		// The oracle iterates maps: with several problems its message
		// depends on the order; any it can give is acceptable.
		var wantErrs []string
		var want *runSpec
		for range 8 {
			w, err := oracleDecodeRun(data, def, max)
			if err == nil {
				want = w
				break
			}
			if !contains(wantErrs, err.Error()) {
				wantErrs = append(wantErrs, err.Error())
			}
		}
		switch {
		case gotErr != nil && want != nil:
			t.Fatalf("%q: the walker refuses it (%v), encoding/json reads %s", data, gotErr, specSummary(t, want))
		case gotErr == nil && want == nil:
			t.Fatalf("%q: the walker accepts it (%s), encoding/json refuses it: %q", data, specSummary(t, got), wantErrs)
		case gotErr != nil:
			if !contains(wantErrs, gotErr.Error()) {
				// Several unknown members: either may be named first.
				var pe *ParamError
				if !errors.As(gotErr, &pe) || !strings.Contains(gotErr.Error(), "unknown field") {
					t.Fatalf("%q: the walker says %q, encoding/json says %q", data, gotErr, wantErrs)
				}
			}
		default:
			if g, w := specSummary(t, got), specSummary(t, want); g != w {
				t.Fatalf("%q:\nwalker:        %s\nencoding/json: %s", data, g, w)
			}
			if !reflect.DeepEqual(got.source.Wasm, want.source.Wasm) {
				t.Fatalf("%q: wasm %x vs %x", data, got.source.Wasm, want.source.Wasm)
			}
		}
	})
}
