package sandboxd

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/rpctest"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
)

func serveInstances(t *testing.T, max int) *Client {
	t.Helper()
	eng := rpctest.NewInstances(max) // instances of a plugin: count, fail, trap
	srv, err := rpc.NewServer(eng, rpc.Options{MaxConcurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- srv.Serve(context.Background(), inR, outW)
		outW.Close()
	}()
	c := New(context.Background(), outR, inW, false)
	t.Cleanup(func() {
		_ = c.Close()
		inW.Close()
		select {
		case <-served:
		case <-time.After(5 * time.Second):
			t.Errorf("server did not stop")
		}
	})
	return c
}

// TestInstanceClient: Instantiate, Call and Release, and the instance
// errors as their types (each unwrapping to the response's *Error).
func TestInstanceClient(t *testing.T) {
	c := serveInstances(t, 1)
	ctx := context.Background()
	in, err := c.Instantiate(ctx, InstantiateParams{Module: mod})
	if err != nil || in.ID != "inst-fake-1" || !in.Result.Plugin {
		t.Fatalf("instantiate: %+v, %v", in, err)
	}
	_, err = c.Instantiate(ctx, InstantiateParams{Module: mod})
	var tm *TooManyInstancesError
	var e *Error
	if !errors.As(err, &tm) || tm.Instances != 1 || tm.MaxInstances != 1 || !errors.As(err, &e) || e.Code != protocol.CodeTooManyInstances {
		t.Fatalf("second instantiate: %T %v", err, err)
	}

	// Concurrent calls to one instance run one at a time, each on a turn
	// that is ready (the fake refuses any other).
	var wg sync.WaitGroup
	outs := make([]string, 20)
	for i := range outs {
		wg.Go(func() {
			res, err := in.Call(ctx, "count", CallOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			outs[i] = string(*res.Output)
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, o := range outs {
		seen[o] = true
	}
	if len(seen) != 20 {
		t.Fatalf("outputs %q: two calls ran at once or one was lost", outs)
	}

	_, err = in.Call(ctx, "fail", CallOptions{Input: []byte("x")})
	var pe *PluginError
	if !errors.As(err, &pe) || pe.Message != "failed: x" || pe.ReturnCode != 1 || pe.Function != "fail" || InstanceClosed(err) {
		t.Fatalf("fail: %T %v", err, err)
	}
	_, err = in.Call(ctx, "trap", CallOptions{})
	if !InstanceClosed(err) || !errors.As(err, &e) || e.Kind() != "trap" {
		t.Fatalf("trap: %v", err)
	}
	_, err = in.Call(ctx, "count", CallOptions{})
	var ce *InstanceClosedError
	if !errors.As(err, &ce) || ce.Instance != in.ID || ce.Reason != `closed after trap in a call of "trap"` || !errors.Is(err, ErrInstanceClosed) {
		t.Fatalf("after trap: %T %v", err, err)
	}
	if err := in.Release(ctx); err != nil {
		t.Fatalf("release of a closed instance: %v", err)
	}
}
