package sandbox_test

import (
	"context"
	"errors"
	"regexp"
	"testing"

	"github.com/sandboxd/sandboxd/sandbox"
)

func isReady(t *sandbox.Turn) bool {
	select {
	case <-t.Ready():
		return true
	default:
		return false
	}
}

// TestTurnReady: a server waits on Turn.Ready instead of blocking a worker
// in Call. A turn behind another is ready once the one before is done (or
// abandoned), and at once when the instance closes; Call on a ready turn
// does not wait.
func TestTurnReady(t *testing.T) {
	t.Parallel()
	in := instantiate(t, engine(t), statefulWAT, nil)
	first, second, third := in.Enqueue(), in.Enqueue(), in.Enqueue()
	if !isReady(first) || isReady(second) || isReady(third) {
		t.Fatalf("ready: %v %v %v, want only the first", isReady(first), isReady(second), isReady(third))
	}
	if _, err := first.Call(context.Background(), sandbox.CallRequest{Function: "swap", Args: []sandbox.Value{sandbox.ValueI32(1)}}); err != nil {
		t.Fatal(err)
	}
	if !isReady(second) || isReady(third) {
		t.Fatal("after the first call, the second turn should be ready and the third not")
	}
	second.Abandon()
	if !isReady(third) {
		t.Fatal("an abandoned turn did not hand on")
	}
	res, err := third.Call(context.Background(), sandbox.CallRequest{Function: "swap", Args: []sandbox.Value{sandbox.ValueI32(3)}})
	if err != nil || res.Values[0].I32() != 1 {
		t.Fatalf("third call: %v, %v (want the first call's 1)", res, err)
	}

	held, waiting := in.Enqueue(), in.Enqueue()
	in.Release()
	if !isReady(waiting) {
		t.Fatal("a waiting turn is not ready once its instance closed")
	}
	if _, err := waiting.Call(context.Background(), sandbox.CallRequest{Function: "peek"}); !errors.Is(err, sandbox.ErrInstanceClosed) {
		t.Fatalf("waiting turn of a released instance: %v", err)
	}
	held.Abandon()
}

// TestInstanceIDs: ids are "inst-<random>-<n>", the random part differing
// between engines (processes), and a closed instance is named with why.
func TestInstanceIDs(t *testing.T) {
	t.Parallel()
	pat := regexp.MustCompile(`^inst-([0-9a-f]{12})-([0-9]+)$`)
	a1 := instantiate(t, engine(t), statefulWAT, nil)
	e2, err := sandbox.NewEngine(sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	b1 := instantiate(t, e2, statefulWAT, nil)
	ma, mb := pat.FindStringSubmatch(a1.ID()), pat.FindStringSubmatch(b1.ID())
	if ma == nil || mb == nil || ma[1] == mb[1] {
		t.Fatalf("ids %q and %q: want inst-<12 hex>-<n> with different random parts", a1.ID(), b1.ID())
	}
	b1.Release()
	_, err = e2.LookupInstance(b1.ID())
	var ce *sandbox.InstanceClosedError
	if !errors.As(err, &ce) || ce.Reason != "released" {
		t.Fatalf("lookup of a released instance: %v", err)
	}
}

// Close closes an instance as Release does, with the caller's reason:
// later calls, waiting turns and LookupInstance all give it, and the
// first reason stays.
func TestInstanceCloseGivesItsReason(t *testing.T) {
	e := engine(t)
	in := instantiate(t, e, statefulWAT, nil)
	running := in.Enqueue()
	queued := in.Enqueue()
	const reason = "closed after the guest said it cannot go on"
	in.Close(reason)
	in.Close("a second reason")
	in.Release()
	_, err := queued.Call(context.Background(), sandbox.CallRequest{Function: "peek"})
	wantClosed(t, err, reason)
	_, err = running.Call(context.Background(), sandbox.CallRequest{Function: "peek"})
	wantClosed(t, err, reason)
	_, err = e.LookupInstance(in.ID())
	wantClosed(t, err, reason)
}
