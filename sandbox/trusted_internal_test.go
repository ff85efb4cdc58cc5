package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestRootInstallIsTrustedByOtherUsers: what root installed for everyone
// (0755 directories, 0644 files, as make install leaves the runtimes) is
// trusted by any user; a directory or file of root's that its group can
// write is not.
func TestRootInstallIsTrustedByOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making root's files needs root")
	}
	const user = 65534 // not root, and owns nothing here
	install := filepath.Join(t.TempDir(), "lib", "sandboxd", "runtimes")
	if err := os.MkdirAll(filepath.Join(install, "modules-0123456789abcdef"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(filepath.Dir(filepath.Dir(install))), filepath.Dir(filepath.Dir(install)), filepath.Dir(install), install} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(install, "modules-0123456789abcdef", "x.cwasm")
	if err := os.WriteFile(file, []byte("code"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkTrustedDir(filepath.Join(install, "modules-0123456789abcdef"), user); err != nil {
		t.Errorf("root's 0755 install refused for uid %d: %v", user, err)
	}
	f, _, err := openTrustedFile(file, user)
	if err != nil {
		t.Errorf("root's 0644 file refused for uid %d: %v", user, err)
	} else {
		f.Close()
	}
	if err := os.Chmod(file, 0o664); err != nil {
		t.Fatal(err)
	}
	if _, _, err := openTrustedFile(file, user); err == nil || !strings.Contains(err.Error(), "chmod go-w "+file) {
		t.Errorf("root's group-writable file: %v, want it refused with the fix", err)
	}
	if err := os.Chmod(install, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := checkTrustedDir(install, user); err == nil || !strings.Contains(err.Error(), "chmod go-w "+install) {
		t.Errorf("root's group-writable directory: %v, want it refused with the fix", err)
	}
}

// TestCloseDoesNotWaitForAHungCacheRead: a read of the persistent cache
// that never returns (an open or a read no cancellation reaches, here
// the store's open held) keeps neither the cancelled compile nor
// Engine.Close waiting.
func TestCloseDoesNotWaitForAHungCacheRead(t *testing.T) {
	e, err := NewEngine(Config{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	hung := make(chan struct{})
	defer close(hung)
	entered := make(chan struct{}, 1)
	e.store.open = func(string, int) (*os.File, os.FileInfo, error) {
		entered <- struct{}{}
		<-hung
		return nil, nil, os.ErrNotExist
	}
	ctx, cancel := context.WithCancel(context.Background())
	compiled := make(chan error, 1)
	go func() {
		_, _, err := e.Compile(ctx, Source{WAT: `(module (func (export "hung")))`})
		compiled <- err
	}()
	select {
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("the compile did not read the cache")
	}
	cancel()
	select {
	case err := <-compiled:
		if KindOf(err) != KindCancelled {
			t.Errorf("compile: %v, want cancelled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the cancelled compile waited for the hung read")
	}
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Fatal("Close waited for the hung read")
	}
}

// TestPrivateGroupMayWrite: a directory of the user's that only the
// user's private group can write is trusted (umask 002 systems); one that
// another group can write is not.
func TestPrivateGroupMayWrite(t *testing.T) {
	const passwd = "root:x:0:0:root:/root:/bin/bash\nann:x:1000:1000::/home/ann:/bin/sh\nbob:x:1001:1001::/home/bob:/bin/sh\n"
	const group = "root:x:0:\nann:x:1000:\nbob:x:1001:ann\nstaff:x:50:\nusers:x:100:ann\n"
	for _, c := range []struct {
		gid     uint32
		uid     int
		private bool
	}{
		{1000, 1000, true},  // ann's own group, no other member
		{1001, 1001, false}, // bob's group has ann in it
		{100, 1000, false},  // named otherwise
		{50, 1000, false},
		{1000, 1001, false}, // ann's group is not bob's
		{1000, 4242, false}, // no such user
		{4242, 1000, false}, // no such group
	} {
		if got := isPrivateGroup(passwd, group, c.gid, c.uid); got != c.private {
			t.Errorf("gid %d for uid %d: private %v, want %v", c.gid, c.uid, got, c.private)
		}
	}

	if os.Geteuid() != 0 || !privateGroup(0, 0) {
		t.Skip("the rest needs root, whose group 0 is private here")
	}
	dir := filepath.Join(t.TempDir(), "cache")
	if err := os.Mkdir(dir, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := checkTrustedDir(dir, 0); err != nil {
		t.Errorf("a 0775 directory of root's private group refused: %v", err)
	}
	if err := os.Chown(dir, 0, 50); err != nil {
		t.Fatal(err)
	}
	if err := checkTrustedDir(dir, 0); err == nil || !strings.Contains(err.Error(), "chmod go-w "+dir) {
		t.Errorf("a 0775 directory another group can write: %v, want it refused with the fix", err)
	}
}

// TestCompileStoredGivenUpIsNoMiss: a CompileStored whose caller gives up
// while the stored artefact is being read is cancelled; the abandoned
// read is not a miss, so no compile is begun (nor the caller told one
// is), even by the flight the call leaves behind.
func TestCompileStoredGivenUpIsNoMiss(t *testing.T) {
	dir := t.TempDir()
	src := Source{Wasm: []byte("\x00asm\x01\x00\x00\x00")} // (module)
	first, err := NewEngine(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := first.CompileStored(context.Background(), src, []string{dir}, nil); err != nil {
		t.Fatal(err)
	}
	first.Close()

	e, err := NewEngine(Config{})
	if err != nil {
		t.Fatal(err)
	}
	slow := make(chan struct{})
	entered := make(chan struct{}, 8)
	e.openStored = func(path string, uid int) (*os.File, os.FileInfo, error) {
		entered <- struct{}{}
		<-slow
		return openTrustedFile(path, uid)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var told atomic.Int32
	done := make(chan error, 1)
	go func() {
		_, _, err := e.CompileStored(ctx, src, []string{dir}, func() { told.Add(1) })
		done <- err
	}()
	<-entered
	cancel()
	select {
	case err := <-done:
		if KindOf(err) != KindCancelled {
			t.Errorf("CompileStored given up: %v, want cancelled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("CompileStored waited for the read it gave up")
	}
	close(slow)
	e.Close() // waits for any flight the call left
	if n := told.Load(); n != 0 {
		t.Errorf("the caller was told %d times that a compile begins, want 0: the given-up read was taken for a miss", n)
	}
}
