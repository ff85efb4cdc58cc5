package main

// The protocol on the raw wire: error messages quote the parent's and the
// guest's strings cut and escaped; each method's allowed lists and its
// null rules; an id in flight refused whatever the method; a text or
// binary sent again served by its alias.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"
	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/rpc"
)

// hostileRunes are what must never reach a message raw: a client puts the
// message in its exception text, where ESC restyles a terminal and the
// bidi overrides reorder what a reader sees.
var hostileRunes = []string{"\x1b", "\u202e", "\u2066", "\x00", "\n"}

// checkMessage fails if the error message of m carries a hostile rune or
// is longer than most bytes.
func checkMessage(t *testing.T, what string, m *message, most int) {
	t.Helper()
	if m.Error == nil {
		t.Fatalf("%s: want an error, got %s", what, trunc(m.raw))
	}
	for _, r := range hostileRunes {
		if strings.Contains(m.Error.Message, r) {
			t.Errorf("%s: message carries %q raw: %q", what, r, m.Error.Message)
		}
	}
	if len(m.Error.Message) > most {
		t.Errorf("%s: message of %d bytes (want at most %d): %q…", what, len(m.Error.Message), most, m.Error.Message[:200])
	}
}

// TestErrorMessagesQuoteNamesCutAndEscaped sends instance ids, function
// names, methods and field names of 100 KB and with control and bidi
// characters: each error names the problem in a message of bounded size
// with those characters escaped, and the response is not twice the
// request.
func TestErrorMessagesQuoteNamesCutAndEscaped(t *testing.T) {
	t.Parallel()
	s := startRaw(t, binPath, "--framing=ndjson")
	s.startReading()
	inst := rawInstance(t, s, `"i"`)
	long := strings.Repeat("x", 100_000)
	nasty := "inst-\u202e\x1b[31m\u2066"

	// An instance longer than any id instantiate returns: -32602.
	s.request(`"long-instance"`, "call", callParams(long, "push", 1))
	m, _ := s.response(`"long-instance"`, time.Minute)
	checkMessage(t, "a 100 KB instance", m, 200)
	if m.Error.Code != -32602 || !strings.HasPrefix(m.Error.Message, "instance: not an id instantiate returned") {
		t.Errorf("a 100 KB instance: %s", trunc(m.raw))
	}
	if len(m.raw) > 1000 {
		t.Errorf("a 100 KB instance: a response of %d bytes", len(m.raw))
	}
	s.request(`"long-release"`, "release", map[string]any{"instance": long})
	if m, _ = s.response(`"long-release"`, time.Minute); m.Error == nil || m.Error.Code != -32602 {
		t.Errorf("release of a 100 KB instance: %s", trunc(m.raw))
	}

	// A short unknown id with controls: -32001, escaped in the message,
	// exact in data.
	s.request(`"nasty-instance"`, "call", callParams(nasty, "push", 1))
	m, _ = s.response(`"nasty-instance"`, time.Minute)
	checkMessage(t, "an instance with controls", m, 300)
	if m.Error.Code != -32001 || !strings.Contains(m.Error.Message, `inst-\u202e\x1b[31m\u2066 is closed`) {
		t.Errorf("an instance with controls: %q", m.Error.Message)
	}
	if d := errData(t, m); d["instance"] != nasty {
		t.Errorf("data.instance = %q, want the id as sent", d["instance"])
	}

	// A function of 100 KB on a live instance, and in a run: error 7,
	// the name cut in the message and in data.
	s.request(`"long-call"`, "call", callParams(inst, long, 1))
	s.request(`"long-run"`, "run", map[string]any{"module": map[string]string{"wat": statefulWAT}, "function": long, "args": []int{1}})
	for _, id := range []string{`"long-call"`, `"long-run"`} {
		m, _ = s.response(id, time.Minute)
		checkMessage(t, id, m, 600)
		if m.Error.Code != 7 || !strings.HasPrefix(m.Error.Message, `export: export "xxxxxxxx`) || !strings.Contains(m.Error.Message, `x"… not found`) {
			t.Errorf("%s: %q", id, m.Error.Message)
		}
		if f, _ := errData(t, m)["function"].(string); len(f) > 200 {
			t.Errorf("%s: data.function of %d bytes", id, len(f))
		}
		if len(m.raw) > 2000 {
			t.Errorf("%s: a response of %d bytes", id, len(m.raw))
		}
	}

	// A function with controls; input for a plain function.
	s.request(`"nasty-call"`, "call", callParams(inst, "\x1b[2J\u202epush", 1))
	m, _ = s.response(`"nasty-call"`, time.Minute)
	checkMessage(t, "a function with controls", m, 600)
	if !strings.Contains(m.Error.Message, `"\x1b[2J\u202epush"`) {
		t.Errorf("a function with controls: %q", m.Error.Message)
	}

	// An unknown method and an unknown field, long and with controls.
	s.request(`"method"`, "\x1b]0;owned\x07"+long, map[string]any{})
	m, _ = s.response(`"method"`, time.Minute)
	checkMessage(t, "an unknown method", m, 300)
	s.request(`"field"`, "run", map[string]any{"module": map[string]string{"wat": statefulWAT}, "\u202e" + long: 1})
	m, _ = s.response(`"field"`, time.Minute)
	checkMessage(t, "an unknown field", m, 400)
	if m.Error.Code != -32602 || !strings.HasPrefix(m.Error.Message, `\u202exxx`) {
		t.Errorf("an unknown field: %q", m.Error.Message)
	}
	s.request(`"config"`, "instantiate", map[string]any{"module": map[string]string{"wat": statefulWAT}, "config": map[string]any{"\x1b" + long: 1}})
	m, _ = s.response(`"config"`, time.Minute)
	checkMessage(t, "a config key", m, 400)
	if m.Error.Code != -32602 || !strings.HasPrefix(m.Error.Message, `config.\x1bxxx`) {
		t.Errorf("a config key: %q", m.Error.Message)
	}
}

