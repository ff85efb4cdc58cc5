package snippet_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/snippet"
)

func newTestEngine(t *testing.T) *sandbox.Engine {
	t.Helper()
	eng, err := sandbox.NewEngine(sandbox.Config{OneShot: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng
}

// TestRunnerRefusesRuntimeDirsOthersCanWrite: a runtimes' directory, or
// a compiled one, that group or others can write is refused when the
// Runner is made, naming it and the fix; directories that do not exist
// yet are not (a sidecar without runtimes serves the rest).
func TestRunnerRefusesRuntimeDirsOthersCanWrite(t *testing.T) {
	t.Parallel()
	eng := newTestEngine(t)
	base := t.TempDir()
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(base, "own")
	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(base, "missing")
	for _, c := range []struct {
		name     string
		cfg      snippet.Config
		refusing string
	}{
		{"runtimes dir writable by others", snippet.Config{Dir: open, CompiledDirs: []string{own}}, open},
		{"compiled dir writable by others", snippet.Config{Dir: own, CompiledDirs: []string{missing, open}}, open},
		{"own dirs", snippet.Config{Dir: own, CompiledDirs: []string{own}}, ""},
		{"dirs not made yet", snippet.Config{Dir: missing, CompiledDirs: []string{missing}}, ""},
	} {
		r, err := snippet.New(eng, c.cfg)
		if r != nil {
			r.Close()
		}
		switch {
		case c.refusing == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.refusing != "" && (err == nil || !strings.Contains(err.Error(), c.refusing) || !strings.Contains(err.Error(), "chmod go-w "+c.refusing)):
			t.Errorf("%s: %v, want it refused naming %s and the fix", c.name, err, c.refusing)
		}
	}
}

// TestRuntimeFIFOIsNotWaitedOn: a FIFO where a runtime's file should be
// fails the evaluation at once, naming what it is, instead of waiting
// for a writer forever.
func TestRuntimeFIFOIsNotWaitedOn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, snippet.RuntimeFile(protocol.LanguageLua)), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := snippet.New(newTestEngine(t), snippet.Config{Dir: dir, CompiledDirs: []string{dir}, Spares: snippet.NoSpares})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	done := make(chan error, 1)
	go func() {
		_, err := r.Eval(context.Background(), protocol.Eval{Language: protocol.LanguageLua, Snippet: protocol.Snippet{Code: "return 1"}})
		done <- err
	}()
	select {
	case err := <-done:
		if sandbox.KindOf(err) != sandbox.KindHost || !strings.Contains(err.Error(), "a FIFO") {
			t.Errorf("eval with a FIFO for a runtime: %v, want a host error naming the FIFO", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the evaluation waited on the FIFO")
	}
}
