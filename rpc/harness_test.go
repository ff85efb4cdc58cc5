package rpc_test

// The sidecar's tests drive the real Server through pipes, as a parent
// does, over the fake engine of internal/rpctest. This is their raw
// client: it frames requests by hand and reads everything the server
// writes.

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/rpctest"
	"github.com/sandboxd/sandboxd/rpc"
)

type message struct {
	rpc.Message
	hasID bool
}

func (m *message) isResponse() bool { return m.Method == "" }

type harness struct {
	t      *testing.T
	srv    *rpc.Server
	eng    *rpctest.Engine
	inW    *io.PipeWriter
	wmu    sync.Mutex
	ndjson bool
	msgs   chan *message
	served chan error

	barriers int
}

// startServer serves eng, a *rpctest.Engine or *rpctest.Instances.
func startServer(t *testing.T, eng rpc.Engine, opts rpc.Options) *harness {
	t.Helper()
	srv, err := rpc.NewServer(eng, opts)
	if err != nil {
		t.Fatal(err)
	}
	fake, ok := eng.(*rpctest.Engine)
	if in, isInstances := eng.(*rpctest.Instances); isInstances {
		fake, ok = in.Engine, true
	}
	if !ok {
		t.Fatalf("startServer: %T is not a fake engine", eng)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	h := &harness{t: t, srv: srv, eng: fake, inW: inW, ndjson: opts.Framing == rpc.FramingNDJSON,
		msgs: make(chan *message, 100000), served: make(chan error, 1)}
	go func() {
		err := srv.Serve(context.Background(), inR, outW)
		outW.Close()
		h.served <- err
	}()
	go h.readLoop(outR)
	t.Cleanup(func() {
		inW.Close()
		select {
		case <-h.served:
		case <-time.After(5 * time.Second):
			t.Errorf("Serve did not return after the input closed")
		}
	})
	return h
}

func (h *harness) readLoop(r io.Reader) {
	defer close(h.msgs)
	br := bufio.NewReader(r)
	for {
		var body []byte
		if h.ndjson {
			line, err := br.ReadBytes('\n')
			if err != nil {
				return
			}
			body = line
		} else {
			n := -1
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				line = strings.TrimRight(line, "\r\n")
				if line == "" {
					break
				}
				if v, ok := strings.CutPrefix(line, "Content-Length: "); ok {
					n, _ = strconv.Atoi(v)
				}
			}
			if n < 0 {
				h.t.Errorf("server wrote a frame without Content-Length")
				return
			}
			body = make([]byte, n)
			if _, err := io.ReadFull(br, body); err != nil {
				return
			}
		}
		m := &message{}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(body, m); err != nil || json.Unmarshal(body, &fields) != nil {
			h.t.Errorf("server wrote invalid JSON %q: %v", body, err)
			return
		}
		_, m.hasID = fields["id"]
		if m.JSONRPC != "2.0" {
			h.t.Errorf("server wrote %q without jsonrpc 2.0", body)
		}
		h.msgs <- m
	}
}

// sendRaw writes one body, framed.
func (h *harness) sendRaw(body string) {
	h.t.Helper()
	h.wmu.Lock()
	defer h.wmu.Unlock()
	var frame string
	if h.ndjson {
		frame = body + "\n"
	} else {
		frame = "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	if _, err := io.WriteString(h.inW, frame); err != nil {
		h.t.Fatalf("write: %v", err)
	}
}

// request sends a request; id is raw JSON (e.g. `1` or `"a"`).
func (h *harness) request(id, method string, params any) {
	h.t.Helper()
	body := map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "method": method}
	if params != nil {
		body["params"] = params
	}
	b, err := json.Marshal(body)
	if err != nil {
		h.t.Fatal(err)
	}
	h.sendRaw(string(b))
}

func (h *harness) notify(method string, params any) {
	h.t.Helper()
	body := map[string]any{"jsonrpc": "2.0", "method": method}
	if params != nil {
		body["params"] = params
	}
	b, _ := json.Marshal(body)
	h.sendRaw(string(b))
}

func (h *harness) run(id string, fn string, extra map[string]any) {
	h.t.Helper()
	p := map[string]any{"module": map[string]any{"wat": "(module)"}, "function": fn}
	for k, v := range extra {
		p[k] = v
	}
	h.request(id, rpc.MethodRun, p)
}

// next returns the next message the server wrote.
// hangFloor is the least time a harness waits for something that must
// come: every such wait is a hang bound, and on a loaded machine (under
// -race, beside other packages' tests) a second is not one.
const hangFloor = time.Minute

