package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
)

// nobody is a uid other than the test's: files chowned to it belong to
// another user.
const nobody = 65534

// needRoot skips a test that must give files to another user.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("giving a file to another user (chown) needs root")
	}
}

func mkdirMode(t *testing.T, path string, mode os.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask, sticky included
		t.Fatal(err)
	}
	return path
}

// TestCacheDirMustBeTrusted: NewEngine refuses a CacheDir another user
// could write or replace (it, or a parent that is not sticky, writable by
// group or others; owned by another user; reached through another user's
// link), naming the directory and the fix, and accepts one that only its
// user and root can change, below a sticky parent like /tmp.
func TestCacheDirMustBeTrusted(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	open := func(dir string) error {
		e, err := sandbox.NewEngine(sandbox.Config{CacheDir: dir})
		if e != nil {
			e.Close()
		}
		return err
	}
	refused := func(name, dir, names, fix string) {
		t.Helper()
		err := open(dir)
		if err == nil {
			t.Errorf("%s: %s accepted", name, dir)
			return
		}
		if msg := err.Error(); !strings.Contains(msg, names) || !strings.Contains(msg, fix) {
			t.Errorf("%s: %q, want it to name %s and say %q", name, msg, names, fix)
		}
	}

	worldWritable := mkdirMode(t, filepath.Join(base, "0777"), 0o777)
	refused("a mode 0777 cache dir", worldWritable, worldWritable, "chmod go-w "+worldWritable)
	groupWritable := mkdirMode(t, filepath.Join(base, "0770"), 0o770)
	if os.Geteuid() == 0 {
		// A group of no one's: root's own group 0 is private, and a
		// user's private group may write (TestPrivateGroupMayWrite).
		if err := os.Chown(groupWritable, -1, 4242); err != nil {
			t.Fatal(err)
		}
		refused("a mode 0770 cache dir", groupWritable, groupWritable, "chmod go-w "+groupWritable)
	}
	stickyCache := mkdirMode(t, filepath.Join(base, "1777"), os.ModeSticky|0o777)
	refused("a sticky 1777 cache dir (others may plant files in it)", stickyCache, stickyCache, "chmod go-w")

	shared := mkdirMode(t, filepath.Join(base, "shared"), 0o777)
	inShared := filepath.Join(shared, "cache")
	refused("a cache dir in a parent anyone can write", inShared, shared, "chmod go-w "+shared)
	own := mkdirMode(t, filepath.Join(mkdirMode(t, filepath.Join(base, "tmp"), os.ModeSticky|0o777), "cache"), 0o700)
	if err := open(own); err != nil {
		t.Errorf("a 0700 cache dir in a sticky parent: %v", err)
	}
	build := mkdirMode(t, filepath.Join(base, "build"), 0o700)
	if err := open(build); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(build)
	if len(entries) != 1 {
		t.Fatalf("cache dir holds %d entries, want the build's directory", len(entries))
	}
	buildDir := filepath.Join(build, entries[0].Name())
	if err := os.Chmod(buildDir, 0o777); err != nil {
		t.Fatal(err)
	}
	refused("a cache dir whose build directory anyone can write", build, buildDir, "chmod go-w "+buildDir)

	if os.Geteuid() != 0 {
		t.Log("the checks of another user's directory and link need root")
		return
	}
	theirs := mkdirMode(t, filepath.Join(base, "theirs"), 0o755)
	if err := os.Chown(theirs, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	refused("another user's cache dir", theirs, theirs, "chown")
	target := mkdirMode(t, filepath.Join(base, "target"), 0o700)
	link := filepath.Join(base, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := open(link); err != nil {
		t.Errorf("a cache dir through the user's own link: %v", err)
	}
	if err := os.Lchown(link, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	refused("a cache dir through another user's link", link, link, "symbolic link owned by uid 65534")
}

// cacheFiles is the files of dir's build directory, by suffix.
func cacheFiles(t *testing.T, dir, suffix string) []string {
	t.Helper()
	var out []string
	for _, f := range storedFiles(t, dir) {
		if strings.HasSuffix(f, suffix) {
			out = append(out, filepath.Join(dir, f))
		}
	}
	if len(out) == 0 {
		t.Fatalf("no %s file in %s", suffix, dir)
	}
	return out
}

// compileFromCache compiles src in a new engine on dir, failing the test
// (instead of hanging it) if the compile does not return.
func compileFromCache(t *testing.T, dir string, src sandbox.Source) (*sandbox.Module, sandbox.CompileInfo) {
	t.Helper()
	e := newEngine(t, sandbox.Config{CacheDir: dir})
	type result struct {
		m    *sandbox.Module
		info sandbox.CompileInfo
		err  error
	}
	done := make(chan result, 1)
	go func() {
		m, info, err := e.Compile(context.Background(), src)
		done <- result{m, info, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if res, err := e.Run(context.Background(), sandboxRequest(r.m)); err != nil || res.Values[0] != i32(7) {
			t.Fatalf("run: %v %v", res, err)
		}
		return r.m, r.info
	case <-time.After(2 * time.Minute):
		t.Fatal("the compile hung on a cache file")
	}
	return nil, sandbox.CompileInfo{}
}

// TestCacheFilesAreCheckedWhenLoaded: a file in the cache that is not a
// regular file the user (or root) owns and only it can write is not
// loaded, and not waited on: a FIFO planted as the .meta, the .cwasm or a
// text's alias, a symbolic link, a file writable by others, another
// user's file. Each is a miss: the module is compiled again and the file
// replaced, so the next engine loads it.
func TestCacheFilesAreCheckedWhenLoaded(t *testing.T) {
	t.Parallel()
	type plant struct {
		name   string
		suffix string
		root   bool
		do     func(t *testing.T, path string)
	}
	replaceWith := func(make func(string) error) func(*testing.T, string) {
		return func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := make(path); err != nil {
				t.Fatal(err)
			}
		}
	}
	fifo := replaceWith(func(p string) error { return syscall.Mkfifo(p, 0o600) })
	plants := []plant{
		{"a FIFO as the .meta", ".meta", false, fifo},
		{"a FIFO as the .cwasm", ".cwasm", false, fifo},
		{"a FIFO as a text's alias", ".id", false, fifo},
		{"a .meta writable by others", ".meta", false, func(t *testing.T, p string) {
			if err := os.Chmod(p, 0o666); err != nil {
				t.Fatal(err)
			}
		}},
		{"a .cwasm writable by a group not private to its owner", ".cwasm", true, func(t *testing.T, p string) {
			if err := os.Chmod(p, 0o620); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, -1, 4242); err != nil { // a group of no one's
				t.Fatal(err)
			}
		}},
		{"a .meta that is a link to a good copy", ".meta", false, func(t *testing.T, p string) {
			if err := os.Rename(p, p+".copy"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(p+".copy", p); err != nil {
				t.Fatal(err)
			}
		}},
		{"another user's .cwasm", ".cwasm", true, func(t *testing.T, p string) {
			if err := os.Chown(p, nobody, nobody); err != nil {
				t.Fatal(err)
			}
		}},
		{"another user's alias", ".id", true, func(t *testing.T, p string) {
			if err := os.Chown(p, nobody, nobody); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for i, p := range plants {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			if p.root {
				needRoot(t)
			}
			dir := t.TempDir()
			src := sandbox.Source{WAT: uniqueWAT("planted " + string(rune('a'+i)))}
			if _, info := compileFromCache(t, dir, src); info.FromDisk {
				t.Fatalf("first compile: %+v", info)
			}
			if _, info := compileFromCache(t, dir, src); !info.FromDisk {
				t.Fatalf("second engine: %+v, want the module from disk", info)
			}
			path := cacheFiles(t, dir, p.suffix)[0]
			p.do(t, path)
			if _, info := compileFromCache(t, dir, src); info.FromDisk {
				t.Fatalf("with %s: %+v, want a compile", p.name, info)
			}
			if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) {
				t.Fatalf("%s was not replaced by a file of the user's, mode 0600: %v %v", path, fi.Mode(), err)
			}
			if _, info := compileFromCache(t, dir, src); !info.FromDisk {
				t.Fatalf("after the replacement: %+v, want the module from disk", info)
			}
		})
	}
}
