package rpc

// The fuzz targets of run params: any bytes never panic the decoders,
// and on valid JSON the decoder agrees with the oracle (oracle_test.go),
// for run and for compile and instantiate, which share run's members.
// Seed corpora live in testdata/fuzz/<FuzzName>/ too; `go test` runs them.

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// FuzzDecodeRun: arbitrary params never panic decodeRun or decodeCompile
// (what is not valid JSON never reaches them: screening answers it);
// errors are *ParamError; accepted limits are within the maximums.
func FuzzDecodeRun(f *testing.F) {
	f.Add([]byte(`{"module":{"wat":"(module)"}}`))
	def, max := limits.Defaults(), limits.DefaultMaximums()
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := decodeRunFully(json.RawMessage(data), def, max)
		if err != nil {
			var pe *ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("decodeRun error %T %v is not a *ParamError", err, err)
			}
		} else {
			if spec.function == "" {
				t.Fatalf("empty function")
			}
			if err := spec.limits.Validate(max); err != nil {
				t.Fatalf("accepted limits %+v: %v", spec.limits, err)
			}
			n := 0
			s := spec.source
			for _, set := range []bool{s.WAT != "", s.Wasm != nil, s.ID != "", s.Path != ""} {
				if set {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("source %+v has %d fields set", s, n)
			}
		}
		var src protocol.Source
		err = screenedParams(data)
		if err == nil {
			src, err = decodeCompile(json.RawMessage(data), def, max)
		}
		if err != nil {
			var pe *ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("decodeCompile error %T %v is not a *ParamError", err, err)
			}
		} else if src.CompileTimeout <= 0 || src.CompileTimeout > max.CompileTimeout || src.CompileMemoryBytes == 0 || src.CompileMemoryBytes > max.CompileMemoryBytes {
			t.Fatalf("accepted compile limits %v, %d", src.CompileTimeout, src.CompileMemoryBytes)
		}
	})
}

