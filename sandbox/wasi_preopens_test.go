package sandbox_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/sandbox"
)

// guestIn compiles testdata/wasi's file on e.
func guestIn(t *testing.T, e *sandbox.Engine, file string) *sandbox.Module {
	t.Helper()
	m, _, err := e.Compile(context.Background(), sandbox.Source{Path: filepath.Join("..", "testdata", "wasi", file)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestGrantedDirCannotBeSwappedForALink: a directory of a dirs grant is
// checked and preopened as one open descriptor, so replacing it with a
// symlink to a directory outside every allowed root (as a run granted
// its parent writable can) never gives a run that directory. Before, the
// name was resolved and checked, then preopened by name after the files
// grant was laid out: a swap in between escaped (the files widen the
// window).
func TestGrantedDirCannotBeSwappedForALink(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "f"), []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	sub, hold := filepath.Join(root, "sub"), filepath.Join(root, "hold")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "f"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, sandbox.Config{WASIDirs: []string{root}})
	m := guestIn(t, e, "guest_c.wasm")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the attacker: sub is the real directory, then a link out, and back
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if os.Rename(sub, hold) == nil {
				os.Symlink(outside, sub)
				os.Remove(sub)
				os.Rename(hold, sub)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	files := map[string][]byte{}
	for i := range 300 {
		files["/x/"+strings.Repeat("f", 1+i%50)+string(rune('a'+i%26))+"/"+string(rune('a'+i/26))] = []byte("x")
	}
	inside := 0
	for range 60 {
		req := wasiRequest(m, &sandbox.WASI{Args: []string{"cat", "/d/f"}, Files: files,
			Dirs: []sandbox.Dir{{Host: sub, Guest: "/d"}}})
		res, err := e.Run(context.Background(), req)
		if err != nil {
			continue // the link was there when the grant was checked: refused
		}
		switch got := string(res.Output.Stdout); got {
		case "outside":
			t.Fatal("a run granted root/sub read the directory outside every root it was swapped for")
		case "inside":
			inside++
		}
	}
	t.Logf("%d of 60 runs saw the real directory; the rest were refused or found it renamed away", inside)
}

// TestFilesTreesAreOutsideAllowedRoots: the sidecar's files trees live in
// a private directory that no allowed root contains, even when TMPDIR is
// inside one, so a run granted that root cannot read a live instance's
// files. Before, the trees were made in TMPDIR.
func TestFilesTreesAreOutsideAllowedRoots(t *testing.T) {
	root := t.TempDir()
	tmp := filepath.Join(root, "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	e, err := sandbox.NewEngine(sandbox.Config{WASIDirs: []string{root}})
	if err != nil {
		t.Fatal(err)
	}
	m := guestIn(t, e, "guest_c.wasm")
	in, err := e.Instantiate(context.Background(), sandbox.InstanceRequest{Module: m, Limits: hangLimits(),
		Capabilities: sandbox.Capabilities{WASI: &sandbox.WASI{Files: map[string][]byte{"/secret-of-another-run": []byte("s")}}}})
	if err != nil {
		t.Fatal(err)
	}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "secret-of-another-run" {
			t.Errorf("a live instance's files are under an allowed root: %s", p)
		}
		return nil
	})
	// The private directory is the sidecar's own, and goes with the engine.
	private := ""
	for _, base := range []string{"/dev/shm", "/var/tmp", "/tmp"} {
		matches, _ := filepath.Glob(filepath.Join(base, "sandboxd-*", "files-*", "secret-of-another-run"))
		if len(matches) > 0 {
			private = filepath.Dir(filepath.Dir(matches[0]))
		}
	}
	if private == "" {
		t.Fatal("the instance's files tree was not found in a private directory")
	}
	if fi, err := os.Stat(private); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("private directory %s: %v, mode %v; want 0700", private, err, fi.Mode())
	}
	in.Release()
	e.Close()
	if _, err := os.Stat(private); !os.IsNotExist(err) {
		t.Errorf("the private directory outlived its engine: %v", err)
	}
}

// TestCacheDirMustNotOverlapAllowedDirs: the compile cache holds machine
// code the engine loads; a directory guests may be granted (writable)
// must not contain it or lie inside it.
func TestCacheDirMustNotOverlapAllowedDirs(t *testing.T) {
	root := t.TempDir()
	for _, c := range []struct{ cache, allowed string }{
		{filepath.Join(root, "cache"), root},
		{root, filepath.Join(root, "data")},
	} {
		os.MkdirAll(c.allowed, 0o755)
		e, err := sandbox.NewEngine(sandbox.Config{CacheDir: c.cache, WASIDirs: []string{c.allowed}})
		if err == nil {
			e.Close()
			t.Errorf("cache %s with --allow-dir %s: accepted", c.cache, c.allowed)
		} else if !strings.Contains(err.Error(), "overlap") {
			t.Errorf("cache %s with --allow-dir %s: %v", c.cache, c.allowed, err)
		}
	}
}

// TestKernelFileSystemsAreNeverGranted: with the whole machine allowed
// (--allow-dir /), a dirs grant of /proc, or of a directory with /proc
// mounted under it, is refused: /proc/self/mem is the sidecar's own
// memory (a guest read another instance's stdin out of it, and wrote).
func TestKernelFileSystemsAreNeverGranted(t *testing.T) {
	e := newEngine(t, sandbox.Config{WASIDirs: []string{"/"}})
	m, _, err := e.Compile(context.Background(), sandbox.Source{WAT: strings.ReplaceAll(wasiHello, "CODE", "0")})
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"/proc", "/proc/self", "/", "/sys"} {
		_, err = e.Run(context.Background(), wasiRequest(m, &sandbox.WASI{Dirs: []sandbox.Dir{{Host: host, Guest: "/d"}}}))
		var ge *sandbox.GrantError
		if !errors.As(err, &ge) || !strings.Contains(ge.Problem, "cannot be preopened") {
			t.Errorf("a grant of %s: %v", host, err)
		}
	}
	if _, err := e.Run(context.Background(), wasiRequest(m, &sandbox.WASI{Dirs: []sandbox.Dir{{Host: t.TempDir(), Guest: "/d"}}})); err != nil {
		t.Errorf("an ordinary directory: %v", err)
	}
}

// TestPreopensWithinMaxOpenFiles: the preopens are descriptors of the
// store too; more of them than --max-open-files is the parent's mistake
// (they were held regardless: 64 dirs under a limit of 4).
func TestPreopensWithinMaxOpenFiles(t *testing.T) {
	dir := t.TempDir()
	e := newEngine(t, sandbox.Config{WASIDirs: []string{dir}, MaxOpenFiles: 2})
	m, _, err := e.Compile(context.Background(), sandbox.Source{WAT: strings.ReplaceAll(wasiHello, "CODE", "0")})
	if err != nil {
		t.Fatal(err)
	}
	dirs := []sandbox.Dir{{Host: dir, Guest: "/a"}, {Host: dir, Guest: "/b"}, {Host: dir, Guest: "/c"}}
	_, err = e.Run(context.Background(), wasiRequest(m, &sandbox.WASI{Dirs: dirs}))
	var ge *sandbox.GrantError
	if !errors.As(err, &ge) || !strings.Contains(ge.Problem, "--max-open-files") {
		t.Errorf("3 dirs under --max-open-files 2: %v", err)
	}
	if _, err := e.Run(context.Background(), wasiRequest(m, &sandbox.WASI{Dirs: dirs[:2]})); err != nil {
		t.Errorf("2 dirs: %v", err)
	}
}
