package rpc_test

// Host calls (hostcall.go): the sidecar's requests to the parent, over the
// fake engine, whose "host:N" guests call their first declared host
// function N times. The harness is the parent: it reads each host/call
// and answers it (or not) by hand.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/internal/rpctest"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

// lookup declares env::lookup (i64, f64) -> (i32).
var lookup = []map[string]any{{"module": "env", "name": "lookup", "params": []string{"i64", "f64"}, "results": []string{"i32"}}}

// hostRequest is a host/call the server sent.
type hostRequest struct {
	id     string // the sidecar's: "sbx-N"
	params protocol.HostCallParams
}

// hostCall returns the next host/call the server sends, and the
// notifications before it; any response before it fails the test.
func (h *harness) hostCall() (hostRequest, []*message) {
	h.t.Helper()
	var notes []*message
	for {
		m := h.next(0)
		if m.Method != protocol.MethodHostCall {
			if m.isResponse() {
				h.t.Fatalf("waiting for a host call, got the response to %s: %s %+v", m.ID, m.Result, m.Error)
			}
			notes = append(notes, m)
			continue
		}
		var r hostRequest
		if err := json.Unmarshal(m.ID, &r.id); err != nil || !m.hasID {
			h.t.Fatalf("host/call with id %s: not a string", m.ID)
		}
		if err := json.Unmarshal(m.Params, &r.params); err != nil {
			h.t.Fatalf("host/call params %s: %v", m.Params, err)
		}
		return r, notes
	}
}

// answerHost sends the parent's result (raw JSON) for host call id.
func (h *harness) answerHost(id, result string) {
	h.t.Helper()
	h.sendRaw(`{"jsonrpc":"2.0","id":` + strconv.Quote(id) + `,"result":` + result + `}`)
}

// hostStats is stats' hostCalls now.
func (h *harness) hostStats() protocol.HostCallStats {
	h.t.Helper()
	h.barriers++
	id := `"hoststats-` + strconv.Itoa(h.barriers) + `"`
	h.request(id, rpc.MethodStats, nil)
	m, _ := h.response(id)
	var st protocol.StatsResult
	if err := json.Unmarshal(m.Result, &st); err != nil {
		h.t.Fatal(err)
	}
	return st.HostCalls
}

func wantHostStats(t *testing.T, got protocol.HostCallStats, want protocol.HostCallStats) {
	t.Helper()
	if got != want {
		t.Errorf("stats hostCalls %+v, want %+v", got, want)
	}
}

// TestHostCallRoundTrip: each call is a host/call request with an id of
// the sidecar's, the run's id by value, the args encoded as run results
// are, after the log lines the guest wrote before it; the answer's
// values (typed or bare) come back to the guest.
func TestHostCallRoundTrip(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{})
	h.run(`"r\u0031"`, "host:2", map[string]any{"hostFunctions": lookup})
	for i, answer := range []string{`{"values":[{"type":"i32","value":7}]}`, `{"values":[8]}`} {
		req, notes := h.hostCall()
		if len(notes) != 1 || notes[0].Method != rpc.NotifyLog || !strings.Contains(string(notes[0].Params), fmt.Sprintf(`"line":"host %d"`, i)) {
			t.Fatalf("call %d: notifications before it %v, want its log line", i, notes)
		}
		want := protocol.HostCallParams{Module: "env", Name: "lookup"}
		if req.id != "sbx-"+strconv.Itoa(i+1) || req.params.ID.Str != "r1" || !req.params.ID.IsString || req.params.Instance != "" ||
			req.params.Module != want.Module || req.params.Name != want.Name || len(req.params.Args) != 2 {
			t.Fatalf("call %d: %s %+v", i, req.id, req.params)
		}
		a0, a1 := req.params.Args[0], req.params.Args[1]
		if a0.Type != "i64" || string(a0.Value) != fmt.Sprintf(`"%d"`, i) || a1.Type != "f64" || a1.Bits == "" {
			t.Fatalf("call %d: args %+v", i, req.params.Args)
		}
		h.answerHost(req.id, answer)
	}
	m, _ := h.response(`"r1"`)
	if m.Error != nil || !strings.Contains(string(m.Result), `"values":[{"type":"i32","value":8}]`) {
		t.Fatalf("run: %s %+v", m.Result, m.Error)
	}
	wantHostStats(t, h.hostStats(), protocol.HostCallStats{Sent: 2, Answered: 2})
	h.endsWithNoMore()
}