// TestClosedReasonQuotesTheExportCut: an instance closed by a call of an
// export whose name is 20 KB with an ESC in it says why, in -32001's
// message and data, with the name cut and escaped.
func TestClosedReasonQuotesTheExportCut(t *testing.T) {
	t.Parallel()
	s := startRaw(t, binPath, "--framing=ndjson")
	s.startReading()
	name := "\x1b[31m" + strings.Repeat("s", 20_000)
	wat := fmt.Sprintf(`(module (func (export %q) (loop $l (br $l))))`, name)
	wat = strings.ReplaceAll(wat, `\x1b`, `\1b`) // WAT's escape
	s.request(`"i"`, "instantiate", map[string]any{"module": map[string]string{"wat": wat}, "limits": hangLimits(nil)})
	m, _ := s.response(`"i"`, time.Minute)
	var res struct{ Instance string }
	if m.Error != nil || json.Unmarshal(m.Result, &res) != nil {
		t.Fatalf("instantiate: %s", trunc(m.raw))
	}
	s.request(`"spin"`, "call", map[string]any{"instance": res.Instance, "function": name, "limits": map[string]int{"timeoutMs": 20, "fuel": 1 << 50}})
	m, _ = s.response(`"spin"`, time.Minute)
	checkMessage(t, "the timeout", m, 400)
	s.request(`"after"`, "call", map[string]any{"instance": res.Instance, "function": name})
	m, _ = s.response(`"after"`, time.Minute)
	checkMessage(t, "the closed instance", m, 400)
	reason, _ := errData(t, m)["reason"].(string)
	if m.Error.Code != -32001 || !strings.HasPrefix(reason, `closed after timeout in a call of "\x1b[31msss`) || len(reason) > 200 {
		t.Errorf("-32001: %q, reason %q", m.Error.Message, reason)
	}
}