func (h *harness) next(timeout time.Duration) *message {
	h.t.Helper()
	timeout = max(timeout, hangFloor)
	select {
	case m, ok := <-h.msgs:
		if !ok {
			h.t.Fatalf("the server's output ended")
		}
		return m
	case <-time.After(timeout):
		h.t.Fatalf("no message within %v", timeout)
	}
	return nil
}

// response waits for the response with the given raw id, failing on any
// other response; notifications on the way are returned too.
func (h *harness) response(id string) (*message, []*message) {
	h.t.Helper()
	var notes []*message
	for {
		m := h.next(5 * time.Second)
		if !m.isResponse() {
			notes = append(notes, m)
			continue
		}
		if string(m.ID) != id {
			h.t.Fatalf("waiting for the response to %s, got one to %s: %+v", id, m.ID, m.Error)
		}
		return m, notes
	}
}

// responses collects the responses to ids, in whatever order they come
// (what the server writes between them is skipped): each must come once,
// and no response to another request before the last of them. For
// answers whose order the server does not fix: a job's slot and its
// instance's turn are given back before its answer is written, so the
// job they let run may be answered first.
func (h *harness) responses(ids ...string) map[string]*message {
	h.t.Helper()
	got := map[string]*message{}
	for len(got) < len(ids) {
		m := h.next(5 * time.Second)
		if !m.isResponse() {
			continue
		}
		id := string(m.ID)
		if !slices.Contains(ids, id) || got[id] != nil {
			h.t.Fatalf("waiting for the responses to %v, got one to %s: %+v", ids, id, m.Error)
		}
		got[id] = m
	}
	return got
}

// barrier sends a stats request and waits for its answer, failing on
// any message before it: the dispatcher handles messages in the order
// they were sent, so once stats is answered everything sent before has
// been handled, and nothing was written for it meanwhile that the test
// did not expect.
func (h *harness) barrier() {
	h.t.Helper()
	h.barriers++
	id := `"barrier-` + strconv.Itoa(h.barriers) + `"`
	h.request(id, rpc.MethodStats, nil)
	m, notes := h.response(id)
	if m.Error != nil || len(notes) > 0 {
		h.t.Fatalf("barrier: %+v, notifications before it: %d", m.Error, len(notes))
	}
}

// endsWithNoMore closes the input and checks that the server writes
// nothing more before its output ends: every response it owed had been
// read, and none was written twice.
func (h *harness) endsWithNoMore() {
	h.t.Helper()
	h.inW.Close()
	for m := range h.msgs {
		h.t.Errorf("unexpected message: id %s method %q error %+v result %s", m.ID, m.Method, m.Error, m.Result)
	}
}

func (h *harness) waitStarted() {
	h.t.Helper()
	select {
	case <-h.eng.Started:
	case <-time.After(hangFloor):
		h.t.Fatal("run did not start")
	}
}

func (h *harness) serveResult(timeout time.Duration) error {
	h.t.Helper()
	timeout = max(timeout, hangFloor)
	select {
	case err := <-h.served:
		h.served <- err // for Cleanup
		return err
	case <-time.After(timeout):
		h.t.Fatalf("Serve did not return within %v", timeout)
	}
	return nil
}

func wantError(t *testing.T, m *message, code int64, msgPart string) {
	t.Helper()
	if m.Error == nil {
		t.Fatalf("response %s: result %s, want error %d", m.ID, m.Result, code)
	}
	if m.Error.Code != code || !strings.Contains(m.Error.Message, msgPart) {
		t.Errorf("response %s: error %d %q, want %d containing %q", m.ID, m.Error.Code, m.Error.Message, code, msgPart)
	}
}

func errorData(t *testing.T, m *message) map[string]any {
	t.Helper()
	var d map[string]any
	if m.Error == nil || json.Unmarshal(m.Error.Data, &d) != nil {
		t.Fatalf("response %s has no error data", m.ID)
	}
	return d
}

// sendTogether writes the bodies in one write, so the reader finds the
// later ones buffered and queues the first for the dispatcher instead of
// running it where it read it.
func sendTogether(t *testing.T, h *harness, bodies ...map[string]any) {
	t.Helper()
	var frames []byte
	for _, b := range bodies {
		body, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, "Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"...)
		frames = append(frames, body...)
	}
	h.wmu.Lock()
	defer h.wmu.Unlock()
	if _, err := h.inW.Write(frames); err != nil {
		t.Fatal(err)
	}
}

// responseWithin waits at most d (a hang bound) for the response to id.
func responseWithin(t *testing.T, h *harness, id string, d time.Duration) *message {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case m, ok := <-h.msgs:
			if !ok {
				t.Fatalf("the output ended before the response to %s", id)
			}
			if m.isResponse() && string(m.ID) == id {
				return m
			}
		case <-deadline:
			t.Fatalf("no response to %s within %v: the dispatcher is held", id, d)
		}
	}
}
