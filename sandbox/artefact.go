package sandbox

// The persistent cache: compiled modules on disk, for Config.CacheDir and
// for a program's own modules (CompileStored: the interpreter runtimes).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox/internal/wasmbin"
)

// artefactStore keeps compiled modules in a directory named after the
// build of this program: the rewrite and wasmtime's code generation are
// part of the artefact, so another build must not read it. Deserializing
// trusts the bytes (they are machine code), so the directory and its
// path must be trusted (trusted.go: owned by the process's user or root,
// writable by no one else), checked when the store is opened, and every
// file is opened without blocking or following a link and checked on its
// descriptor before it is read (openTrustedFile); a checksum guards against
// torn or corrupted files. A file that fails any check (a FIFO, a link,
// another user's file, one writable by others, a bad checksum) is a miss:
// the module is compiled again and its files replaced by renaming new
// ones over them. Files are created 0600 (the directory 0700) with
// O_EXCL, so nothing planted is followed.
//
// A module is two files: <hex>.cwasm, exactly the module as wasmtime
// serialized it, and <hex>.meta, artefactMagic then a frame header (see
// compilechild_frame.go: the id, the wasm's size, the rewriter's Info and the
// sha256 of the .cwasm). The .cwasm stands alone so that wasmtime maps it
// (NewModuleDeserializeFile) instead of the file being read, copied and
// relocated: for goja's 60 MB that was 1.07 s of 1.08 (reading 0.25 s,
// hashing 0.28 s, deserializing from bytes 0.54 s, against 3 ms mapped,
// at load 8 on 2 cores). A mapped file must not change under the module:
// the store only ever replaces one by renaming a new file over it.
type artefactStore struct {
	dir string
	uid int // the user whose files, with root's, are loaded
	// open opens a file of the store: openTrustedFile, or a test's.
	open func(path string, uid int) (*os.File, os.FileInfo, error)
}

// storedArtefact is the header of a .meta file.
type storedArtefact struct {
	Payload  int // the .cwasm's size
	ID       string
	WasmSize int
	// SnapshotSize is Module.snapshotSize: an engine whose MaxModuleBytes
	// is below it does not load the artefact (another engine, with a
	// larger bound, may have written it).
	SnapshotSize int
	Info         *wasmbin.Info
	Sum          string // sha256 of the .cwasm, hex
}

const artefactMagic = "sandboxd compiled module v3\n"

// buildDirPattern matches the per-build directories a store's parent
// holds ("modules-" and 16 hex digits of buildFingerprint).
var buildDirPattern = regexp.MustCompile(`^modules-[0-9a-f]{16}$`)

// artefactStoreAt is the store of this build under dir, which need not
// exist yet.
func artefactStoreAt(dir string) (*artefactStore, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	build, err := buildFingerprint()
	if err != nil {
		return nil, err
	}
	return &artefactStore{dir: filepath.Join(abs, "modules-"+build), uid: os.Geteuid(), open: openTrustedFile}, nil
}

// openArtefactStore opens Config.CacheDir's store, making its directories
// (0700) if need be, and refuses a directory that is not trusted, with
// what to do about it.
func openArtefactStore(dir string) (*artefactStore, error) {
	s, err := artefactStoreAt(dir)
	if err != nil {
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	// The operator's directory is checked before anything is made in it.
	for _, d := range s.dirs() {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("cache dir: %w", err)
		}
		if err := checkTrustedDir(d, s.uid); err != nil {
			return nil, fmt.Errorf("cache dir %s: %w", dir, err)
		}
	}
	return s, nil
}

// dirs are the directory above the store's (the one the operator named)
// and the store's own, in that order: those the rule of trusted.go holds.
func (s *artefactStore) dirs() []string {
	return []string{filepath.Dir(s.dir), s.dir}
}

// checkTrusted checks s.dirs by the rule of trusted.go.
func (s *artefactStore) checkTrusted() error {
	for _, d := range s.dirs() {
		if err := checkTrustedDir(d, s.uid); err != nil {
			return err
		}
	}
	return nil
}