// TestUnknownLimitListsWhatEachMethodTakes: an unknown limit is refused
// with the list of what that method takes: instantiate's has varBytes,
// a call's only the four per-call fences.
func TestUnknownLimitListsWhatEachMethodTakes(t *testing.T) {
	t.Parallel()
	s := startRaw(t, binPath, "--framing=ndjson")
	s.startReading()
	inst := rawInstance(t, s, `"i"`)
	run := "fuel, timeoutMs, memoryBytes, tableElements, instances, memories, logBytes, outputBytes, compileTimeoutMs, compileMemoryBytes"
	for _, c := range []struct {
		id, method string
		params     map[string]any
		want       string
	}{
		{`"run"`, "run", map[string]any{"module": map[string]string{"wat": statefulWAT}, "limits": map[string]int{"bogus": 1}},
			"limits.bogus: unknown field (allowed: " + run + ")"},
		{`"instantiate"`, "instantiate", map[string]any{"module": map[string]string{"wat": statefulWAT}, "limits": map[string]int{"bogus": 1}},
			"limits.bogus: unknown field (allowed: " + run + ", varBytes)"},
		{`"call"`, "call", map[string]any{"instance": inst, "function": "count", "limits": map[string]int{"bogus": 1}},
			"limits.bogus: unknown field (allowed: fuel, timeoutMs, logBytes, outputBytes)"},
		{`"call-fixed"`, "call", map[string]any{"instance": inst, "function": "count", "limits": map[string]int{"memoryBytes": 1 << 20}},
			"limits.memoryBytes: fixed at instantiate (only fuel, timeoutMs, logBytes, outputBytes apply to a call)"},
		{`"call-varbytes"`, "call", map[string]any{"instance": inst, "function": "count", "limits": map[string]int{"varBytes": 1}},
			"limits.varBytes: fixed at instantiate (only fuel, timeoutMs, logBytes, outputBytes apply to a call)"},
	} {
		s.request(c.id, c.method, c.params)
		m, _ := s.response(c.id, time.Minute)
		if m.Error == nil || m.Error.Code != -32602 || m.Error.Message != c.want {
			t.Errorf("%s: %s\n want -32602 %q", c.id, trunc(m.raw), c.want)
		}
	}
}

// TestNullMemberIsAbsent: null for a member of params (or of limits,
// capabilities, module) is as if it were absent, for every method: an
// optional member takes its default, a required one is "required".
func TestNullMemberIsAbsent(t *testing.T) {
	t.Parallel()
	s := startRaw(t, binPath, "--framing=ndjson")
	s.startReading()
	const runWAT = `(module (func (export "run") (result i32) i32.const 7))`
	null := json.RawMessage("null")
	allLimitsNull := map[string]any{}
	for _, f := range []string{"fuel", "timeoutMs", "memoryBytes", "tableElements", "instances", "memories", "logBytes", "outputBytes", "compileTimeoutMs", "compileMemoryBytes", "varBytes"} {
		allLimitsNull[f] = null
	}
	s.request(`"inst"`, "instantiate", map[string]any{"module": map[string]any{"wat": statefulWAT, "path": null},
		"limits": allLimitsNull, "capabilities": null, "config": null})
	m, _ := s.response(`"inst"`, time.Minute)
	var res struct{ Instance string }
	if m.Error != nil || json.Unmarshal(m.Result, &res) != nil {
		t.Fatalf("instantiate with null members: %s", trunc(m.raw))
	}
	delete(allLimitsNull, "varBytes")
	ok := []struct {
		id, method string
		params     map[string]any
	}{
		{`"run"`, "run", map[string]any{"module": map[string]string{"wat": runWAT}, "function": null, "args": null, "input": null, "config": null,
			"limits": allLimitsNull, "capabilities": map[string]any{"log": null, "clock": null, "random": null, "wasi": null}}},
		{`"run-limits"`, "run", map[string]any{"module": map[string]string{"wat": runWAT}, "limits": null}},
		{`"call"`, "call", map[string]any{"instance": res.Instance, "function": "count", "input": null, "args": null, "limits": null}},
		{`"call-limits"`, "call", map[string]any{"instance": res.Instance, "function": "count",
			"limits": map[string]any{"fuel": null, "timeoutMs": null, "logBytes": null, "outputBytes": null}}},
		{`"compile"`, "compile", map[string]any{"module": map[string]string{"wat": runWAT}, "limits": null}},
	}
	for _, c := range ok {
		s.request(c.id, c.method, c.params)
		if m, _ := s.response(c.id, time.Minute); m.Error != nil {
			t.Errorf("%s with null members: %s", c.id, trunc(m.raw))
		}
	}
	refused := []struct {
		id, method string
		params     map[string]any
		want       string
	}{
		{`"run-module"`, "run", map[string]any{"module": null}, "module: required"},
		{`"call-instance"`, "call", map[string]any{"instance": null, "function": "count"}, "instance: required"},
		{`"call-function"`, "call", map[string]any{"instance": res.Instance, "function": null}, "function: required"},
		{`"release"`, "release", map[string]any{"instance": null}, "instance: required"},
		{`"seed"`, "run", map[string]any{"module": map[string]string{"wat": runWAT}, "capabilities": map[string]any{"random": map[string]any{"seed": null}}},
			"capabilities.random.seed: required"},
	}
	for _, c := range refused {
		s.request(c.id, c.method, c.params)
		m, _ := s.response(c.id, time.Minute)
		if m.Error == nil || m.Error.Code != -32602 || !strings.HasPrefix(m.Error.Message, c.want) {
			t.Errorf("%s: %s, want -32602 %q", c.id, trunc(m.raw), c.want)
		}
	}
}

