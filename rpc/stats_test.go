package rpc_test

// initialize and stats (stats.go).

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/rpctest"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

func TestServerInitialize(t *testing.T) {
	for _, framing := range []rpc.Framing{rpc.FramingContentLength, rpc.FramingNDJSON} {
		t.Run(string(framing), func(t *testing.T) {
			h := startServer(t, rpctest.NewEngine(), rpc.Options{Framing: framing, MaxConcurrency: 2, MaxQueue: 7, Version: "0.1.0", EngineVersion: "v39.0.1"})
			h.request(`1`, "initialize", map[string]any{"anything": true})
			m, _ := h.response(`1`)
			if m.Error != nil {
				t.Fatalf("error %+v", m.Error)
			}
			var got struct {
				rpc.InitializeResult
				Extra map[string]any `json:"-"`
			}
			if err := json.Unmarshal(m.Result, &got); err != nil {
				t.Fatal(err)
			}
			r := got.InitializeResult
			if r.ServerInfo != (rpc.ServerInfo{Name: "sandboxd", Version: "0.1.0"}) {
				t.Errorf("serverInfo %+v", r.ServerInfo)
			}
			if r.Engine.Wasmtime != "v39.0.1" {
				t.Errorf("engine %+v", r.Engine)
			}
			if strings.Join(r.Capabilities.HostFunctions, ",") != "log,random,clock" ||
				strings.Join(r.Capabilities.ValueTypes, ",") != "i32,i64,f32,f64" ||
				r.Capabilities.Framing != string(framing) {
				t.Errorf("capabilities %+v", r.Capabilities)
			}
			wantDef := map[string]uint64{"fuel": 1 << 50, "timeoutMs": 1000, "memoryBytes": 16777216,
				"tableElements": 100000, "instances": 1, "memories": 1, "logBytes": 1048576, "outputBytes": 1048576,
				"compileTimeoutMs": 180000, "compileMemoryBytes": 2 << 30}
			wantMax := map[string]uint64{"fuel": 1125899906842624, "timeoutMs": 600000, "memoryBytes": 4294967296,
				"tableElements": 10000000, "instances": 16, "memories": 16, "logBytes": 67108864, "outputBytes": 67108864,
				"compileTimeoutMs": 300000, "compileMemoryBytes": 4 << 30}
			if fmt.Sprint(r.Limits.Defaults) != fmt.Sprint(wantDef) || fmt.Sprint(r.Limits.Maximums) != fmt.Sprint(wantMax) {
				t.Errorf("limits %+v", r.Limits)
			}
			if r.MaxConcurrency != 2 || r.MaxQueue != 7 {
				t.Errorf("maxConcurrency %d maxQueue %d", r.MaxConcurrency, r.MaxQueue)
			}
			// Every documented key is present on the wire.
			var raw map[string]json.RawMessage
			_ = json.Unmarshal(m.Result, &raw)
			for _, k := range []string{"serverInfo", "engine", "capabilities", "limits", "maxConcurrency", "maxQueue"} {
				if _, ok := raw[k]; !ok {
					t.Errorf("initialize result lacks %q", k)
				}
			}
			// No params at all is fine too.
			h.request(`"two"`, "initialize", nil)
			if m, _ := h.response(`"two"`); m.Error != nil {
				t.Errorf("initialize without params: %+v", m.Error)
			}
		})
	}
}

func TestServerStats(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 2})
	n := 0
	send := func(fn string) {
		n++
		id := strconv.Itoa(n)
		h.run(id, fn, nil)
		h.response(id)
	}
	send("run")
	send("run")
	for _, info := range protocol.Kinds() {
		send("fail:" + string(info.Kind))
	}
	send("fail:trap")
	send("panic")
	// Not counted: invalid params.
	h.run(`"bad"`, "run", map[string]any{"limits": map[string]any{"fuel": -1}})
	h.response(`"bad"`)
	h.run(`"badarg"`, "echo", map[string]any{"args": []any{true, 1, 1, 1}})
	h.response(`"badarg"`)

	h.request(`"st"`, rpc.MethodStats, nil)
	m, _ := h.response(`"st"`)
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(m.Result, &raw)
	for _, k := range []string{"runs", "inFlight", "queued", "queuedMicrosTotal", "cache", "uptimeMs", "requests"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("stats lacks %q", k)
		}
	}
	var st rpc.StatsResult
	if err := json.Unmarshal(m.Result, &st); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"ok": 2, "trap": 2, "internal": 1}
	for _, info := range protocol.Kinds() {
		if info.Kind != protocol.KindTrap {
			want[string(info.Kind)] = 1
		}
	}
	if fmt.Sprint(st.Runs) != fmt.Sprint(want) {
		t.Errorf("runs %v\nwant %v", st.Runs, want)
	}
	// (inFlight is not checked: the server replies before it decrements it,
	// see TestServerReuseIDAfterResponse.)
	if st.Queued != 0 || st.Cache != (rpc.CacheInfo{Entries: 3, Bytes: 1234, Hits: 9, Misses: 3}) || st.UptimeMs < 0 {
		t.Errorf("stats %+v", st)
	}
	if st.Requests != uint64(n+3) {
		t.Errorf("requests %d, want %d", st.Requests, n+3)
	}
}

func TestServerStatsZero(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 1})
	h.request(`1`, rpc.MethodStats, nil)
	m, _ := h.response(`1`)
	var st rpc.StatsResult
	_ = json.Unmarshal(m.Result, &st)
	keys := []string{"ok"}
	for _, info := range protocol.Kinds() {
		keys = append(keys, string(info.Kind))
	}
	for _, k := range keys {
		if n, ok := st.Runs[k]; !ok || n != 0 {
			t.Errorf("runs[%s] = %d, %v; want 0 present", k, n, ok)
		}
	}
	if len(st.Runs) != len(keys) {
		t.Errorf("runs %v", st.Runs)
	}
}
