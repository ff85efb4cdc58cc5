package sandboxd

// What the client does with an answer that comes late, or never: a
// server of the test's that answers only when told to.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
)

// silentServer reads requests and answers only when told, over os.Pipes
// (which have read deadlines, as Start's pipes do) or io.Pipes.
type silentServer struct {
	c       *Client
	reqs    chan map[string]any
	answers *os.File
}

func newSilentServer(t *testing.T) *silentServer {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &silentServer{reqs: make(chan map[string]any, 100), answers: outW}
	go func() {
		fr := newFrameReader(inR, false)
		for {
			body, err := fr.next()
			if err != nil {
				close(s.reqs)
				return
			}
			var m map[string]any
			_ = json.Unmarshal(body, &m)
			s.reqs <- m
		}
	}()
	s.c = New(context.Background(), outR, inW, false)
	t.Cleanup(func() { inW.Close(); outW.Close(); outR.Close(); inR.Close() })
	return s
}

func (s *silentServer) answer(id any, result string) {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%v,"result":%s}`, id, result)
	fmt.Fprintf(s.answers, "Content-Length: %d\r\n\r\n%s", len(body), body)
}

func TestCancelGraceRunsOut(t *testing.T) {
	old := cancelGrace
	cancelGrace = 200 * time.Millisecond
	defer func() { cancelGrace = old }()
	s := newSilentServer(t)

	// One call alone: it is blocked reading when its grace runs out, and
	// the read deadline wakes it.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := s.c.Call(ctx, "run", map[string]any{}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's", err)
	}
	// The grace is honoured (not before 250 ms); the upper bound only
	// detects a call that the read deadline did not wake.
	if d := time.Since(start); d < 250*time.Millisecond || d > time.Minute {
		t.Fatalf("gave up after %v, want about 250ms", d)
	}
	if m := <-s.reqs; m["method"] != "run" {
		t.Fatalf("first request %v", m)
	}
	if m := <-s.reqs; m["method"] != protocol.MethodCancel || m["params"].(map[string]any)["id"] != 1.0 {
		t.Fatalf("second message %v, want a cancel of id 1", m)
	}

	// Two: one with a context that ends, one waiting for an answer. The
	// late answer to the abandoned call is dropped; the other still works.
	got := make(chan error, 1)
	go func() {
		var v int
		err := s.c.Call(context.Background(), "stats", nil, &v)
		if err == nil && v != 7 {
			err = fmt.Errorf("got %d", v)
		}
		got <- err
	}()
	<-s.reqs // stats, id 2
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if err := s.c.Call(ctx2, "run", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second: %v", err)
	}
	s.answer(3, "1") // too late
	s.answer(2, "7")
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stats call hangs")
	}
}