// TestIDInFlightRefusedWhateverTheMethod: while a call with id 10 runs,
// every request with id 10 (stats, initialize, release, shutdown, an
// unknown method, compile, call) is refused -32600 naming the id, never
// answered as if it were another request: the parent can tell the refusal
// from the answer it is owed. Once the call is answered the id is free.
func TestIDInFlightRefusedWhateverTheMethod(t *testing.T) {
	t.Parallel()
	s := startRaw(t, binPath, "--framing=ndjson")
	s.startReading()
	inst := rawInstance(t, s, `"i"`)
	other := rawInstance(t, s, `"j"`)
	spin := callParams(inst, "spin")
	spin["limits"] = map[string]uint64{"fuel": 1 << 50} // the deadline (a minute) or the cancel ends it
	s.request(`10`, "call", spin)
	requests := []struct {
		method string
		params any
	}{
		{"stats", nil},
		{"initialize", map[string]any{}},
		{"release", map[string]any{"instance": other}},
		{"shutdown", nil},
		{"no/such/method", nil},
		{"compile", map[string]any{"module": map[string]string{"wat": statefulWAT}}},
		{"call", callParams(other, "count")},
	}
	for _, r := range requests {
		s.request(`10`, r.method, r.params)
	}
	for _, r := range requests {
		m, _ := s.response(`10`, time.Minute)
		if m.Error == nil || m.Error.Code != -32600 || m.Error.Message != "id 10 is already used by a request in flight" {
			t.Errorf("%s with the id of a call in flight: %s", r.method, trunc(m.raw))
		}
	}
	s.notify("$/cancelRequest", map[string]any{"id": 10})
	if m, _ := s.response(`10`, time.Minute); m.Error == nil || m.Error.Code != -32800 {
		t.Fatalf("the call: %s", trunc(m.raw))
	}
	// The release was refused, not done; the shutdown too: other still
	// answers, and so does id 10 now.
	s.request(`10`, "call", callParams(other, "count"))
	if m, _ := s.response(`10`, time.Minute); m.Error != nil {
		t.Errorf("a call after the id was freed: %s", trunc(m.raw))
	}
}

