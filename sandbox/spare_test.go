package sandbox_test

import (
	"context"
	"testing"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// A one-shot engine (the CLI) uses the spare it started when opened for
// its compile, even when the compile comes before that spare has started,
// and starts no spare after it; a long-lived engine keeps one ready.
func TestSpareChildren(t *testing.T) {
	for _, tc := range []struct {
		oneShot bool
		starts  int64 // children started by one compile and Close
	}{{oneShot: true, starts: 1}, {oneShot: false, starts: 2}} {
		eng, err := sandbox.NewEngine(sandbox.Config{OneShot: tc.oneShot})
		if err != nil {
			t.Fatal(err)
		}
		// At once, as the CLI does: the spare is usually still starting.
		mod, _, err := eng.Compile(context.Background(), sandbox.Source{WAT: `(module (func (export "f")))`})
		if err != nil {
			eng.Close()
			t.Fatal(err)
		}
		if _, err := eng.Run(context.Background(), sandbox.Request{Module: mod, Function: "f", Limits: limits.Defaults()}); err != nil {
			t.Errorf("oneShot=%v: run: %v", tc.oneShot, err)
		}
		eng.Close() // waits for a spare being started
		if got := sandbox.ChildStarts(eng); got != tc.starts {
			t.Errorf("oneShot=%v: %d compile children started, want %d", tc.oneShot, got, tc.starts)
		}
	}
}
