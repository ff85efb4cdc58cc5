package sandbox

// The host directories a WASI guest sees: the grant's dirs and its files
// tree.
//
// A directory is checked and preopened as one thing. It is opened once
// (O_DIRECTORY), the kernel's name for the open descriptor is checked
// against the operator's allowed roots, and wasmtime preopens that same
// descriptor through /proc/self/fd/N, never the name again. A run granted
// a writable directory can replace anything below it with a symlink; had
// the name been checked and then opened again, a swap between the two
// would give another run a directory outside every root (read, and if
// granted writable, write). The roots themselves are resolved once, when
// the engine is made: resolved per run, a root below another root that a
// run may write could be swapped too.
//
// The files trees are the sidecar's own: they live in a private directory
// (0700) that is never inside an allowed root, so no grant reaches another
// run's files (privateDir).

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// preopen is a host directory opened for a guest: the descriptor stays
// open until wasmtime has preopened it (attach), which opens its own.
type preopen struct {
	f        *os.File
	guest    string
	writable bool
}

// procPath names the open descriptor, for wasmtime's preopen: opening it
// opens the directory the descriptor refers to, whatever its name is now.
func (p *preopen) procPath() string { return "/proc/self/fd/" + strconv.Itoa(int(p.f.Fd())) }

func (p *preopen) close() {
	if p.f != nil {
		p.f.Close()
		p.f = nil
	}
}

// openGrantedDir opens host, a directory the grant names, and returns it
// if the directory opened is at or under one of the operator's roots.
// Errors are the parent's (a GrantError's problem) and name only host.
func (e *Engine) openGrantedDir(host string) (*os.File, error) {
	if len(e.cfg.WASIDirs) == 0 {
		return nil, fmt.Errorf("%s: no directory may be preopened (the operator allowed none: serve --allow-dir PATH)", host)
	}
	abs, err := filepath.Abs(host)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", host, err)
	}
	// O_DIRECTORY fails on anything else before it is opened (a FIFO is
	// not waited on); O_NONBLOCK for good measure.
	f, err := os.OpenFile(abs, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			return nil, fmt.Errorf("%s: not a directory", host)
		}
		return nil, fmt.Errorf("%s: not an existing directory", host)
	}
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil || !filepath.IsAbs(real) || strings.HasSuffix(real, " (deleted)") || !insideAny(real, e.wasiRoots) {
		f.Close()
		return nil, fmt.Errorf("%s is not at or under a directory the operator allowed (serve --allow-dir)", host)
	}
	if kernelFS := kernelFileSystemAt(f, real); kernelFS != "" {
		f.Close()
		return nil, fmt.Errorf("%s holds %s, a view of the kernel's and processes' state (the sidecar's own memory among it); it cannot be preopened", host, kernelFS)
	}
	return f, nil
}

// kernelFileSystems are the file systems whose files are views of the
// kernel's and processes' state (/proc/self/mem is the sidecar's memory):
// no guest may reach one, at the directory it is granted or below it.
var kernelFileSystems = map[string]bool{
	"proc": true, "sysfs": true, "devtmpfs": true, "devpts": true, "debugfs": true, "tracefs": true,
	"securityfs": true, "cgroup": true, "cgroup2": true, "bpf": true, "configfs": true, "efivarfs": true,
	"pstore": true, "fusectl": true, "binfmt_misc": true, "mqueue": true, "hugetlbfs": true, "rpc_pipefs": true,
	"nsfs": true, "autofs": true,
}