// decodeRunSeeds are the inputs the brief names: duplicate members,
// escaped and case-variant names, nesting in unexpected places, numbers
// in every spelling, strings with every escape, invalid UTF-8, surrogate
// halves, NUL, deep nesting and whitespace.
var decodeRunSeeds = []string{
	`{"module":{"wat":"(module)"}}`,
	`{"module":{"wat":"a"},"module":{"id":"sha256:0000000000000000000000000000000000000000000000000000000000000000"}}`,
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
	`{"module":{"wat":"x"},"limits":{"fuel":5,"fuel":null}}`,
	`{"module":{"wat":"x"},"limits":{"fuel":null,"fuel":5}}`,
	`{"module":{"wat":"x","wat":null,"path":"p"}}`,
	`{"module":{"wat":"x"},"limits":[]}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":"18446744073709551615"}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":"\u0031\u0032"}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":"012"}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":" 12"}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":"NaN"}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":1e19}}}`,
	// Found by the oracle built from encoding/json alone (the old one
	// shared the decoder's number parsing): a seed string was read as any
	// float big.ParseFloat takes, binary exponents included ("1p3" was 8),
	// and a 0 with an exponent past int64 was refused.
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":"1p3"}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":"1e3"}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":".5e1"}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":"5."}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":"+12"}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":"-0"}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":"Inf"}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":0e99999999999999999999}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":0.0e-99999999999999999999}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":1e-99999999999999999999}}}`,
	`{"module":{"wat":"x"},"limits":{"fuel":1e99999999999999999999}}`,
	`{"module":{"wat":"x"},"limits":{"fuel":100e-2}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":00}}}`,
	`{"module":{"wat":"x"},"capabilities":{"random":{"seed":5,"seed":6}}}`,
	`{"module":{"wat":"x"},"capabilities":{"log":true,"log":false}}`,
	`{"module":{"wat":"x"},"capabilities":{"log":"true"}}`,
	`{"module":{"wat":"x"},"capabilities":{"wasi":true,"wasi":false}}`,
	`{"module":{"wat":"x"},"capabilities":{"wasi":{"args":["a\u0000b","\ud800"],"env":{"K":"v","K":"w"}}}}`,
	`{"module":{"wat":"x"},"capabilities":{"wasi":{"args":["a","b"],"env":{"K":"v","K":"w"},"stdin":{"text":"x","text":"y"},"files":{"/a":"1","/a":{"base64":"AA=="}},"dirs":[{"host":"/h","guest":"/g","writable":null}]}}}`,
	`{"module":{"wat":"x"},"capabilities":{"wasi":{"dirs":[{"host":"/h","guest":"/g","mode":"rw"}]}}}`,
	`{"module":{"wat":"x"},"capabilities":{"wasi":{"sockets":true,"args":null}}}`,
	`{"module":{"wat":"x"},"capabilities":{"wasi":{"files":{"/d/x":"1"},"dirs":[{"host":"/h","guest":"/d/"}]}}}`,
	`{"module":{"wat":"x"},"capabilities":{"wasi":{"env":{"A=B":"1"},"dirs":[{"host":"","guest":"/g"},{"host":"/h","guest":"/g"}]}}}`,
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
	`{"module":{"id":"sha256:abcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabca","id":"nope"}}`,
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
	// compile's limits (only the compile ones, a run limit named even
	// given null) and instantiate's (varBytes, config)
	`{"module":{"wat":"x"},"limits":{"fuel":null}}`,
	`{"module":{"wat":"x"},"limits":{"compileTimeoutMs":5,"bogus":1,"fuel":2}}`,
	`{"module":{"wat":"x"},"limits":{"compileTimeoutMs":5,"compileMemoryBytes":1e6}}`,
	`{"module":{"wat":"x"},"limits":{"varBytes":5,"fuel":3},"config":{"a":"b"}}`,
	`{"module":{"wat":"x"},"limits":{"varBytes":0}}`,
	`{"module":{"wat":"x"},"limits":{"varBytes":67108865}}`,
	`{"module":{"wat":"x"},"config":null,"capabilities":{"log":true}}`,
	// Issue 26: a field path shows the parent's names escaped and cut
	// (docs/protocol.md, What messages quote); the oracle expected them
	// raw and stopped at the first control character.
	"{\"\x7f\":{}}",
	"{\"\b\":{}}",
	`{"module":{"\u007f":{}}}`,
	`{"module":{"wat":"x"},"config":{"\u001b[31m":1}}`,
	`{"module":{"wat":"x"},"capabilities":{"wasi":{"env":{"\u001b":1}}}}`,
	`{"module":{"wat":"x"},"capabilities":{"wasi":{"env":{"K\u0000":"v"}}}}`,
	`{"module":{"wat":"x"},"capabilities":{"wasi":{"env":{"` + strings.Repeat("é", 40) + `":1}}}}`,
	`{"module":{"wat":"x"},"limits":{"` + strings.Repeat("x", 63) + `é":1}}`,
	`{"module":{"wat":"x"},"` + strings.Repeat("\u202e", 30) + `":1}`,
	`{"module":{"wat":"x"},"unknown":1,"other":2}`,
	`{}`,
	// Issue 20: hostFunctions and hostCall.
	`{"module":{"wat":"x"},"hostFunctions":[{"module":"env","name":"f","params":["i64","bytes"],"results":["i32"]}],"hostCall":"sbx-1"}`,
	`{"module":{"wat":"x"},"hostFunctions":[{"module":"env","name":"f"},{"module":"env","name":"f","params":null}]}`,
	`{"module":{"wat":"x"},"hostFunctions":[{"module":"host","name":"log"}]}`,
	`{"module":{"wat":"x"},"hostFunctions":[{"module":"env","name":"f","params":["i128"],"results":[1]}]}`,
	`{"module":{"wat":"x"},"hostFunctions":[{"module":"","name":"f\u0000","mode":1}]}`,
	`{"module":{"wat":"x"},"hostFunctions":[null,[],{"name":"f"}],"hostCall":"sbx-"}`,
	`{"module":{"wat":"x"},"hostFunctions":{},"hostCall":1}`,
	`{"module":{"wat":"x"},"hostFunctions":null,"hostCall":null}`,
	`{"module":{"wat":"x"},"hostCall":"sbx-123456789012345678901"}`,
	`{"module":{"wat":"x"},"hostCall":"\u0073bx-1"}`,
}

