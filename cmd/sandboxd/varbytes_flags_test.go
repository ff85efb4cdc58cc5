package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
)

// initializeVarBytes is initialize's limits.defaults.varBytes and
// limits.maximums.varBytes.
func initializeVarBytes(t *testing.T, s *rawSidecar, id string) (def, max uint64) {
	t.Helper()
	s.request(id, "initialize", map[string]any{})
	m, _ := s.response(id, time.Minute)
	var res protocol.InitializeResult
	if m.Error != nil || json.Unmarshal(m.Result, &res) != nil {
		t.Fatalf("initialize: %s", m.raw)
	}
	return res.Limits.Defaults["varBytes"], res.Limits.Maximums["varBytes"]
}

// TestServeVarBytes: initialize reports varBytes's default and maximum
// with the other limits' (1 MiB and 64 MiB unless set), and
// --default-var-bytes / --max-var-bytes set them: an instantiate or a
// plugin run that sets none gets the default, one past the maximum is
// refused naming it.
func TestServeVarBytes(t *testing.T) {
	t.Parallel()
	if def, max := initializeVarBytes(t, startRawReading(t, "--framing=ndjson"), `"init"`); def != 1<<20 || max != 64<<20 {
		t.Errorf("initialize of a default sidecar: varBytes default %d, maximum %d; want 1048576, 67108864", def, max)
	}

	s := startRawReading(t, "--framing=ndjson", "--default-var-bytes", "8", "--max-var-bytes", "4096")
	if def, max := initializeVarBytes(t, s, `"init"`); def != 8 || max != 4096 {
		t.Errorf("initialize with --default-var-bytes 8 --max-var-bytes 4096: default %d, maximum %d", def, max)
	}
	plugin := map[string]string{"path": pluginPath(t, "wat/plugin.wat")}
	caps := map[string]any{"log": true}
	// The count var (a 1-byte key, an 8-byte value and the per-var charge)
	// does not fit 8 bytes.
	s.request(`"i"`, "instantiate", map[string]any{"module": plugin, "capabilities": caps, "limits": hangLimits(nil)})
	m, _ := s.response(`"i"`, time.Minute)
	var inst protocol.InstantiateResult
	if m.Error != nil || json.Unmarshal(m.Result, &inst) != nil {
		t.Fatalf("instantiate: %s", m.raw)
	}
	s.request(`"c"`, "call", map[string]any{"instance": inst.Instance, "function": "count"})
	if m, _ := s.response(`"c"`, time.Minute); m.Error == nil || errData(t, m)["resource"] != "vars" || errData(t, m)["limit"] != 8.0 {
		t.Errorf("a call under the default varBytes 8: %s", m.raw)
	}
	s.request(`"r"`, "run", map[string]any{"module": plugin, "function": "count", "input": "", "capabilities": caps, "limits": hangLimits(nil)})
	if m, _ := s.response(`"r"`, time.Minute); m.Error == nil || errData(t, m)["resource"] != "vars" || errData(t, m)["limit"] != 8.0 {
		t.Errorf("a plugin run under the default varBytes 8: %s", m.raw)
	}
	s.request(`"i2"`, "instantiate", map[string]any{"module": plugin, "capabilities": caps, "limits": hangLimits(map[string]uint64{"varBytes": 4097})})
	if m, _ := s.response(`"i2"`, time.Minute); m.Error == nil || m.Error.Code != protocol.CodeInvalidParams ||
		m.Error.Message != "limits.varBytes: must be in [1, 4096], got 4097" {
		t.Errorf("varBytes past --max-var-bytes: %s", m.raw)
	}
	s.request(`"i3"`, "instantiate", map[string]any{"module": plugin, "capabilities": caps, "limits": hangLimits(map[string]uint64{"varBytes": 4096})})
	m, _ = s.response(`"i3"`, time.Minute)
	if m.Error != nil || json.Unmarshal(m.Result, &inst) != nil {
		t.Fatalf("instantiate with varBytes 4096: %s", m.raw)
	}
	s.request(`"c3"`, "call", map[string]any{"instance": inst.Instance, "function": "count"})
	if m, _ := s.response(`"c3"`, time.Minute); m.Error != nil {
		t.Errorf("a call under varBytes 4096: %s", m.raw)
	}
}

// TestServeVarBytesFlags: the flags are validated as the other limits'
// --default-*/--max-* are, and documented in --help.
func TestServeVarBytesFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--default-var-bytes", "0"}, "sandboxd: default-varBytes: must be > 0\n"},
		{[]string{"--max-var-bytes", "0"}, "sandboxd: max-varBytes: must be > 0\n"},
		{[]string{"--max-var-bytes", "67108865"}, "sandboxd: max-varBytes: must be <= 67108864 (the sidecar's maximum)\n"},
		{[]string{"--max-var-bytes", "100", "--default-var-bytes", "200"}, "sandboxd: default-varBytes: must be <= 100 (the sidecar's maximum)\n"},
		{[]string{"--default-var-bytes", "x"}, "invalid value"},
	} {
		var stderr strings.Builder
		code := serveMain(c.args, strings.NewReader(""), &strings.Builder{}, &stderr)
		if code != exitServeNoShutdown || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want %q", c.args, code, stderr.String(), c.want)
		}
	}
	var out strings.Builder
	if code := serveMain([]string{"--help"}, strings.NewReader(""), &out, &out); code != 0 ||
		!strings.Contains(out.String(), "-default-var-bytes") || !strings.Contains(out.String(), "-max-var-bytes") {
		t.Errorf("serve --help: exit %d:\n%s", code, out.String())
	}
}

func startRawReading(t *testing.T, args ...string) *rawSidecar {
	t.Helper()
	s := startRaw(t, binPath, args...)
	s.startReading()
	return s
}