// kernelFileSystemAt names a kernel file system the directory f (whose
// path is real) is on or that is mounted at or under it, as "/proc
// (proc)", or returns "" when there is none. (A guest cannot mount
// anything; one the operator mounts under a granted directory later is
// theirs.)
func kernelFileSystemAt(f *os.File, real string) string {
	var fs syscall.Statfs_t
	if err := syscall.Fstatfs(int(f.Fd()), &fs); err == nil && (fs.Type == procSuperMagic || fs.Type == sysfsMagic) {
		return real + " (a kernel file system)"
	}
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(info), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) || !kernelFileSystems[fields[sep+1]] {
			continue
		}
		mount := unescapeMountPath(fields[4])
		if insideAny(mount, []string{real}) {
			return mount + " (" + fields[sep+1] + ")"
		}
	}
	return ""
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(p string) string {
	if !strings.Contains(p, "\\") {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' && i+3 < len(p) {
			if n, err := strconv.ParseUint(p[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

// resolveRoots resolves the operator's allowed directories once. A root
// that does not exist (yet) allows nothing; an operator's typo shows as a
// grant refused for it.
func resolveRoots(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		if r, err := resolveDirs([]string{d}); err == nil {
			out = append(out, r...)
		}
	}
	return out
}

// checkOwnTrees refuses a configuration in which a directory the sidecar
// writes and trusts (the compile cache of --cache-dir, holding machine
// code the engine loads) and a directory guests may be granted overlap:
// a run granted it writable could plant code the sidecar would run.
func checkOwnTrees(cacheDir string, roots []string) error {
	if cacheDir == "" {
		return nil
	}
	dirs, err := resolveDirs([]string{cacheDir})
	if err != nil {
		return fmt.Errorf("cache dir: %w", err)
	}
	for _, r := range roots {
		if insideAny(dirs[0], []string{r}) || insideAny(r, dirs) {
			return fmt.Errorf("cache dir %s and --allow-dir %s overlap: a guest granted that directory could write machine code the sidecar loads; keep them apart", dirs[0], r)
		}
	}
	return nil
}

// privateDir is the engine's own directory for files trees: made on first
// use (mode 0700) in the first of TMPDIR, /dev/shm, /var/tmp and /tmp that
// is not inside an allowed root, removed by Engine.Close.
type privateDir struct {
	once sync.Once
	dir  string
	err  error
}

func (e *Engine) privateDir() (string, error) {
	p := &e.private
	p.once.Do(func() {
		seen := map[string]bool{}
		for _, base := range []string{os.TempDir(), "/dev/shm", "/var/tmp", "/tmp"} {
			real, err := filepath.EvalSymlinks(base)
			if err != nil || seen[real] {
				continue
			}
			seen[real] = true
			if insideAny(real, e.wasiRoots) {
				continue
			}
			if dir, err := os.MkdirTemp(real, "sandboxd-"); err == nil {
				p.dir = dir
				return
			}
		}
		p.err = errors.New("no temporary directory outside the directories guests may be granted (--allow-dir) could be made for the files trees: set TMPDIR to one")
	})
	return p.dir, p.err
}

// removePrivateDir removes the private directory (Engine.Close, after
// every run and instance has ended).
func (e *Engine) removePrivateDir() {
	if e.private.dir != "" {
		os.RemoveAll(e.private.dir)
	}
}

// layOutFiles writes the in-memory files (Check has vetted their paths)
// into a new tree in the engine's private directory and opens it for the
// preopen at "/".
func (w *wasiRun) layOutFiles(files map[string][]byte, l limits.Limits) error {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	private, err := w.engine.privateDir()
	if err != nil {
		return &Error{Kind: KindHost, Message: "creating the files tree: " + err.Error(), err: err}
	}
	root, err := os.MkdirTemp(private, "files-")
	if err != nil {
		return treeError(err)
	}
	w.root = root
	// A file's host path is the root's plus its guest path: within
	// PATH_MAX (4,096 bytes with the NUL) for every path Check allows,
	// unless the temporary directory's own path is very long.
	longest := ""
	for _, p := range paths {
		if len(p) > len(longest) {
			longest = p
		}
	}
	if len(root)+len(longest) > 4095 {
		return &GrantError{Field: protocol.WASIField + ".files[" + strconv.Quote(longest) + "]",
			Problem: fmt.Sprintf("is too long to lay out under this sidecar's temporary directory (at most %d bytes here)", 4095-len(root))}
	}
	deadline := time.Now().Add(l.Timeout)
	for _, p := range paths {
		// Each file costs a few system calls before the run's fences
		// exist: 60,000 empty files (a 1 MB message) took tens of
		// seconds, so the lay-out stops when the run is cancelled (a
		// cancel, the end of input) or has taken the run's whole
		// timeout (then the guest gets its own after it: a run takes
		// at most twice timeoutMs).
		if w.ctx.Err() != nil {
			return cancelledError()
		}
		if time.Now().After(deadline) {
			return timeoutError(l)
		}
		host := filepath.Join(root, filepath.FromSlash(p[1:]))
		if err := os.MkdirAll(filepath.Dir(host), 0o700); err != nil {
			return treeError(err)
		}
		if err := os.WriteFile(host, files[p], 0o400); err != nil {
			return treeError(err)
		}
	}
	f, err := os.OpenFile(root, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return treeError(err)
	}
	w.tree = &preopen{f: f, guest: "/"}
	return nil
}

// treeError is the host error of a files tree that could not be made. It
// names the system's reason, never the sidecar's own paths.
func treeError(err error) *Error {
	return &Error{Kind: KindHost, Message: "creating the files tree: " + errnoText(err), err: err}
}
