package sandbox_test

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox"
)

// A run's store is freed after its caller's answer is out when its
// context lets it (protocol.AfterAnswer): Run and CallOnce hand the
// close over, having forwarded the guest's output, and free the store
// themselves when the caller does not take the work.

// afterAnswer is a caller's AfterAnswer that takes the work (or not).
type afterAnswer struct {
	take  bool
	works []func()
}

func (a *afterAnswer) ctx() context.Context {
	return protocol.WithAfterAnswer(context.Background(), func(work func()) bool {
		if a.take {
			a.works = append(a.works, work)
		}
		return a.take
	})
}

// TestRunFreesItsStoreAfterTheAnswer: however the guest ends (returned,
// trapped, exited, out of fuel) its output has been forwarded when Run
// returns; its store is still held until the work handed over runs, and
// freed once however often it runs; a caller that does not take the work
// finds the store freed when Run returns.
func TestRunFreesItsStoreAfterTheAnswer(t *testing.T) {
	e := newEngine(t, sandbox.Config{})
	m, _, err := e.Compile(context.Background(), fixture(t, "print_then_end"))
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range []string{"ok", "trap", "exit", "spin"} {
		for _, take := range []bool{true, false} {
			a := &afterAnswer{take: take}
			var mu sync.Mutex
			var out string
			req := wasiRequest(m, &sandbox.WASI{})
			req.Function = fn
			if fn == "spin" {
				req.Limits.Fuel = 20_000
			}
			req.Output = func(_ string, data []byte) {
				mu.Lock()
				out += string(data)
				mu.Unlock()
			}
			_, err := e.Run(a.ctx(), req)
			if (err != nil) != (fn == "trap" || fn == "spin") {
				t.Errorf("%s: %v", fn, err)
			}
			mu.Lock()
			if out != "printed\n" {
				t.Errorf("%s (taken %v): output %q forwarded before Run returned, want %q", fn, take, out, "printed\n")
			}
			mu.Unlock()
			held := e.PoolInfo().RunsInUse
			if !take {
				if held != 0 || len(a.works) != 0 {
					t.Errorf("%s, work not taken: %d memories held in the runs' share of the pool after Run", fn, held)
				}
				continue
			}
			if len(a.works) != 1 || held == 0 {
				t.Fatalf("%s: %d works handed over, %d memories held in the runs' share of the pool after Run; want 1 and the store's", fn, len(a.works), held)
			}
			a.works[0]()
			a.works[0]() // twice: freed once
			if held := e.PoolInfo().RunsInUse; held != 0 {
				t.Errorf("%s: %d memories held in the runs' share of the pool after the work", fn, held)
			}
		}
	}
}

// TestCallOnceReleasesAfterTheAnswer: a plugin run's one-shot instance
// is released after the answer (its store freed once however often the
// work runs); one that a fence closed was freed in its call already.
func TestCallOnceReleasesAfterTheAnswer(t *testing.T) {
	e := newEngine(t, sandbox.Config{})
	wat, err := os.ReadFile("../testdata/plugins/wat/plugin.wat")
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := e.Compile(context.Background(), sandbox.Source{WAT: string(wat)})
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range []string{"echo", "fail", "spin"} {
		a := &afterAnswer{take: true}
		req := sandbox.InstanceRequest{Module: m, Limits: hangLimits()}
		call := sandbox.CallRequest{Function: fn, Input: []byte("hi")}
		if fn == "spin" {
			call.Limits.Fuel = 20_000
		}
		res, err := e.CallOnce(a.ctx(), req, call)
		if fn == "echo" && (err != nil || string(res.PluginOutput) != "hi") {
			t.Errorf("echo: %+v %v", res, err)
		}
		held := e.PoolInfo().RunsInUse
		fenced := fn == "spin" // a fence closes the instance, and frees its store, in the call
		if len(a.works) != 1 || held == 0 && !fenced {
			t.Fatalf("%s: %d works handed over, %d memories held in the runs' share of the pool after CallOnce; want 1 and the store's", fn, len(a.works), held)
		}
		a.works[0]()
		a.works[0]()
		if held := e.PoolInfo().RunsInUse; held != 0 {
			t.Errorf("%s: %d memories held in the runs' share of the pool after the work", fn, held)
		}
	}
}
