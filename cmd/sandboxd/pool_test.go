package main

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/protocol"
)

// sixteenMemories defines 16 memories (limits.memories 16, the default
// maximum), each a page.
var sixteenMemories = "(module" + strings.Repeat(" (memory 1)", 16) + ` (func (export "f") (result i32) i32.const 16))`

// TestPoolInstancesShareIsShort: with --max-instances 2 the instances'
// share of the pool holds one typical instance and one of the largest
// (16 memories); a second instance of 16 memories is refused -32002 with
// one live, its message naming the pool, while runs (their own share) go
// on; a release makes room.
func TestPoolInstancesShareIsShort(t *testing.T) {
	t.Parallel()
	c, _ := startClient(t, binPath, "--max-instances", "2")
	mod := sandboxd.InstantiateParams{Module: protocol.ModuleSpec{WAT: sandboxd.Str(sixteenMemories)},
		Limits: hangLimits(map[string]uint64{"memories": 16})}
	a := instantiate(t, c, mod)
	_, err := c.Instantiate(ctxT(t, time.Minute), mod)
	var tm *sandboxd.TooManyInstancesError
	if !errors.As(err, &tm) || tm.Instances != 1 || tm.MaxInstances != 2 || !strings.Contains(asRPCError(t, err).Message, "pool") {
		t.Fatalf("second instantiate: %T %v", err, err)
	}
	res, err := c.Run(ctxT(t, time.Minute), sandboxd.RunParams{Module: mod.Module, Function: "f", Limits: mod.Limits}, nil)
	if err != nil || len(res.Values) != 1 || string(res.Values[0].Value) != "16" {
		t.Fatalf("a run while the instances' share is short: %+v %v", res, err)
	}
	if err := a.Release(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	instantiate(t, c, mod)
}

// TestPoolOff: --pool=false serves as before (each run maps its own
// memory); --pool-keep-resident past 1 GiB is refused at start.
func TestPoolOff(t *testing.T) {
	t.Parallel()
	c, _ := startClient(t, binPath, "--pool=false")
	res, err := c.Run(ctxT(t, time.Minute), sandboxd.RunParams{Module: protocol.ModuleSpec{WAT: sandboxd.Str(sixteenMemories)},
		Function: "f", Limits: hangLimits(map[string]uint64{"memories": 16})}, nil)
	if err != nil || len(res.Values) != 1 || string(res.Values[0].Value) != "16" {
		t.Fatalf("run without a pool: %+v %v", res, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, binPath, "serve", "--pool-keep-resident", "2147483648").CombinedOutput()
	if exitCode(err) != exitServeNoShutdown || !strings.Contains(string(out), "keep resident") {
		t.Fatalf("serve --pool-keep-resident 2 GiB: %v\n%s", err, out)
	}
}