// TestHostCallAnswersThatDoNotFit: an error answer, and an answer whose
// values do not fit the declaration, end the run host_function_error
// naming the function and saying what was wrong.
func TestHostCallAnswersThatDoNotFit(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{})
	cases := []struct{ answer, message string }{
		{`"result":{"values":[1,2]}`, "the parent answered with 2 values; it returns (i32)"},
		{`"result":{"values":[1,2,3,4,5]}`, "the parent answered with more than 1 values; it returns (i32)"},
		{`"result":{"values":[]}`, "the parent answered with 0 values; it returns (i32)"},
		{`"result":{}`, "the parent answered with no values; it returns (i32)"},
		{`"result":null`, "the parent answered with no values; it returns (i32)"},
		{`"result":{"values":[{"type":"i64","value":"1"}]}`, "the parent's value 0 is an i64; it returns i32 there"},
		{`"result":{"values":[{"type":"bytes","value":"x"}]}`, "the parent's value 0 is bytes; it returns i32 there"},
		{`"result":{"values":["x"]}`, `the parent's value 0: expected i32, got the string "x" (it returns i32 there)`},
		{`"result":{"values":[4294967296]}`, `the parent's value 0: 4294967296 is out of range for i32`},
		{`"result":{"value":[1]}`, `the parent's answer: result.value: unknown field (allowed: values); an answer is {"values": [...]}`},
		{`"result":[1]`, `the parent's answer: result: must be an object, got an array`},
		{`"result":{"values":1}`, `the parent's answer: values must be an array, got a number`},
		{`"result":{"values":[1]},"error":{"code":1,"message":"m"}`, "the parent's answer has both a result and an error"},
		{`"error":{"message":"no code"}`, "the parent answered with an error that is not a JSON-RPC error object"},
	}
	for i, c := range cases {
		id := strconv.Itoa(i + 1)
		h.run(id, "host:1", map[string]any{"hostFunctions": lookup})
		req, _ := h.hostCall()
		h.sendRaw(`{"jsonrpc":"2.0","id":"` + req.id + `",` + c.answer + `}`)
		m, _ := h.response(id)
		wantError(t, m, 12, `host function "env::lookup": `+c.message)
		if d := errorData(t, m); d["kind"] != string(protocol.KindHostFunctionError) || d["function"] != "env::lookup" {
			t.Errorf("answer %s: data %v", c.answer, d)
		}
	}
	// The parent's error answer: its message (cut at 16 KiB) in data.
	for i, msg := range []string{"no such key", strings.Repeat("é", 10000)} {
		id := "e" + strconv.Itoa(i)
		h.run(`"`+id+`"`, "host:1", map[string]any{"hostFunctions": lookup})
		req, _ := h.hostCall()
		h.sendRaw(`{"jsonrpc":"2.0","id":"` + req.id + `","error":{"code":-7,"message":"` + msg + `"}}`)
		m, _ := h.response(`"` + id + `"`)
		wantError(t, m, 12, `host function "env::lookup": the parent answered with an error: "`+msg[:min(len(msg), 60)])
		want := protocol.CutUTF8(msg, 16<<10)
		if d := errorData(t, m); d["message"] != want {
			t.Errorf("error answer %.40q: data.message %.40q (%d bytes), want the parent's message cut at 16 KiB", msg, d["message"], len(d["message"].(string)))
		}
	}
	wantHostStats(t, h.hostStats(), protocol.HostCallStats{Sent: uint64(len(cases)) + 2, Failed: uint64(len(cases)) + 2})
	h.endsWithNoMore()
}