// checkTrustedIfPresent is checkTrusted for the directories that exist:
// one that does not is made (0700) and checked when an artefact is saved.
func (s *artefactStore) checkTrustedIfPresent() error {
	for _, d := range s.dirs() {
		if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err := checkTrustedDir(d, s.uid); err != nil {
			return err
		}
	}
	return nil
}

// readSmall reads the store's file at path, at most max bytes, opened
// and checked as openTrustedFile does.
func (s *artefactStore) readSmall(path string, max int64) ([]byte, error) {
	f, _, err := s.open(path, s.uid)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max))
}

// buildFingerprint names this build of the program: the build IDs the Go
// toolchain and the linker write into the executable (a hash of the
// build's inputs and output), or, in a binary without them, a hash of the
// whole file (tens of milliseconds, once per engine).
func buildFingerprint() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	if f, err := elf.Open(exe); err == nil {
		found := false
		for _, name := range []string{".note.go.buildid", ".note.gnu.build-id"} {
			if sec := f.Section(name); sec != nil {
				if b, err := sec.Data(); err == nil && len(b) > 0 {
					h.Write(b)
					found = true
				}
			}
		}
		f.Close()
		if found {
			return hex.EncodeToString(h.Sum(nil))[:16], nil
		}
	}
	f, err := os.Open(exe)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func (s *artefactStore) path(id, ext string) string {
	return filepath.Join(s.dir, strings.TrimPrefix(id, IDPrefix)+ext)
}

// aliasPath names the file that maps a text key ("wat:<hex>") to the id of
// the wasm the text became.
func (s *artefactStore) aliasPath(key string) string {
	return filepath.Join(s.dir, strings.Replace(key, ":", "-", 1)+".id")
}

// idOfText returns the id a text compiled to, from the persistent cache,
// or "" (also when ctx ends first: readFromDisk).
func (e *Engine) idOfText(ctx context.Context, key string) string {
	if e.store == nil {
		return ""
	}
	return readFromDisk(ctx, func() string {
		b, err := e.store.readSmall(e.store.aliasPath(key), int64(len(IDPrefix)+64+1))
		if id := string(b); err == nil && protocol.IsModuleID(id) {
			return id
		}
		return ""
	})
}

// readFromDisk returns what read, a read of the persistent cache, returns,
// or the zero value once ctx ends: read runs on a goroutine of its own,
// which nothing waits for, so that a system call no cancellation reaches
// (an open or a read of a file that never answers) holds that goroutine
// only, not the compile flight, nor Engine.Close, which waits for the
// flights, nor so the process's exit. What read returns after ctx ended
// is dropped (a Module with it, to the garbage collector).
func readFromDisk[T any](ctx context.Context, read func() T) T {
	done := make(chan T, 1)
	go func() { done <- read() }()
	select {
	case v := <-done:
		return v
	case <-ctx.Done():
		var zero T
		return zero
	}
}

// saveAlias records the id a text compiled to.
func (e *Engine) saveAlias(key, id string) {
	if e.store != nil {
		_ = e.store.writeAtomically(e.store.aliasPath(key), []byte(id))
	}
}

