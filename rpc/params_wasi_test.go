package rpc

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// TestDecodeWASIGrantRefusedAtDecode: what wasmtime's WASI configuration
// would fail on (or the engine refuse after the module is compiled) is
// refused while the params are decoded, for run (a plugin's too) and
// instantiate alike, as -32602 naming the exact field.
func TestDecodeWASIGrantRefusedAtDecode(t *testing.T) {
	def, max := limits.Defaults(), limits.DefaultMaximums()
	name256 := "/" + strings.Repeat("n", 256)
	deep := strings.Repeat("/"+strings.Repeat("d", 200), 21)
	cases := []struct{ wasi, want string }{
		{`{"files":{"` + name256 + `":"x"}}`, `capabilities.wasi.files[` + protocol.Quote(name256) + `]: has a name of 256 bytes; at most 255 per name`},
		{`{"files":{"` + deep + `":"x"}}`, `capabilities.wasi.files[` + protocol.Quote(deep) + `]: is 4221 bytes long; at most 4096`},
		{`{"files":{"rel":"x"}}`, `capabilities.wasi.files["rel"]: must be an absolute, clean file path`},
		{`{"files":{"/a/../b":"x"}}`, `capabilities.wasi.files["/a/../b"]: must be an absolute, clean file path`},
		{`{"files":{"/x":"1","/x/y":"2"}}`, `capabilities.wasi.files["/x"]: is a file, so "/x/y" cannot be under it`},
		{`{"files":{"/a/x":"1"},"dirs":[{"host":"/h","guest":"/a"}]}`, `capabilities.wasi.files["/a/x"]: lies under capabilities.wasi.dirs[0]`},
		{`{"files":{"/x":"1"},"dirs":[{"host":"/h","guest":"/"}]}`, `capabilities.wasi.files: files live in a read-only tree preopened at "/", which capabilities.wasi.dirs[0] also claims`},
		{`{"args":["ok","a\u0000b"]}`, `capabilities.wasi.args[1]: must not contain a NUL byte`},
		{`{"env":{"K":"\u0000"}}`, `capabilities.wasi.env.K: must not contain a NUL byte`},
		{`{"env":{"K\u0000":"v"}}`, `capabilities.wasi.env.K\x00: must not contain a NUL byte`},
		{`{"env":{"A=B":"c"}}`, `capabilities.wasi.env: name "A=B" must be non-empty and contain no '='`},
		{`{"env":{"":"c"}}`, `capabilities.wasi.env: name "" must be non-empty`},
		{`{"dirs":[{"host":"","guest":"/a"}]}`, `capabilities.wasi.dirs[0].host: must not be empty`},
		{`{"dirs":[{"host":"/h\u0000","guest":"/a"}]}`, `capabilities.wasi.dirs[0].host: must not contain a NUL byte`},
		{`{"dirs":[{"host":"/h","guest":""}]}`, `capabilities.wasi.dirs[0].guest: must not be empty`},
		{`{"dirs":[{"host":"/h","guest":"/a\u0000"}]}`, `capabilities.wasi.dirs[0].guest: must not contain a NUL byte`},
		{`{"dirs":[{"host":"/h","guest":"/a"},{"host":"/i","guest":"/a"}]}`, `capabilities.wasi.dirs[1].guest: "/a" is already preopened by capabilities.wasi.dirs[0]`},
	}
	for _, c := range cases {
		caps := `"capabilities":{"wasi":` + c.wasi + `}`
		for _, d := range []struct {
			method string
			decode func(string) error
		}{
			{"run", func(p string) error { _, err := decodeRunFully(json.RawMessage(p), def, max); return err }},
			{"run (a plugin)", func(p string) error {
				_, err := decodeRunFully(json.RawMessage(strings.Replace(p, "{", `{"input":"x",`, 1)), def, max)
				return err
			}},
			{"instantiate", func(p string) error {
				_, err := decodeInstantiate(json.RawMessage(p), def, max, varLimits{protocol.DefaultVarBytes, protocol.MaxVarBytes})
				return err
			}},
		} {
			params := `{` + watModule + `,` + caps + `}`
			err := d.decode(params)
			checkParamErr(t, d.method, params, err, c.want)
		}
	}
	// At the bounds: accepted.
	ok := `{` + watModule + `,"capabilities":{"wasi":{"files":{"/` + strings.Repeat("n", 255) + `":"x","/` +
		strings.TrimPrefix(strings.Repeat("/"+strings.Repeat("d", 255), 16)[:4095], "/") + `":"y"}}}}`
	if _, err := decodeRunFully(json.RawMessage(ok), def, max); err != nil {
		t.Errorf("a 255-byte name and a 4,096-byte path: %v", err)
	}
}

// TestDecodeWASICountsBeforeDecoding: the entries of args, env, files and
// dirs are counted on the raw text, and past their bounds refused before
// any is decoded (60 MB of empty args took 3 GiB and a minute to be
// refused after they were all decoded).
func TestDecodeWASICountsBeforeDecoding(t *testing.T) {
	def, max := limits.Defaults(), limits.DefaultMaximums()
	many := func(n int, item string) string { return strings.TrimSuffix(strings.Repeat(item+",", n), ",") }
	for _, c := range []struct{ wasi, want string }{
		{`{"args":[` + many(protocol.MaxWASIArgs+1, `""`) + `]}`, "capabilities.wasi.args: has more than 65536 entries"},
		{`{"env":{` + many(protocol.MaxWASIEnv+1, `"":""`) + `}}`, "capabilities.wasi.env: has more than 4096 entries"},
		{`{"files":{` + many(protocol.MaxWASIFiles+1, `"/f":""`) + `}}`, "capabilities.wasi.files: has more than 65536 entries"},
		{`{"dirs":[` + many(protocol.MaxWASIDirs+1, `{}`) + `]}`, "capabilities.wasi.dirs: has more than 64 entries"},
	} {
		params := `{` + watModule + `,"capabilities":{"wasi":` + c.wasi + `}}`
		_, err := decodeRun(json.RawMessage(params), def, max)
		checkParamErr(t, "run", params[:60], err, c.want)
	}
}
