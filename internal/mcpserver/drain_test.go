package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	initializeLine = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"pipe","version":"1"}}}`
	runLine        = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_export","arguments":{"module":{"wat":"(module)"},"function":"run"}}}`
	blockLine      = `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_export","arguments":{"module":{"wat":"(module)"},"function":"block"}}}`
)

// lockedBuffer is an output that a test reads once Serve has returned.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// answers serves input (which ends at once) and returns the answers
// written, by id, and how long Serve took.
func answers(t *testing.T, input string) (map[string]map[string]any, time.Duration) {
	t.Helper()
	srv, err := New(newEngine(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var out lockedBuffer
	start := time.Now()
	if err := srv.Serve(context.Background(), strings.NewReader(input), &out); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	took := time.Since(start)
	got := map[string]map[string]any{}
	sc := bufio.NewScanner(&out.b)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("a line that is not JSON: %q", sc.Bytes())
		}
		if id, ok := m["id"]; ok {
			got[fmt.Sprint(id)] = m
		}
	}
	return got, took
}

// `printf '<initialize>\n<tools/call>\n' | sandboxd mcp`: the input ends
// right after the calls, before the SDK has handled them. The SDK
// cancelled its calls and refused every write as soon as the transport
// reported the end, so the answers were lost (nothing was written 19
// times in 20); the transport now reports it once every call read is
// answered.
func TestEveryCallReadIsAnsweredWhenTheInputEnds(t *testing.T) {
	for i := range 50 {
		got, _ := answers(t, initializeLine+"\n"+runLine+"\n")
		if got["0"]["result"] == nil {
			t.Fatalf("try %d: initialize not answered: %v", i, got)
		}
		res, _ := got["1"]["result"].(map[string]any)
		if res == nil || res["isError"] == true || !strings.Contains(fmt.Sprint(res["structuredContent"]), "value:42") {
			t.Fatalf("try %d: the tool call: %v", i, got["1"])
		}
	}
}

// A call still running when the input ends is cancelled after
// drainGrace, and its answer (kind cancelled) is written; Serve returns
// within the drain bound.
func TestACallRunningWhenTheInputEndsIsAnsweredCancelled(t *testing.T) {
	got, took := answers(t, initializeLine+"\n"+runLine+"\n"+blockLine+"\n")
	if got["1"]["result"] == nil {
		t.Errorf("the quick call: %v", got["1"])
	}
	res, _ := got["2"]["result"].(map[string]any)
	if res == nil || res["isError"] != true || !strings.Contains(fmt.Sprint(res["structuredContent"]), "kind:cancelled") {
		t.Errorf("the blocked call: %v", got["2"])
	}
	if took < drainGrace || took > drainTimeout+4*time.Second { // the upper bound catches a hang, timing nothing
		t.Errorf("Serve took %v; want drainGrace (%v) to about drainTimeout (%v)", took, drainGrace, drainTimeout)
	}
}

// slowReader reads r a piece at a time, pausing between pieces: a client
// that keeps reading, more slowly than the server writes.
type slowReader struct {
	r     io.Reader
	piece int
	pause time.Duration
}

func (s slowReader) Read(p []byte) (int, error) {
	time.Sleep(s.pause)
	return s.r.Read(p[:min(len(p), s.piece)])
}

// When the input ends, a client that keeps reading gets every answer
// whole however long reading them takes: the output is abandoned only
// once nothing of it was read for drainTimeout. It was abandoned
// drainTimeout after the end whatever the client did (four answers of
// 8 MB read at full speed lost some, one cut mid-line), and an answer
// still waiting for the pipe when the last call was released was
// dropped as the connection closed.
func TestAClientThatKeepsReadingGetsEveryAnswerWhole(t *testing.T) {
	const calls, outputBytes = 4, 1 << 20
	srv, err := New(newEngine(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	input := initializeLine + "\n"
	for id := 1; id <= calls; id++ {
		input += fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run_wasi","arguments":{"module":{"wat":"(module)"},"args":["zeros:%d","2>zeros:%d"],"limits":{"outputBytes":%d}}}}`+"\n",
			id, outputBytes, outputBytes, outputBytes)
	}
	cr, sw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- srv.Serve(context.Background(), strings.NewReader(input), sw)
		sw.Close()
	}()
	// 8 KiB every 2 ms at most: the answers (about 11 MB) take seconds
	// to read, past drainTimeout.
	r := bufio.NewReaderSize(slowReader{r: cr, piece: 8 << 10, pause: 2 * time.Millisecond}, 1<<20)
	got := map[string]bool{}
	var total int
	for {
		line, err := r.ReadBytes('\n')
		total += len(line)
		if err != nil {
			if len(line) > 0 {
				t.Errorf("a line cut after %d bytes", len(line))
			}
			break
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("a line that is not JSON: %.200q", line)
		}
		if m["result"] == nil {
			t.Errorf("answered %.200s", line)
		}
		got[fmt.Sprint(m["id"])] = true
	}
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
	t.Logf("read %d bytes", total)
	for id := range calls + 1 {
		if !got[fmt.Sprint(id)] {
			t.Errorf("call %d not answered (answers: %v)", id, got)
		}
	}
}