// writeAtomically writes a file of the store through a temporary file
// renamed into place. A failure only costs a compile later.
func (s *artefactStore) writeAtomically(path string, b []byte) error {
	tmp, err := os.CreateTemp(s.dir, ".tmp-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

// header reads the .meta of id, checking it names id, and opens the
// .cwasm, checking it has the size the .meta records; the caller closes
// it. Both are opened and checked as openTrustedFile does.
func (s *artefactStore) header(id string) (*storedArtefact, *os.File, bool) {
	f, _, err := s.open(s.path(id, ".meta"), s.uid)
	if err != nil {
		return nil, nil, false
	}
	defer f.Close()
	r := bufio.NewReader(f)
	magic := make([]byte, len(artefactMagic))
	var a storedArtefact
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != artefactMagic || readFrameHeader(r, &a) != nil || a.ID != id || a.Info == nil {
		return nil, nil, false
	}
	code, st, err := s.open(s.path(id, ".cwasm"), s.uid)
	if err != nil {
		return nil, nil, false
	}
	if st.Size() != int64(a.Payload) {
		code.Close()
		return nil, nil, false
	}
	return &a, code, true
}

// load returns module id from the store, or nil: the .cwasm's checksum
// verified on the descriptor checked, then that same file mapped by
// wasmtime (through /proc/self/fd, so a file renamed over it meanwhile
// is not what is loaded).
func (s *artefactStore) load(e *Engine, id string) *Module {
	a, f, ok := s.header(id)
	if !ok {
		return nil
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil || n != int64(a.Payload) || hex.EncodeToString(h.Sum(nil)) != a.Sum {
		return nil
	}
	wt, err := wasmtime.NewModuleDeserializeFile(e.wt, descriptorPath(f, s.path(id, ".cwasm")))
	if err != nil {
		releaseWasmtimeError(err)
		return nil
	}
	m := e.newModule(id, a.WasmSize, a.Payload, wt, a.Info)
	m.snapshotSize = a.SnapshotSize
	return m
}

// save writes m's artefact, the .cwasm before the .meta that vouches for
// it, each atomically.
func (s *artefactStore) save(m *Module, compiled []byte) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	if err := s.checkTrusted(); err != nil {
		return err
	}
	sum := sha256.Sum256(compiled)
	var meta bytes.Buffer
	w := bufio.NewWriter(&meta)
	w.WriteString(artefactMagic)
	hdr := storedArtefact{Payload: len(compiled), ID: m.ID, WasmSize: m.Size, SnapshotSize: m.snapshotSize, Info: m.info, Sum: hex.EncodeToString(sum[:])}
	if err := writeFrame(w, hdr, moduleBytes{}); err != nil {
		return err
	}
	if err := s.writeAtomically(s.path(m.ID, ".cwasm"), compiled); err != nil {
		return err
	}
	return s.writeAtomically(s.path(m.ID, ".meta"), meta.Bytes())
}

// loadFromDisk returns the module id from the persistent cache, or nil
// (also when ctx ends first: readFromDisk).
func (e *Engine) loadFromDisk(ctx context.Context, id string) *Module {
	if e.store == nil {
		return nil
	}
	return readFromDisk(ctx, func() *Module { return e.store.load(e, id) })
}

// saveToDisk writes m's artefact to the persistent cache. A failure only
// costs a compile later.
func (e *Engine) saveToDisk(m *Module, compiled []byte) {
	if e.store != nil && compiled != nil {
		_ = e.store.save(m, compiled)
	}
}

// CompileStored returns the module of src.Wasm (a binary module; its
// compile limits apply), loaded from the first of dirs that holds this
// build's artefact of it, or compiled in a compile child and its artefact
// written to the first of dirs that takes it (made if need be). compiling,
// if set, is called before a compile starts, so a caller can say why it
// may take a minute. It is for a program's own modules, such as the
// interpreter runtimes: the module is not put in the engine's cache (the
// caller holds it; the parent's modules do not evict it) nor in
// Config.CacheDir, and MaxModuleBytes and ModulePathDirs, which bound
// what a parent sends, do not apply. A directory of dirs that exists and
// is not trusted (CheckTrustedDir) is a host error naming it; one that is
// not a directory is passed over.
func (e *Engine) CompileStored(ctx context.Context, src Source, dirs []string, compiling func()) (*Module, CompileInfo, error) {
	start := time.Now()
	if countSources(src) != 1 || !isWasmBinary(src.Wasm) {
		return nil, CompileInfo{}, newError(KindHost, "CompileStored takes a binary module as Source.Wasm")
	}
	id := ModuleID(src.Wasm)
	if src.Preinitialize {
		id = PreinitID(src.Wasm)
	}
	stores := make([]*artefactStore, 0, len(dirs))
	for _, d := range dirs {
		s, err := artefactStoreAt(d)
		if fi, serr := os.Stat(d); err != nil || serr == nil && !fi.IsDir() {
			continue // cannot hold a store
		}
		if err := s.checkTrustedIfPresent(); err != nil {
			return nil, CompileInfo{}, newError(KindHost, "compiled modules' directory %s: %v", d, err)
		}
		if e.openStored != nil {
			s.open = e.openStored
		}
		stores = append(stores, s)
	}
	load := func(ctx context.Context) *Module {
		return readFromDisk(ctx, func() *Module {
			for _, s := range stores {
				if m := s.load(e, id); m != nil {
					return m
				}
			}
			return nil
		})
	}
	if m := load(ctx); m != nil {
		return m, CompileInfo{FromDisk: true, Elapsed: time.Since(start)}, nil
	}
	if ctx.Err() != nil { // the load was given up, not a miss
		return nil, CompileInfo{}, errCompileCancelled()
	}
	lim := e.compileLimits(src)
	r, shared, err := e.flight.do(ctx, "stored:"+id, func(ctx context.Context) (flightResult, error) {
		if m := load(ctx); m != nil { // saved while we looked
			return flightResult{m: m, fromDisk: true}, nil
		}
		if ctx.Err() != nil {
			return flightResult{}, errCompileCancelled()
		}
		if compiling != nil {
			compiling()
		}
		m, compiled, err := e.compileMaybePreinit(ctx, src, id, lim, 0)
		if err != nil {
			return flightResult{}, err
		}
		for _, s := range stores {
			if compiled == nil || s.save(m, compiled) == nil {
				break
			}
		}
		return flightResult{m: m}, nil
	})
	if err != nil {
		return nil, CompileInfo{}, err
	}
	return r.m, CompileInfo{Cached: shared, FromDisk: r.fromDisk && !shared, Elapsed: time.Since(start)}, nil
}

// compileMaybePreinit compiles src.Wasm, pre-initialised first if src
// asks for it; the module is then known by id (PreinitID), under which
// it is stored, and the pre-initialised module is at most maxBytes (0: no
// bound; a parent's module has MaxModuleBytes, the program's own none).
func (e *Engine) compileMaybePreinit(ctx context.Context, src Source, id string, lim compileLimits, maxBytes int) (*Module, []byte, error) {
	if !src.Preinitialize {
		return e.compileNew(ctx, moduleBytes{bin: src.Wasm}, "", lim)
	}
	wasm, _, err := e.Preinitialize(ctx, src.Wasm, PreinitOptions{Limits: e.preinitLimits(lim), MaxModuleBytes: maxBytes})
	if err != nil {
		return nil, nil, err
	}
	m, compiled, err := e.compileNew(ctx, moduleBytes{bin: wasm}, "", lim)
	if err != nil {
		return nil, nil, err
	}
	named := *m
	named.ID, named.Size, named.snapshotSize = id, len(src.Wasm), m.Size
	return &named, compiled, nil
}

// StoredArtefact reports whether dir holds this build's artefact of the
// module id ("sha256:…"), as CompileStored would look for it, without
// loading it (its checksum is checked when it is loaded).
func StoredArtefact(dir, id string) bool {
	s, err := artefactStoreAt(dir)
	if err != nil {
		return false
	}
	_, f, ok := s.header(id)
	if ok {
		f.Close()
	}
	return ok
}

// PruneArtefacts removes from dir what CompileStored no longer loads:
// the directories of other builds of this program, and in this build's,
// the artefacts of modules not in keep (ids) and temporary files left by
// an interrupted write. Nothing else in dir is touched. It returns how
// many entries it removed.
func PruneArtefacts(dir string, keep []string) (int, error) {
	own, err := artefactStoreAt(dir)
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	removed := 0
	var errs []error
	remove := func(path string) {
		if err := os.RemoveAll(path); err != nil {
			errs = append(errs, err)
		} else {
			removed++
		}
	}
	for _, ent := range entries {
		path := filepath.Join(dir, ent.Name())
		if ent.IsDir() && buildDirPattern.MatchString(ent.Name()) && path != own.dir {
			remove(path)
		}
	}
	files, err := os.ReadDir(own.dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, ent := range files {
		name := ent.Name()
		hexID := strings.TrimSuffix(strings.TrimSuffix(name, ".cwasm"), ".meta")
		if strings.HasPrefix(name, ".tmp-") || (hexID != name && !slices.Contains(keep, IDPrefix+hexID)) {
			remove(filepath.Join(own.dir, name))
		}
	}
	return removed, errors.Join(errs...)
}
