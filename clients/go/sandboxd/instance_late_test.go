package sandboxd

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
)

// nextReq returns the next message the silent server read, failing after
// a hang bound.
func (s *silentServer) nextReq(t *testing.T) map[string]any {
	t.Helper()
	select {
	case m := <-s.reqs:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message from the client within 10 s")
		return nil
	}
}

// TestInstantiateAnsweredAfterTheGraceIsReleased: an instantiate whose
// caller gave up (its context ended and the grace after the cancel ran
// out) but whose answer still comes, however late, names an instance
// nobody holds: the client releases it, and no handler of the returned
// caller runs. A late error releases nothing.
func TestInstantiateAnsweredAfterTheGraceIsReleased(t *testing.T) {
	old := cancelGrace
	cancelGrace = 100 * time.Millisecond
	defer func() { cancelGrace = old }()
	s := newSilentServer(t)

	var afterReturn []string
	returned := false
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := s.c.InstantiateWith(ctx, InstantiateParams{Module: ModuleSpec{WAT: Str("(module)")}},
		RunHandlers{LevelLog: func(seq int, level, line string) {
			if returned {
				afterReturn = append(afterReturn, line)
			}
		}})
	returned = true
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's", err)
	}
	if m := s.nextReq(t); m["method"] != protocol.MethodInstantiate {
		t.Fatalf("first request %v", m)
	}
	if m := s.nextReq(t); m["method"] != protocol.MethodCancel {
		t.Fatalf("second message %v, want the cancel", m)
	}
	// A second one, answered late with an error: nothing to release.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if _, err := s.c.Instantiate(ctx2, InstantiateParams{Module: ModuleSpec{WAT: Str("(module)")}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second: %v", err)
	}
	s.nextReq(t) // instantiate, id 2
	s.nextReq(t) // its cancel

	// The answers come, long after; a later call reads them.
	stats := make(chan error, 1)
	go func() { _, err := s.c.Stats(context.Background()); stats <- err }()
	if m := s.nextReq(t); m["method"] != protocol.MethodStats {
		t.Fatalf("third request %v", m)
	}
	fmt.Fprintf(s.answers, "Content-Length: %d\r\n\r\n%s", len(logFrame), logFrame)
	s.answer(1, `{"instance":"inst-late-1","moduleId":"sha256:`+strings.Repeat("a", 64)+`","exports":[]}`)
	body := `{"jsonrpc":"2.0","id":2,"error":{"code":-32800,"message":"cancelled","data":{"kind":"cancelled"}}}`
	fmt.Fprintf(s.answers, "Content-Length: %d\r\n\r\n%s", len(body), body)
	m := s.nextReq(t)
	if m["method"] != protocol.MethodRelease || m["params"].(map[string]any)["instance"] != "inst-late-1" {
		t.Fatalf("after the late answer: %v, want the release of inst-late-1", m)
	}
	s.answer(m["id"], "null")
	s.answer(3, `{"runs":{}}`)
	if err := <-stats; err != nil {
		t.Fatal(err)
	}
	if len(afterReturn) > 0 {
		t.Errorf("the returned caller's log handler ran: %q", afterReturn)
	}

	// Close: nothing more is released (the error answer named none), and
	// no goroutine of the client outlives it.
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		for m := range s.reqs {
			switch m["method"] {
			case protocol.MethodShutdown:
				s.answer(m["id"], "null")
			case protocol.MethodRelease:
				t.Errorf("a second release: %v", m)
			}
		}
	}()
	bounded(t, 15*time.Second, "Close", func() { _ = s.c.Close() })
	// Close waited for it (its Done): it is gone or on its way out. Its
	// exit announces nothing, so its stack is looked for until it is gone.
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(time.Minute); ; runtime.Gosched() {
		st := string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(st, "(*Client).releaseLate") {
			break
		}
		if time.Now().After(deadline) { // a hang bound
			t.Fatalf("a release goroutine outlived Close by a minute:\n%s", st)
		}
	}
}

// logFrame is a log line of the abandoned instantiate (id 1).
const logFrame = `{"jsonrpc":"2.0","method":"log","params":{"id":1,"seq":0,"line":"late","level":"info"}}`

// TestLateReleaseAfterCloseBegan: an answer read while Close drains (the
// sidecar is exiting, the instance with it) sends nothing.
func TestLateReleaseAfterCloseBegan(t *testing.T) {
	s := newSilentServer(t)
	s.c.mu.Lock()
	s.c.lateReleaseOK = false
	s.c.mu.Unlock()
	s.c.releaseLate("inst-x")
	s.c.lateReleases.Wait()
	select {
	case m := <-s.reqs:
		t.Fatalf("sent %v after Close began", m)
	case <-time.After(50 * time.Millisecond):
	}
}
