package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/sandbox"
)

// storedFiles lists the files under dir, relative to it.
func storedFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, rel)
		}
		return nil
	})
	return files
}

// TestCompileStored: a program's own module is compiled once (the caller
// told before), its artefact written to the first directory that takes
// it, and loaded from there by the next engine without a compile; it is
// never in the engine's cache. A corrupted artefact of the right size is
// compiled again (the checksum) and replaced.
func TestCompileStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := t.TempDir()
	notADir := filepath.Join(base, "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "store")
	dirs := []string{notADir, dir} // the first cannot hold a store
	src := sandbox.Source{Wasm: mustWat2Wasm(t, uniqueWAT("stored"))}
	compile := func(e *sandbox.Engine) (*sandbox.Module, sandbox.CompileInfo, int) {
		t.Helper()
		told := 0
		m, info, err := e.CompileStored(ctx, src, dirs, func() { told++ })
		if err != nil {
			t.Fatal(err)
		}
		if res, err := e.Run(ctx, sandboxRequest(m)); err != nil || res.Values[0] != i32(7) {
			t.Fatalf("run: %v %v", res, err)
		}
		if st := e.CacheStats(); st.Entries != 0 {
			t.Errorf("the engine's cache holds %d modules, want none", st.Entries)
		}
		return m, info, told
	}

	e1 := newEngine(t, sandbox.Config{})
	m1, info, told := compile(e1)
	if info.FromDisk || told != 1 {
		t.Fatalf("first: %+v, told %d times; want a compile, told once", info, told)
	}
	files := storedFiles(t, dir)
	if len(files) != 2 || !sandbox.StoredArtefact(dir, m1.ID) || sandbox.StoredArtefact(notADir, m1.ID) {
		t.Fatalf("store %v; StoredArtefact %v", files, sandbox.StoredArtefact(dir, m1.ID))
	}

	m2, info, told := compile(newEngine(t, sandbox.Config{}))
	if !info.FromDisk || told != 0 || m2.ID != m1.ID || m2.CompiledSize != m1.CompiledSize {
		t.Fatalf("second engine: %+v, told %d times, %+v; want it loaded", info, told, m2)
	}

	var cwasm string
	for _, f := range files {
		if strings.HasSuffix(f, ".cwasm") {
			cwasm = filepath.Join(dir, f)
		}
	}
	b, err := os.ReadFile(cwasm)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(cwasm, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if !sandbox.StoredArtefact(dir, m1.ID) {
		t.Error("StoredArtefact checks the size only, not the checksum")
	}
	if _, info, told := compile(newEngine(t, sandbox.Config{})); info.FromDisk || told != 1 {
		t.Fatalf("after corruption: %+v, told %d times; want a compile", info, told)
	}
	if _, info, _ := compile(newEngine(t, sandbox.Config{})); !info.FromDisk {
		t.Fatalf("the corrupted artefact was not replaced: %+v", info)
	}

	if _, _, err := e1.CompileStored(ctx, sandbox.Source{WAT: uniqueWAT("text")}, dirs, nil); err == nil {
		t.Error("CompileStored took a text")
	}
}

// TestPruneArtefacts: other builds' directories, this build's artefacts
// of modules not kept and temporary files go; everything else stays.
func TestPruneArtefacts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	e := newEngine(t, sandbox.Config{})
	var ids []string
	for _, tag := range []string{"kept", "dropped"} {
		m, _, err := e.CompileStored(ctx, sandbox.Source{Wasm: mustWat2Wasm(t, uniqueWAT(tag))}, []string{dir}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	own := filepath.Dir(filepath.Join(dir, storedFiles(t, dir)[0]))
	for _, p := range []string{"modules-0123456789abcdef/x.cwasm", "modules-other/keep", "js.wasm"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(own, ".tmp-123"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := sandbox.PruneArtefacts(dir, ids[:1])
	if err != nil || n != 4 { // another build's directory, the dropped module's two files, the temporary file
		t.Errorf("PruneArtefacts: %d removed, %v; want 4", n, err)
	}
	left := storedFiles(t, dir)
	slices.Sort(left)
	kept := strings.TrimPrefix(ids[0], sandbox.IDPrefix)
	rel, _ := filepath.Rel(dir, own)
	want := []string{"js.wasm", "modules-other/keep", filepath.Join(rel, kept+".cwasm"), filepath.Join(rel, kept+".meta")}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
	if !sandbox.StoredArtefact(dir, ids[0]) || sandbox.StoredArtefact(dir, ids[1]) {
		t.Error("the kept module's artefact went, or the dropped one's stayed")
	}
	if n, err := sandbox.PruneArtefacts(filepath.Join(dir, "none"), nil); n != 0 || err != nil {
		t.Errorf("a directory that does not exist: %d, %v", n, err)
	}
}
