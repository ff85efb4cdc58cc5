package main

// sandboxd mcp against a client that writes calls and does not read the
// answers: the server is pushed back (--output-high-water), its memory
// stays bounded, and once the client reads every call is answered once.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestMCPClientNotReadingIsPushedBack: a client writes calls whose runs
// print 8 MiB each (run_snippet, half of them with a progress token, so
// both answers and progress notifications wait) and reads nothing for
// half a minute. Before the high water, every finished call held its
// answer (about ten times its output) while waiting for the pipe, and
// the server grew by about 50 MB a second (red team rt22, finding 1:
// past 4 GB in 25 s). With it, what waits is the high water (64 MiB)
// plus the answers of the --max-concurrency runs started before it was
// reached, on top of the runtimes, their spares and the Go heap's
// slack: peaks of 983 and 1049 MiB were measured here, so the bound
// checked is 2 GiB, which the server without it passed in about 13 s.
// Then the client reads,
// and every call is answered exactly once, successfully: nothing was
// dropped.
func TestMCPClientNotReadingIsPushedBack(t *testing.T) {
	const (
		calls  = 80
		bound  = 2 << 30
		window = 30 * time.Second // how long the client does not read (a measurement, not a bound)
	)
	cmd := exec.Command(evalBin(t), "mcp", "--max-concurrency", "2")
	cmd.Env = append(os.Environ(), "SANDBOXD_RUNTIMES=") // the runtimes next to the binary
	stdin, stdout, stderr := startPiped(t, cmd)
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	send := func(m map[string]any) error {
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		_, err = stdin.Write(append(b, '\n'))
		return err
	}
	_ = send(map[string]any{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"}}})
	_ = send(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	sent := make(chan int, 1)
	go func() { // the writes block once the server stops reading
		n := 0
		defer func() { sent <- n }()
		for id := 1; id <= calls; id++ {
			params := map[string]any{"name": "run_snippet", "arguments": map[string]any{"language": "js",
				"code":   "const s = 'z'.repeat(1 << 20); for (let i = 0; i < 8; i++) console.log(s); 1",
				"limits": map[string]any{"timeoutMs": 20000, "outputBytes": 1 << 26}}}
			if id%2 == 1 {
				params["_meta"] = map[string]any{"progressToken": id}
			}
			if send(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}) != nil {
				return
			}
			n++
		}
	}()

	var peak uint64
	for end := time.Now().Add(window); time.Now().Before(end) && peak <= bound; time.Sleep(250 * time.Millisecond) {
		rss, err := vmRSS(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		peak = max(peak, rss)
	}
	if peak > bound {
		t.Fatalf("a client that does not read grew the server to %s (bound %s)\nstderr:\n%s", mib(peak), mib(bound), stderr.String())
	}
	t.Logf("peak RSS %s while the client did not read", mib(peak))

	// Now read: every call answered once, none failed, progress before
	// its call's answer.
	answered := map[int]int{}
	lines := bufio.NewReaderSize(stdout, 1<<20)
	done := make(chan error, 1)
	go func() {
		for len(answered) < calls+1 {
			line, err := lines.ReadBytes('\n')
			if err != nil {
				done <- fmt.Errorf("after %d answers: %w", len(answered), err)
				return
			}
			var m struct {
				ID     *int   `json:"id"`
				Method string `json:"method"`
				Params struct {
					ProgressToken *int `json:"progressToken"`
				} `json:"params"`
				Result struct {
					IsError bool `json:"isError"`
				} `json:"result"`
				Error *json.RawMessage `json:"error"`
			}
			if err := json.Unmarshal(line, &m); err != nil {
				done <- fmt.Errorf("not a message (%d bytes): %w", len(line), err)
				return
			}
			switch {
			case m.Method == "notifications/progress":
				if tok := m.Params.ProgressToken; tok == nil || answered[*tok] > 0 {
					done <- fmt.Errorf("a progress notification after its call's answer, or without a token: %.200s", line)
					return
				}
			case m.ID == nil:
				done <- fmt.Errorf("unexpected message: %.200s", line)
				return
			case m.Error != nil || m.Result.IsError:
				done <- fmt.Errorf("call %d failed: %.500s", *m.ID, line)
				return
			default:
				answered[*m.ID]++
				if answered[*m.ID] > 1 {
					done <- fmt.Errorf("call %d answered twice", *m.ID)
					return
				}
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("reading the answers: %v\nstderr:\n%s", err, stderr.String())
		}
	case <-time.After(5 * mcpHang):
		t.Fatalf("reading the answers: not all %d after %v", calls+1, 5*mcpHang)
	}
	if n := <-sent; n != calls {
		t.Errorf("the client wrote %d calls of %d", n, calls)
	}
	_ = stdin.Close()
	if _, err := io.Copy(io.Discard, stdout); err != nil {
		t.Error(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("sandboxd mcp: %v\nstderr:\n%s", err, stderr.String())
	}
}
