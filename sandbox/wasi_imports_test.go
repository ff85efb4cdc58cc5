package sandbox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox"
)

func TestWASIRefusedWithoutGrant(t *testing.T) {
	wat := strings.ReplaceAll(wasiHello, "CODE", "0")
	m := compileWAT(t, wat)
	_, err := engine(t).Run(context.Background(), sandbox.Request{Module: m, Limits: hangLimits()})
	se := wantKind(t, err, sandbox.KindDisallowedImport)
	for _, fn := range []string{"fd_write", "proc_exit", "args_sizes_get"} {
		if !strings.Contains(se.Message, fn) {
			t.Errorf("message %q does not name %s", se.Message, fn)
		}
	}
	if se.Module != sandbox.WASIModule {
		t.Errorf("module = %q", se.Module)
	}

	// The same refusal from the bytes alone, before anything is compiled.
	e := newEngine(t, sandbox.Config{})
	err = e.CheckWASIGrant(sandbox.Source{WAT: wat}, sandbox.Capabilities{})
	var pre *sandbox.Error
	if !errors.As(err, &pre) || pre.Kind != sandbox.KindDisallowedImport || pre.Message != se.Message {
		t.Fatalf("CheckWASIGrant = %v, want %v", err, se)
	}
	if st := e.CacheStats(); st.Misses != 0 || st.Entries != 0 {
		t.Errorf("CheckWASIGrant compiled something: %+v", st)
	}
	if err := e.CheckWASIGrant(sandbox.Source{WAT: wat}, sandbox.Capabilities{WASI: &sandbox.WASI{}}); err != nil {
		t.Errorf("with the grant: %v", err)
	}
	if err := e.CheckWASIGrant(sandbox.Source{WAT: `(module)`}, sandbox.Capabilities{}); err != nil {
		t.Errorf("no WASI imports: %v", err)
	}
}

// The preview1 functions initialize lists are the ones the engine links.
func TestWASIFunctionsAgree(t *testing.T) {
	if got, want := protocol.WASIFunctions(), sandbox.WASIFunctions(); !slices.Equal(got, want) {
		t.Errorf("protocol lists %v\nthe engine links %v", got, want)
	}
}