// TestReadmeInstanceSession replays the README's instance session (the
// wire block after "Long-lived instances and Extism plugins on the wire")
// frame by frame against the binary: every member the README shows with
// a plain value (a number, a boolean, a string without "…") is what the
// sidecar sends, the instance id aside.
func TestReadmeInstanceSession(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	i := strings.Index(text, "Long-lived instances and Extism plugins on the wire")
	if i < 0 {
		t.Fatal("README.md has no instance session")
	}
	text = text[i:]
	start := strings.Index(text, "```\n") + 4
	block := text[start : start+strings.Index(text[start:], "```")]
	readmeInst := regexp.MustCompile(`inst-[0-9a-f]+-\d+`).FindString(block)
	member := regexp.MustCompile(`"(\w+)":(-?\d+|true|false|null|"[^"…]*")[,}\]]`)
	s := startRaw(t, binPath, "--framing=ndjson")
	s.startReading()
	inst := ""
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		switch {
		case strings.HasPrefix(line, "→ "):
			body := strings.TrimPrefix(line, "→ ")
			if inst != "" {
				body = strings.ReplaceAll(body, readmeInst, inst)
			}
			body = strings.ReplaceAll(body, `"path":"testdata/`, `"path":"`+filepath.Join(watDir, "..")+`/`)
			s.sendBody([]byte(body))
		case strings.HasPrefix(line, "← "):
			want := strings.TrimPrefix(line, "← ")
			m := s.take(time.Minute)
			got := string(m.raw)
			if inst == "" {
				var res struct {
					Result struct{ Instance string }
				}
				if json.Unmarshal(m.raw, &res) == nil && res.Result.Instance != "" {
					inst = res.Result.Instance
				}
			}
			if inst != "" {
				want = strings.ReplaceAll(want, readmeInst, inst)
			}
			for _, mm := range member.FindAllStringSubmatch(want, -1) {
				pair := `"` + mm[1] + `":` + mm[2]
				if !strings.Contains(got, pair) {
					t.Errorf("the README shows %s in\n  %s\nthe sidecar sent\n  %s", pair, want, got)
				}
				checked++
			}
		}
	}
	if checked < 30 {
		t.Errorf("checked only %d members of the README's session", checked)
	}
}

// A module sent again as the same wasm base64 or WAT text is found by the
// text as it came on the wire (before it is decoded); modules whose texts
// differ in one character each run their own code, and a bad base64 is
// still refused naming the field.
func TestSidecarModuleSentAgainRunsItsOwnCode(t *testing.T) {
	c, _ := startClient(t, binPath)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wat := func(k string) string {
		return `(module (func (export "f") (param i32) (result i32) local.get 0 i32.const ` + k + ` i32.add))`
	}
	type source struct {
		spec rpc.ModuleSpec
		want int
	}
	var sources []source
	for _, k := range []string{"1", "2", "3"} { // texts that differ in one byte
		w := wat(k)
		bin, err := wasmtime.Wat2Wasm(w)
		if err != nil {
			t.Fatal(err)
		}
		want := 10 + int(k[0]-'0')
		sources = append(sources,
			source{rpc.ModuleSpec{WAT: sandboxd.Str(w)}, want},
			source{rpc.ModuleSpec{Wasm: sandboxd.Str(base64.StdEncoding.EncodeToString(bin))}, want})
	}
	for round := range 3 {
		for i, s := range sources {
			res, err := c.Run(ctx, sandboxd.RunParams{Module: s.spec, Function: "f", Args: rawArgs(10)}, nil)
			if err != nil {
				t.Fatalf("round %d, source %d: %v", round, i, err)
			}
			if got := string(res.Values[0].Value); got != strconv.Itoa(s.want) {
				t.Fatalf("round %d, source %d: f(10) = %s, want %d (another module's code?)", round, i, got, s.want)
			}
		}
	}
	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Cache.Misses != 3 { // one compile per module; the text and the binary of each share it
		t.Errorf("cache misses %d, want 3 (one per module)", st.Cache.Misses)
	}
	_, err = c.Run(ctx, sandboxd.RunParams{Module: rpc.ModuleSpec{Wasm: sandboxd.Str("AGFzbQEAAAA=!")}, Function: "f"}, nil)
	if e := asRPCError(t, err); e.Code != -32602 || !strings.Contains(e.Message, "module.wasm") {
		t.Fatalf("bad base64: %v", err)
	}
}