func FuzzDecodeRunDifferential(f *testing.F) {
	for _, s := range decodeRunSeeds {
		f.Add([]byte(s))
	}
	// compile's preinitialize (the oracle did not know it: every seed
	// with it failed the target before).
	f.Add([]byte(`{"module":{"wasm":"AGFzbQEAAAA="},"preinitialize":true}`))
	f.Add([]byte(`{"module":{"id":"sha256:abcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabca"},"preinitialize":true}`))
	f.Add([]byte(`{"module":{"id":"sha256:abcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabca"},"preinitialize":null}`))
	f.Add([]byte(`{"module":{"wat":"x"},"preinitialize":"yes"}`))
	f.Add([]byte(`{"module":{"wat":"x"},"args":[` + strings.Repeat("1,", 999) + `1]}`))
	f.Add([]byte(`{"module":{"wat":"x"},"args":[` + strings.Repeat("1,", 1000) + `1]}`))
	f.Add([]byte(`{"module":{"wat":"x"},"args":[` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `]}`))
	def, max := limits.Defaults(), limits.DefaultMaximums()
	vars := varLimits{protocol.DefaultVarBytes, protocol.MaxVarBytes}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return // screening answers -32700 before any decoding
		}
		got, gotErr := decodeRun(data, def, max)
		if gotErr == nil { // a wat or wasm left encoded, decoded as the server does on a miss
			if gotErr = decodeEncoded(&got.source); gotErr != nil {
				got = nil
			}
		}
		want, wantArgs, faults := oracleDecodeRun(data, def, max)
		agree(t, data, "run", gotErr, want != nil, faults,
			func() string { return specSummary(got, decodedArgs(t, got)) }, func() string { return specSummary(want, wantArgs) })

		// The same bytes as compile's and instantiate's params, which share
		// run's members.
		src, gotErr := decodeCompile(data, def, max)
		wantSrc, faults := oracleDecodeCompile(data, def, max)
		agree(t, data, "compile", gotErr, wantSrc != nil, faults,
			func() string { return fmt.Sprintf("%+v", src) }, func() string { return fmt.Sprintf("%+v", *wantSrc) })
		inst, gotErr := decodeInstantiate(data, def, max, vars)
		wantInst, faults := oracleDecodeInstantiate(data, def, max, vars)
		agree(t, data, "instantiate", gotErr, wantInst != nil, faults,
			func() string { return instantiateSummary(inst) }, func() string { return instantiateSummary(wantInst) })
	})
}

// agree fails the test unless the decoder and the oracle agree on data as
// a method's params: both accept it with the same meaning (got and want
// render it), or both refuse it, the decoder naming a field the oracle
// finds at fault.
func agree(t *testing.T, data []byte, method string, gotErr error, wantOK bool, faults []string, got, want func() string) {
	t.Helper()
	var pe *ParamError
	switch {
	case gotErr != nil && !errors.As(gotErr, &pe):
		t.Fatalf("%s %q: not a params error: %v", method, data, gotErr)
	case gotErr != nil && wantOK:
		t.Fatalf("%s %q: the decoder refuses it (%v), the protocol reads %s", method, data, gotErr, want())
	case gotErr == nil && !wantOK:
		t.Fatalf("%s %q: the decoder accepts it (%s), the protocol refuses %q", method, data, got(), faults)
	case gotErr != nil:
		if !slices.Contains(faults, pe.Field) {
			t.Fatalf("%s %q: the decoder names %q (%v), the protocol faults %q", method, data, pe.Field, gotErr, faults)
		}
	default:
		if g, w := got(), want(); g != w {
			t.Fatalf("%s %q:\ndecoder:  %s\nprotocol: %s", method, data, g, w)
		}
	}
}
