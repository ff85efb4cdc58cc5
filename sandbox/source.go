package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/protocol"
)

// Reading Source.Path. The parent names a file on the sidecar's machine;
// a careless or hostile parent may name anything: a device that never
// ends (/dev/zero), a FIFO nobody writes (blocking the reader forever), a
// file of secrets (/proc/self/environ). So a module file is opened
// without blocking, must be a regular file on a real file system, is read
// with a bound, and its content is never quoted back in an error: every
// error names the path and the problem only.

// Magic numbers of the pseudo-file systems whose "regular files" are
// views of kernel or process state (statfs(2)): they report size 0 and
// may hold secrets.
const (
	procSuperMagic = 0x9fa0
	sysfsMagic     = 0x62656572
)

// maxQuotedPath is the most of a module path a message repeats: more than
// protocol.MaxQuotedBytes, as a path is useful only with its file name,
// and still a small part of an error answer.
const maxQuotedPath = 512

// pathError is the host error of a module file that cannot be used.
func pathError(path, problem string, cause error) *Error {
	return &Error{Kind: KindHost, Message: fmt.Sprintf("module file %s: %s", protocol.QuoteN(path, maxQuotedPath), problem), err: cause}
}

// readModuleFile reads the module file at path, at most max bytes, or
// explains why not. With allowed directories, the file actually opened
// (symlinks resolved, checked on the open descriptor so that a swapped
// link cannot race the check) must lie inside one of them.
func readModuleFile(path string, max int, allowed []string) ([]byte, error) {
	// With allowed directories, a path that does not even name a place
	// inside one is refused before anything is opened: opening has side
	// effects on some files (a FIFO's writer wakes, a watchdog arms), and
	// the open's errors would tell the parent what exists where. The
	// check on the opened descriptor below still catches symlinks.
	if len(allowed) > 0 && !namesInside(path, allowed) {
		return nil, pathError(path, outsideAllowed, nil)
	}
	// O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
	// writer. It does not affect reading a regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, pathError(path, "cannot open: "+errnoText(err), err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, pathError(path, "cannot stat: "+errnoText(err), err)
	}
	if !fi.Mode().IsRegular() {
		return nil, pathError(path, "not a regular file ("+fileKind(fi.Mode())+"); only regular files are read", nil)
	}
	var fs syscall.Statfs_t
	if err := syscall.Fstatfs(int(f.Fd()), &fs); err == nil && (fs.Type == procSuperMagic || fs.Type == sysfsMagic) {
		return nil, pathError(path, "on a kernel pseudo-file system (/proc, /sys); only regular files are read", nil)
	}
	if len(allowed) > 0 {
		real, err := openedPath(f, path)
		if err != nil {
			return nil, pathError(path, "cannot resolve: "+errnoText(err), err)
		}
		if !insideAny(real, allowed) {
			return nil, pathError(path, outsideAllowed, nil)
		}
	}
	if fi.Size() > int64(max) {
		return nil, tooBig(fi.Size(), max)
	}
	// The size can change under us: read one byte past the bound to know.
	var buf bytes.Buffer
	buf.Grow(int(fi.Size()) + bytes.MinRead)
	if _, err := buf.ReadFrom(io.LimitReader(f, int64(max)+1)); err != nil {
		return nil, pathError(path, "cannot read: "+errnoText(err), err)
	}
	if buf.Len() > max {
		return nil, tooBig(int64(buf.Len()), max)
	}
	return buf.Bytes(), nil
}

const outsideAllowed = "outside the directories the sidecar reads modules from (--allow-path-dir)"

// namesInside reports whether path, made absolute and clean, lies inside
// one of dirs, either as written or with the symlinks of its directory
// resolved (an allowed directory reached through a link). It opens
// nothing; every failure to resolve is simply "not inside", so the
// answer says nothing about what exists outside.
func namesInside(path string, dirs []string) bool {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false
	}
	if insideAny(abs, dirs) {
		return true
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	return err == nil && insideAny(filepath.Join(dir, filepath.Base(abs)), dirs)
}

// openedPath is the resolved path of the file f refers to: the kernel's
// name for the descriptor, so it names what was opened, not what the
// path names now.
func openedPath(f *os.File, path string) (string, error) {
	if real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd()))); err == nil && filepath.IsAbs(real) {
		return real, nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// insideAny reports whether the clean absolute path p is inside one of
// dirs (clean, absolute, symlinks resolved).
func insideAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+string(filepath.Separator)) || d == string(filepath.Separator) {
			return true
		}
	}
	return false
}

// resolveDirs makes each allowed directory absolute with its symlinks
// resolved, so that containment is checked against what the kernel
// reports for an opened file.
func resolveDirs(dirs []string) ([]string, error) {
	out := make([]string, 0, len(dirs))
	for _, d := range dirs {
		if d == "" {
			return nil, errors.New("allowed path dir: empty")
		}
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, fmt.Errorf("allowed path dir %q: %w", d, err)
		}
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return nil, fmt.Errorf("allowed path dir %q: %w", d, err)
		}
		if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("allowed path dir %q: not a directory", d)
		}
		out = append(out, filepath.Clean(real))
	}
	return out, nil
}

// errnoText is the system's reason without the path os wraps around it
// (the caller names the path once).
func errnoText(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	case m&os.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "not a plain file"
}

// watLocation extracts "line L, column C" from a WAT error, for errors
// about a module file, whose text must not be quoted back.
func watLocation(msg string) string {
	i := strings.Index(msg, "<anon>:")
	if i < 0 {
		return ""
	}
	parts := strings.SplitN(msg[i+len("<anon>:"):], ":", 3)
	if len(parts) < 2 {
		return ""
	}
	line, err1 := strconv.Atoi(parts[0])
	col := parts[1]
	if j := strings.IndexFunc(col, func(r rune) bool { return r < '0' || r > '9' }); j >= 0 {
		col = col[:j]
	}
	c, err2 := strconv.Atoi(col)
	if err1 != nil || err2 != nil {
		return ""
	}
	return fmt.Sprintf(" (line %d, column %d)", line, c)
}
