package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/protocol"
)

// TestGoClientReleasesALateInstantiate: the Go client against the real
// sidecar, through a pipe that loses the client's $/cancelRequest and
// holds the instantiate's answer until the client has given up (its
// context ended and the 5 s grace ran out), as a stalled pipe or machine
// would. The instance that answer names is released as soon as the
// answer is read (here by a later stats call), not left live until idle
// eviction (10 minutes by default).
func TestGoClientReleasesALateInstantiate(t *testing.T) {
	t.Parallel()
	stderr := &syncBuffer{}
	cmd := exec.Command(binPath, "serve", "--framing=ndjson")
	cmd.Stderr = stderr
	sidecarIn, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	sidecarOut, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	clientOutR, clientOutW, err := os.Pipe() // what the client writes
	if err != nil {
		t.Fatal(err)
	}
	clientInR, clientInW, err := os.Pipe() // what the client reads
	if err != nil {
		t.Fatal(err)
	}
	go func() { // client → sidecar, without the cancels
		defer sidecarIn.Close()
		sc := bufio.NewScanner(clientOutR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if strings.Contains(sc.Text(), `"`+protocol.MethodCancel+`"`) {
				continue
			}
			if _, err := sidecarIn.Write(append(sc.Bytes(), '\n')); err != nil {
				return
			}
		}
	}()
	gaveUp := make(chan struct{})
	held := make(chan string, 1)
	go func() { // sidecar → client, the instantiate's answer (id 1) held
		defer clientInW.Close()
		br := bufio.NewReader(sidecarOut)
		for {
			line, err := br.ReadBytes('\n')
			if err != nil {
				return
			}
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal(line, &m) == nil && m.Method == "" && string(m.ID) == "1" {
				held <- string(line)
				<-gaveUp
			}
			if _, err := clientInW.Write(line); err != nil {
				return
			}
		}
	}()
	c := sandboxd.New(context.Background(), clientInR, clientOutW, true)
	t.Cleanup(func() {
		_ = c.Close()
		if _, _, killed := waitTimeout(cmd, 10*time.Second); killed {
			t.Error("sidecar did not exit after Close; killed")
		}
		clientInR.Close()
		clientOutR.Close()
		if t.Failed() {
			t.Logf("sidecar stderr:\n%s", stderr.String())
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	in, err := c.Instantiate(ctx, sandboxd.InstantiateParams{Module: protocol.ModuleSpec{WAT: sandboxd.Str(statefulWAT)}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Instantiate = %v, %v; want the context's error after the grace", in, err)
	}
	answer := <-held
	if !strings.Contains(answer, `"instance":"inst-`) {
		t.Fatalf("the held answer made no instance: %s", answer)
	}
	close(gaveUp)

	live := -1
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		st, err := c.Stats(context.Background())
		if err != nil || st.Instances == nil {
			t.Fatalf("stats: %+v, %v", st, err)
		}
		if live = st.Instances.Live; live == 0 {
			break
		}
	}
	if live != 0 {
		t.Fatalf("%d instance(s) still live 30 s after the late answer %s was read", live, answer)
	}
}