// TestHostCallUnexpectedAnswers: a second answer, an answer to an id the
// sidecar never sent (a string, a number, null) are dropped and counted;
// the run gets its one answer and nothing is sent back for them.
func TestHostCallUnexpectedAnswers(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{})
	h.run("1", "host:1", map[string]any{"hostFunctions": lookup})
	req, _ := h.hostCall()
	h.answerHost(req.id, `{"values":[5]}`)
	m, _ := h.response("1")
	if m.Error != nil {
		t.Fatal(m.Error)
	}
	h.answerHost(req.id, `{"values":[6]}`) // twice
	h.answerHost("sbx-99", `{"values":[6]}`)
	h.sendRaw(`{"jsonrpc":"2.0","id":5,"result":{"values":[6]}}`)
	h.sendRaw(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"the parent refused something"}}`)
	h.sendRaw(`{"jsonrpc":"2.0","id":"` + strings.Repeat(`\u001b[31m`, 40) + `","result":{}}`)
	wantHostStats(t, h.hostStats(), protocol.HostCallStats{Sent: 1, Answered: 1, Unexpected: 5})
	h.endsWithNoMore()
}

// TestHostCallDeadline: the deadline passes while the parent holds its
// answer: the run is answered timeout at once, the parent is told to stop
// ($/cancelRequest of the host call, before the run's answer), and the
// late answer is dropped.
func TestHostCallDeadline(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{})
	h.run("1", "host:1", map[string]any{"hostFunctions": lookup, "limits": map[string]any{"timeoutMs": 50}})
	req, _ := h.hostCall()
	m, notes := h.response("1")
	wantError(t, m, 3, "")
	if errorData(t, m)["kind"] != string(protocol.KindTimeout) {
		t.Errorf("kind %v, want timeout", errorData(t, m)["kind"])
	}
	wantCancelOf(t, notes, req.id)
	h.answerHost(req.id, `{"values":[1]}`)
	wantHostStats(t, h.hostStats(), protocol.HostCallStats{Sent: 1, Cancelled: 1, Unexpected: 1})
	h.endsWithNoMore()
}

// wantCancelOf checks that notes are exactly the $/cancelRequest of host
// call id.
func wantCancelOf(t *testing.T, notes []*message, id string) {
	t.Helper()
	if len(notes) != 1 || notes[0].Method != rpc.MethodCancel || notes[0].hasID || string(notes[0].Params) != `{"id":"`+id+`"}` {
		for _, n := range notes {
			t.Logf("notification %s %s", n.Method, n.Params)
		}
		t.Fatalf("want the $/cancelRequest of %s alone before the run's answer", id)
	}
}

// TestHostCallCancelled: the parent cancels the run while it waits for
// a host call: the run is answered cancelled and the host call cancelled.
func TestHostCallCancelled(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{})
	h.run(`"x"`, "host:1", map[string]any{"hostFunctions": lookup})
	req, _ := h.hostCall()
	h.notify(rpc.MethodCancel, map[string]any{"id": "x"})
	m, notes := h.response(`"x"`)
	wantError(t, m, rpc.CodeCancelled, "cancelled")
	wantCancelOf(t, notes, req.id)
	wantHostStats(t, h.hostStats(), protocol.HostCallStats{Sent: 1, Cancelled: 1})
	h.endsWithNoMore()
}

// TestHostCallGivesBackItsSlot: with one run slot, a run waiting for its
// host call holds none: the parent's handler gets answers to a run, a
// compile and stats before it answers; then the run takes a slot again.
func TestHostCallGivesBackItsSlot(t *testing.T) {
	h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 1})
	h.run("1", "host:1", map[string]any{"hostFunctions": lookup})
	req, _ := h.hostCall()
	h.run("2", "run", nil)
	if m, _ := h.response("2"); m.Error != nil {
		t.Fatalf("run from the handler: %+v", m.Error)
	}
	h.request("3", rpc.MethodCompile, map[string]any{"module": map[string]any{"wat": "(module)"}})
	if m, _ := h.response("3"); m.Error != nil {
		t.Fatalf("compile from the handler: %+v", m.Error)
	}
	h.run("4", "host:1", map[string]any{"hostFunctions": lookup, "hostCall": req.id}) // a nested host call
	req4, _ := h.hostCall()
	h.answerHost(req4.id, `{"values":[4]}`)
	if m, _ := h.response("4"); m.Error != nil {
		t.Fatalf("nested run: %+v", m.Error)
	}
	wantHostStats(t, h.hostStats(), protocol.HostCallStats{Sent: 2, Answered: 1, Waiting: 1})
	h.answerHost(req.id, `{"values":[1]}`)
	if m, _ := h.response("1"); m.Error != nil {
		t.Fatalf("run: %+v", m.Error)
	}
	h.endsWithNoMore()
}

// TestHostCallCycle: a call from a host call's handler to the instance
// waiting for it (directly, or through a chain of host calls) is refused
// at once, -32003; one without hostCall waits in line.
func TestHostCallCycle(t *testing.T) {
	h := startServer(t, rpctest.NewInstances(4), rpc.Options{MaxConcurrency: 1})
	h.request("1", protocol.MethodInstantiate, map[string]any{"module": map[string]any{"wat": "(module)"}, "hostFunctions": lookup})
	m, _ := h.response("1")
	var inst protocol.InstantiateResult
	if m.Error != nil || json.Unmarshal(m.Result, &inst) != nil {
		t.Fatalf("instantiate: %s %+v", m.Result, m.Error)
	}
	call := func(id, fn, from string) {
		p := map[string]any{"instance": inst.Instance, "function": fn}
		if from != "" {
			p["hostCall"] = from
		}
		h.request(id, protocol.MethodCall, p)
	}
	call("2", "host:1", "")
	outer, _ := h.hostCall()
	if outer.params.Instance != inst.Instance || outer.params.ID.Num != 2 {
		t.Fatalf("host call of the instance's call: %+v", outer.params)
	}
	call("3", "host:1", outer.id)
	m, _ = h.response("3")
	wantError(t, m, protocol.CodeHostCallCycle, fmt.Sprintf("instance %s is waiting for your answer to host call %s; a call to it from that handler would wait for itself", inst.Instance, outer.id))

	// A run sent from the handler makes a host call of its own; a call
	// from that one's handler to the instance waits for itself too.
	h.run("4", "host:1", map[string]any{"hostFunctions": lookup, "hostCall": outer.id})
	inner, _ := h.hostCall()
	call("5", "count", inner.id)
	m, _ = h.response("5")
	wantError(t, m, protocol.CodeHostCallCycle, "waiting for your answer to host call "+inner.id)

	call("6", "count", "") // waits in line
	h.answerHost(inner.id, `{"values":[1]}`)
	if m, _ := h.response("4"); m.Error != nil {
		t.Fatalf("inner run: %+v", m.Error)
	}
	h.answerHost(outer.id, `{"values":[2]}`)
	// 2 gives its instance's turn back before its answer is written: 6
	// may be answered first (it was, under -race on a loaded machine).
	for id, m := range h.responses("2", "6") {
		if m.Error != nil {
			t.Fatalf("call %s: %+v", id, m.Error)
		}
	}
	call("8", "count", "nope")
	m, _ = h.response("8")
	wantError(t, m, rpc.CodeInvalidParams, `hostCall: not the id of a host call the sidecar sent ("sbx-" followed by digits), got "nope"`)
	call("7", "count", outer.id) // answered: no chain any more
	if m, _ := h.response("7"); m.Error != nil {
		t.Fatalf("call 7: %+v", m.Error)
	}
	h.endsWithNoMore()
}

// TestHostCallOfInstantiation: a start function's host calls carry the
// instantiate's id, and no instance (it has no id yet).
func TestHostCallOfInstantiation(t *testing.T) {
	h := startServer(t, rpctest.NewInstances(4), rpc.Options{})
	h.request(`"i"`, protocol.MethodInstantiate, map[string]any{"module": map[string]any{"wat": "(module)"},
		"hostFunctions": lookup, "config": map[string]string{"start": "host:1"}})
	req, _ := h.hostCall()
	if req.params.ID.Str != "i" || req.params.Instance != "" {
		t.Fatalf("host call of an instantiation: %+v", req.params)
	}
	h.answerHost(req.id, `{"values":[1]}`)
	if m, _ := h.response(`"i"`); m.Error != nil {
		t.Fatal(m.Error)
	}
	h.endsWithNoMore()
}

// TestHostCallParentGone: the parent's input ends while host calls wait
// (with shutdown sent first, and without): every run is answered
// cancelled, saying the sidecar is exiting, and Serve returns.
func TestHostCallParentGone(t *testing.T) {
	for _, shutdown := range []bool{false, true} {
		t.Run(fmt.Sprintf("shutdown=%v", shutdown), func(t *testing.T) {
			h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 2})
			for i := range 3 {
				h.run(strconv.Itoa(i), "host:1", map[string]any{"hostFunctions": lookup})
				h.hostCall()
			}
			if shutdown {
				h.request(`"s"`, rpc.MethodShutdown, nil)
			}
			h.inW.Close()
			seen := map[string]bool{}
			for m := range h.msgs {
				if !m.isResponse() {
					t.Errorf("after the input ended: %s %s", m.Method, m.Params)
					continue
				}
				seen[string(m.ID)] = true
				if string(m.ID) == `"s"` {
					continue
				}
				wantError(t, m, rpc.CodeCancelled, "the sidecar is exiting")
			}
			if len(seen) != 3+map[bool]int{true: 1}[shutdown] {
				t.Errorf("answered %v", seen)
			}
			if err := h.serveResult(0); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestHostCallAnswerTooLarge: an answer past --max-message-bytes is not
// read; the host call it answers ends host_function_error saying so, in
// both framings, and nothing is sent back for it.
func TestHostCallAnswerTooLarge(t *testing.T) {
	for _, f := range []rpc.Framing{rpc.FramingContentLength, rpc.FramingNDJSON} {
		t.Run(string(f), func(t *testing.T) {
			h := startServer(t, rpctest.NewEngine(), rpc.Options{Framing: f, MaxMessageBytes: 4096})
			h.run("1", "host:1", map[string]any{"hostFunctions": lookup})
			req, _ := h.hostCall()
			h.answerHost(req.id, `{"values":[1],"pad":"`+strings.Repeat("x", 8000)+`"}`)
			m, _ := h.response("1")
			wantError(t, m, 12, "--max-message-bytes (4096); it was not read")
			if f == rpc.FramingContentLength && !strings.Contains(m.Error.Message, req.id+" is 8") {
				t.Errorf("message %q does not give the size", m.Error.Message)
			}
			wantHostStats(t, h.hostStats(), protocol.HostCallStats{Sent: 1, Failed: 1})
			h.endsWithNoMore()
		})
	}
}

// TestHostCallsManyRuns: runs pipelined on two slots, each making host
// calls, all answered once, the counters adding up.
func TestHostCallsManyRuns(t *testing.T) {
	const runs, calls = 100, 20
	h := startServer(t, rpctest.NewEngine(), rpc.Options{MaxConcurrency: 2})
	var bodies []map[string]any
	for i := range runs {
		bodies = append(bodies, map[string]any{"jsonrpc": "2.0", "id": i, "method": "run", "params": map[string]any{
			"module": map[string]any{"wat": "(module)"}, "function": "host:" + strconv.Itoa(calls), "hostFunctions": lookup,
			// Every run waits its turn for the parent behind all the others
			// (they all start, each slot given back while it waits).
			"limits": map[string]any{"timeoutMs": 600_000}}})
	}
	sendTogether(t, h, bodies...)
	answered := map[string]int{}
	hostCalls := map[string]bool{}
	for len(answered) < runs {
		m := h.next(0)
		switch {
		case m.Method == protocol.MethodHostCall:
			var id string
			_ = json.Unmarshal(m.ID, &id)
			if hostCalls[id] {
				t.Fatalf("host call %s sent twice", id)
			}
			hostCalls[id] = true
			var p protocol.HostCallParams
			_ = json.Unmarshal(m.Params, &p)
			h.answerHost(id, `{"values":[`+strconv.FormatUint(p.ID.Num, 10)+`]}`)
		case m.isResponse():
			answered[string(m.ID)]++
			if m.Error != nil || !strings.Contains(string(m.Result), `"value":`+string(m.ID)+`}`) {
				t.Fatalf("run %s: %s %+v", m.ID, m.Result, m.Error)
			}
		}
	}
	wantHostStats(t, h.hostStats(), protocol.HostCallStats{Sent: runs * calls, Answered: runs * calls})
	h.endsWithNoMore()
}

// TestHostCallDroppedAnswersLogBounded: answers to no host call in flight
// are logged, the first maxDroppedAnswersLogged with their id escaped
// once, then once that no more are; 1,000 of them write 11 lines
// (every one wrote a line, its id escaped three times: rt20 item 7).
func TestHostCallDroppedAnswersLogBounded(t *testing.T) {
	var log lockedBuffer
	h := startServer(t, rpctest.NewEngine(), rpc.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	for i := range 1000 {
		h.answerHost(fmt.Sprintf("sbx-%d", 795+i), `{"values":[6]}`)
	}
	wantHostStats(t, h.hostStats(), protocol.HostCallStats{Unexpected: 1000})
	h.endsWithNoMore()
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	if len(lines) != 11 || !strings.Contains(lines[0], `id="\"sbx-795\""`) || !strings.Contains(lines[10], "no more are logged") {
		t.Errorf("%d lines logged, first %s, last %s", len(lines), lines[0], lines[len(lines)-1])
	}
}

// lockedBuffer is a bytes.Buffer safe for the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestHostCallerIDIsBounded: every host/call repeats the id of the request
// whose run made it, so a request whose run can call the parent (a run or
// instantiate declaring hostFunctions, a call on an instance that did)
// takes an id of at most protocol.MaxHostCallerIDBytes as JSON; a longer
// one is refused -32602 naming id before anything runs, and no host/call
// carries it. Requests that cannot call the parent take any id.
func TestHostCallerIDIsBounded(t *testing.T) {
	h := startServer(t, rpctest.NewInstances(4), rpc.Options{})
	long := `"` + strings.Repeat("x", 100_000) + `"`
	longest := `"` + strings.Repeat("x", protocol.MaxHostCallerIDBytes-2) + `"`
	const refused = "id: is 100002 bytes; a request whose run can call the parent (hostFunctions) takes an id of at most 128 bytes"

	h.run(long, "host:1", map[string]any{"hostFunctions": lookup})
	m, _ := h.response(long)
	wantError(t, m, rpc.CodeInvalidParams, refused)
	h.request(long, protocol.MethodInstantiate, map[string]any{"module": map[string]any{"wat": "(module)"},
		"hostFunctions": lookup, "config": map[string]string{"start": "host:1"}})
	m, _ = h.response(long)
	wantError(t, m, rpc.CodeInvalidParams, refused)

	h.run(longest, "host:1", map[string]any{"hostFunctions": lookup})
	req, _ := h.hostCall()
	if req.params.ID.Str != strings.Trim(longest, `"`) {
		t.Fatalf("host call of a run of the longest id: %+v", req.params.ID)
	}
	h.answerHost(req.id, `{"values":[1]}`)
	if m, _ := h.response(longest); m.Error != nil {
		t.Fatalf("run of the longest id: %+v", m.Error)
	}

	h.request("1", protocol.MethodInstantiate, map[string]any{"module": map[string]any{"wat": "(module)"}, "hostFunctions": lookup})
	m, _ = h.response("1")
	var inst protocol.InstantiateResult
	if m.Error != nil || json.Unmarshal(m.Result, &inst) != nil {
		t.Fatalf("instantiate: %s %+v", m.Result, m.Error)
	}
	h.request(long, protocol.MethodCall, map[string]any{"instance": inst.Instance, "function": "host:1"})
	m, _ = h.response(long)
	wantError(t, m, rpc.CodeInvalidParams, refused)

	h.run(long, "run", nil) // no hostFunctions: any id
	if m, _ := h.response(long); m.Error != nil {
		t.Fatalf("run without hostFunctions: %+v", m.Error)
	}
	h.endsWithNoMore()
}
