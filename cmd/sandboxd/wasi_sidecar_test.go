package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/internal/wasisuite"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

// wasiRunResult is the part of a run result a WASI run adds.
type wasiRunResult struct {
	ExitCode        *int            `json:"exitCode"`
	Stdout          json.RawMessage `json:"stdout"`
	Stderr          json.RawMessage `json:"stderr"`
	OutputTruncated bool            `json:"outputTruncated"`
}

type outputParams struct {
	ID     json.RawMessage `json:"id"`
	Seq    int             `json:"seq"`
	Stream string          `json:"stream"`
	Data   json.RawMessage `json:"data"`
}

// wireBytes decodes a bytes object, {"text"} or {"base64"}.
func wireBytes(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var b struct {
		Text   *string `json:"text"`
		Base64 *string `json:"base64"`
	}
	if err := json.Unmarshal(raw, &b); err != nil || (b.Text == nil) == (b.Base64 == nil) {
		t.Fatalf("not a bytes object: %s", raw)
	}
	if b.Text != nil {
		return *b.Text
	}
	out, err := base64.StdEncoding.DecodeString(*b.Base64)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// outputOf checks the output notifications of run id come before its
// response, with seq 0, 1, …, and returns what each stream received.
func outputOf(t *testing.T, msgs []*message, id string) map[string]string {
	t.Helper()
	got := map[string]string{}
	seq := 0
	for _, m := range msgs {
		if m.isResponse() && m.idKey() == id {
			return got
		}
		if m.Method != "output" {
			continue
		}
		var p outputParams
		if err := json.Unmarshal(m.Params, &p); err != nil {
			t.Fatal(err)
		}
		if string(p.ID) != id {
			continue
		}
		if p.Seq != seq {
			t.Errorf("output seq %d, want %d", p.Seq, seq)
		}
		seq++
		got[p.Stream] += wireBytes(t, p.Data)
	}
	t.Fatalf("no response for %s among the messages", id)
	return nil
}

func TestSidecarWASI(t *testing.T) {
	allowed := t.TempDir()
	s := startRaw(t, binPath, "--allow-dir", allowed)
	s.startReading()
	c := wasiGuest("guest_c.wasm")
	run := func(id string, wasi any, lim map[string]uint64, args ...string) (*message, []*message) {
		t.Helper()
		p := runParams(c, "", nil, lim, map[string]any{"wasi": wasi})
		if w, ok := wasi.(map[string]any); ok && args != nil {
			w["args"] = args
		}
		s.request(id, "run", p)
		return s.response(id, 60*time.Second)
	}
	result := func(m *message) wasiRunResult {
		t.Helper()
		if m.Error != nil {
			t.Fatalf("error: %s", m.raw)
		}
		var r wasiRunResult
		if err := json.Unmarshal(m.Result, &r); err != nil || r.ExitCode == nil {
			t.Fatalf("result %s", m.Result)
		}
		return r
	}

	t.Run("stdin, args, env; output streamed before the response", func(t *testing.T) {
		m, msgs := run(`"echo"`, map[string]any{"stdin": map[string]string{"base64": base64.StdEncoding.EncodeToString([]byte("hi\n"))}}, nil, "echo")
		r := result(m)
		out := outputOf(t, msgs, `"echo"`)
		if *r.ExitCode != 0 || wireBytes(t, r.Stdout) != "hi\n" || wireBytes(t, r.Stderr) != "3 bytes\n" || r.OutputTruncated {
			t.Errorf("result %s", m.Result)
		}
		if out["stdout"] != "hi\n" || out["stderr"] != "3 bytes\n" {
			t.Errorf("streamed %q", out)
		}
		m, _ = run(`"env"`, map[string]any{"env": map[string]string{"B": "2", "A": "1"}}, nil, "env")
		if r := result(m); wireBytes(t, r.Stdout) != "A=1\nB=2\n" {
			t.Errorf("env: %s", m.Result)
		}
		m, _ = run(`"str"`, map[string]any{"stdin": "plain string"}, nil, "echo")
		if r := result(m); wireBytes(t, r.Stdout) != "plain string" {
			t.Errorf("string stdin: %s", m.Result)
		}
	})
	t.Run("binary output is base64", func(t *testing.T) {
		m, _ := run(`"bin"`, map[string]any{"stdin": map[string]string{"base64": "/wA="}}, nil, "echo")
		r := result(m)
		if !strings.Contains(string(r.Stdout), `"base64"`) || wireBytes(t, r.Stdout) != "\xff\x00" {
			t.Errorf("stdout %s", r.Stdout)
		}
	})
	t.Run("exit code is a result", func(t *testing.T) {
		m, _ := run(`"exit"`, map[string]any{}, nil, "exit", "7")
		if r := result(m); *r.ExitCode != 7 {
			t.Errorf("result %s", m.Result)
		}
	})
	t.Run("true grants WASI; files and dirs", func(t *testing.T) {
		m, _ := run(`"true"`, true, nil)
		if r := result(m); *r.ExitCode != 2 { // no mode: usage, exit 2
			t.Errorf("result %s", m.Result)
		}
		m, _ = run(`"files"`, map[string]any{"files": map[string]any{"/in.txt": map[string]string{"text": "file\n"}}}, nil, "cat", "/in.txt")
		if r := result(m); wireBytes(t, r.Stdout) != "file\n" {
			t.Errorf("files: %s", m.Result)
		}
		m, _ = run(`"dir"`, map[string]any{"dirs": []any{map[string]any{"host": allowed, "guest": "/out", "writable": true}}}, nil, "write", "/out/w.txt", "ok")
		if r := result(m); wireBytes(t, r.Stdout) != "ok" {
			t.Errorf("dirs: %s", m.Result)
		}
		if b, err := os.ReadFile(filepath.Join(allowed, "w.txt")); err != nil || string(b) != "ok" {
			t.Errorf("host file %q %v", b, err)
		}
	})
	t.Run("bad grants are -32602 naming the field", func(t *testing.T) {
		outside := t.TempDir()
		for _, c := range []struct {
			id   string
			wasi any
			want string
		}{
			{`"d1"`, map[string]any{"dirs": []any{map[string]any{"host": outside, "guest": "/x"}}}, "capabilities.wasi.dirs[0].host: " + outside},
			{`"d2"`, map[string]any{"dirs": []any{map[string]any{"guest": "/x"}}}, "capabilities.wasi.dirs[0].host: required"},
			{`"a1"`, map[string]any{"args": []any{"ok", 3}}, "capabilities.wasi.args[1]: must be a string"},
			{`"e1"`, map[string]any{"env": map[string]any{"K": true}}, "capabilities.wasi.env.K: must be a string"},
			{`"s1"`, map[string]any{"stdin": map[string]any{"hex": "00"}}, "capabilities.wasi.stdin: must be"},
			{`"s2"`, map[string]any{"stdin": map[string]any{"base64": "!!"}}, "capabilities.wasi.stdin: base64"},
			{`"f1"`, map[string]any{"files": map[string]any{"rel": "x"}}, `capabilities.wasi.files["rel"]`},
			{`"k1"`, map[string]any{"sockets": true}, "capabilities.wasi.sockets: unknown field"},
			{`"w1"`, 3, "capabilities.wasi: must be true or an object"},
		} {
			m, _ := run(c.id, c.wasi, nil)
			if m.Error == nil || m.Error.Code != -32602 || !strings.HasPrefix(m.Error.Message, c.want) {
				t.Errorf("%v: %s", c.wasi, m.raw)
			}
		}
	})
	t.Run("refused without the grant, naming every WASI import", func(t *testing.T) {
		s.request(`"nogrant"`, "run", runParams(c, "", nil, nil, nil))
		m, _ := s.response(`"nogrant"`, 60*time.Second)
		if m.kind() != "disallowed_import" || !strings.Contains(m.Error.Message, "fd_write") || !strings.Contains(m.Error.Message, "proc_exit") {
			t.Errorf("%s", m.raw)
		}
		// The sidecar names the request's capability, not the CLI's flags.
		if !strings.Contains(m.Error.Message, "the wasi capability was not granted") || strings.Contains(m.Error.Message, "--") {
			t.Errorf("the refusal does not name the wasi capability in the protocol's words: %s", m.raw)
		}
	})
	t.Run("sleep past the deadline: timeout with the output so far", func(t *testing.T) {
		m, _ := run(`"sleep"`, map[string]any{}, map[string]uint64{"timeoutMs": 2000}, "tick", "1000", "100000")
		if m.kind() != "timeout" {
			t.Fatalf("%s", m.raw)
		}
		var d struct {
			Stdout json.RawMessage `json:"stdout"`
		}
		if err := json.Unmarshal(m.Error.Data, &d); err != nil || wireBytes(t, d.Stdout) != "tick 1\n" {
			t.Errorf("data %s", m.Error.Data)
		}
	})
	t.Run("initialize lists wasi", func(t *testing.T) {
		s.request(`"init"`, "initialize", map[string]any{})
		m, _ := s.response(`"init"`, 10*time.Second)
		var r struct {
			Capabilities struct {
				WASI []string `json:"wasi"`
			} `json:"capabilities"`
		}
		if err := json.Unmarshal(m.Result, &r); err != nil || len(r.Capabilities.WASI) != 46 {
			t.Errorf("%s", m.Result)
		}
	})
}

// TestSidecarWASITestsuite replays the official WASI test suite through
// `run` over the protocol: each program's args and env, a copy of its root
// preopened writable at "/" (under the sidecar's --allow-dir), and its
// expected exit code and (when given) stdout. The same suite runs through
// the engine in sandbox (TestWASITestsuite).
func TestSidecarWASITestsuite(t *testing.T) {
	cases := wasisuite.Cases(t, wasisuite.Dir(t))
	scratch := t.TempDir()
	s := startRaw(t, binPath, "--allow-dir", scratch)
	s.startReading()
	passed := 0
	for i, c := range cases {
		wasi := map[string]any{"args": append([]string{}, c.Spec.Args...), "env": c.Spec.Env}
		if root := c.Root(t, filepath.Join(scratch, fmt.Sprint(i))); root != "" {
			wasi["dirs"] = []any{map[string]any{"host": root, "guest": "/", "writable": true}}
		}
		id := fmt.Sprintf(`"suite-%d"`, i)
		s.request(id, "run", runParams(c.Wasm, "", nil, map[string]uint64{"memoryBytes": 256 << 20, "timeoutMs": 60000}, map[string]any{"wasi": wasi}))
		m, _ := s.response(id, 120*time.Second)
		if m.Error != nil {
			t.Errorf("%s: %s", c.Name, m.raw)
			continue
		}
		var r wasiRunResult
		if err := json.Unmarshal(m.Result, &r); err != nil || r.ExitCode == nil {
			t.Errorf("%s: %s", c.Name, m.Result)
			continue
		}
		if err := c.Check(*r.ExitCode, []byte(wireBytes(t, r.Stdout))); err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		passed++
	}
	t.Logf("%d of %d WASI testsuite programs passed over the protocol", passed, len(cases))
}

// The Go client sends capabilities.wasi and receives the output pieces
// before RunWith returns.
func TestGoClientWASI(t *testing.T) {
	c, _ := startClient(t, binPath)
	var pieces []string
	var streamed strings.Builder
	res, err := c.RunWith(ctxT(t, 60*time.Second), sandboxd.RunParams{
		Module:       rpc.ModuleSpec{Path: sandboxd.Str(wasiGuest("guest_c.wasm"))},
		Capabilities: &protocol.CapabilitySpec{WASI: &protocol.WASISpec{Args: []string{"echo"}, Stdin: protocol.Bytes("from Go\n")}},
	}, sandboxd.RunHandlers{Output: func(seq int, stream string, data []byte) {
		if seq != len(pieces) {
			t.Errorf("seq %d after %d pieces", seq, len(pieces))
		}
		pieces = append(pieces, stream)
		if stream == "stdout" {
			streamed.Write(data)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.WASIResult == nil || res.ExitCode != 0 || string(res.Stdout) != "from Go\n" || string(res.Stderr) != "8 bytes\n" {
		t.Fatalf("result %+v", res)
	}
	if streamed.String() != "from Go\n" || len(pieces) < 2 {
		t.Errorf("streamed %q in %v", streamed.String(), pieces)
	}
}
