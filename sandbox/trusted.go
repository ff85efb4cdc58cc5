package sandbox

// Trusted directories: where the sidecar keeps and loads machine code
// (Config.CacheDir, the directories CompileStored is given). Loading an
// artefact runs its bytes as code, so whoever can write such a directory,
// or replace it, can run code as the sidecar. The rule is ssh's for its
// keys, extended to the whole path:
//
//   - the directory itself, and each file loaded from it, is owned by the
//     process's user or by root and is not writable by group or others
//     (group write is allowed on the user's own files when the group is
//     the user's private group, as Debian's ssh allows it: see
//     privateGroup);
//   - every directory above it, up to /, is owned by the process's user or
//     by root and is not writable by group or others unless it is sticky
//     (like /tmp: there, no one else can rename or remove what we own);
//   - a symbolic link met on the way is owned by the process's user or by
//     root, and what it points to is checked by the same rule.
//
// So an installation made by root (0755 directories, 0644 files) is
// trusted by every user, and a directory another user could write, or
// could swap for one of their own through a writable parent, is not.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// maxLinksFollowed bounds the symbolic links a trust check follows (as
// the kernel's ELOOP does).
const maxLinksFollowed = 40

// CheckTrustedDir checks that the directory dir, which must exist, may
// hold machine code the process loads: dir and every directory above it
// keep the rule above for the process's effective user. The error names
// the path that breaks it and how to fix it.
func CheckTrustedDir(dir string) error {
	return checkTrustedDir(dir, os.Geteuid())
}

// checkTrustedDir is CheckTrustedDir for the user uid.
func checkTrustedDir(dir string, uid int) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := checkTrustedEntry("/", uid, false); err != nil {
		return err
	}
	cur := "/"
	pending := splitPath(abs)
	links := 0
	for len(pending) > 0 {
		name := pending[0]
		pending = pending[1:]
		if name == ".." {
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			return fmt.Errorf("%s: %s", next, errnoText(err))
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			if owner := fileOwner(fi); !trustedOwner(owner, uid) {
				return fmt.Errorf("%s is a symbolic link owned by uid %d, not by this process's user (uid %d) or root: its owner could point it elsewhere; replace it with a link of your own, or give the real path",
					next, owner, uid)
			}
			if links++; links > maxLinksFollowed {
				return fmt.Errorf("%s: too many levels of symbolic links", abs)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return fmt.Errorf("%s: %s", next, errnoText(err))
			}
			if filepath.IsAbs(target) {
				cur = "/"
			}
			pending = append(splitPath(target), pending...)
			continue
		}
		last := len(pending) == 0
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", next)
		}
		if err := checkTrustedEntry(next, uid, last); err != nil {
			return err
		}
		cur = next
	}
	return nil
}

// checkTrustedEntry checks the directory at path (not a link): trusted
// owner, and not writable by group or others unless it is a parent
// (strict false) and sticky.
func checkTrustedEntry(path string, uid int, strict bool) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("%s: %s", path, errnoText(err))
	}
	return trustedMode(path, fi, uid, strict)
}

// trustedMode applies the rule to what fi describes.
func trustedMode(path string, fi os.FileInfo, uid int, strict bool) error {
	if owner := fileOwner(fi); !trustedOwner(owner, uid) {
		return fmt.Errorf("%s is owned by uid %d, not by this process's user (uid %d) or root: its owner could put machine code there that the sidecar would run; chown it to uid %d, or choose a directory of your own",
			path, owner, uid, uid)
	}
	perm := fi.Mode().Perm()
	if perm&0o022 == 0 || (!strict && fi.Mode()&os.ModeSticky != 0) {
		return nil
	}
	if perm&0o002 == 0 && int64(fileOwner(fi)) == int64(uid) && privateGroup(fileGroup(fi), uid) {
		return nil // writable by its owner's private group: by its owner alone
	}
	return fmt.Errorf("%s is writable by group or others (mode %04o): they could put machine code there, or replace what the sidecar loads; run chmod go-w %s",
		path, perm, path)
}

// privateGroup reports whether the group gid is the private group of the
// user uid, the convention of systems that give their users umask 002: a
// group named as the user (in /etc/passwd and /etc/group) with no member
// but that user. Only that user can write through it. A group the files
// cannot show to be private (other members, another name, names served
// only by a directory service) is not.
func privateGroup(gid uint32, uid int) bool {
	passwd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return false
	}
	group, err := os.ReadFile("/etc/group")
	if err != nil {
		return false
	}
	return isPrivateGroup(string(passwd), string(group), gid, uid)
}

// isPrivateGroup is privateGroup on the texts of /etc/passwd and
// /etc/group.
func isPrivateGroup(passwd, group string, gid uint32, uid int) bool {
	login := ""
	for _, line := range strings.Split(passwd, "\n") {
		// name:password:uid:gid:gecos:home:shell
		if f := strings.Split(line, ":"); len(f) >= 3 && f[2] == strconv.Itoa(uid) && f[0] != "" {
			login = f[0]
			break
		}
	}
	if login == "" {
		return false
	}
	for _, line := range strings.Split(group, "\n") {
		// name:password:gid:member,member
		f := strings.Split(line, ":")
		if len(f) != 4 || f[2] != strconv.FormatUint(uint64(gid), 10) {
			continue
		}
		if f[0] != login {
			return false
		}
		for _, m := range strings.Split(f[3], ",") {
			if m != "" && m != login {
				return false
			}
		}
		return true
	}
	return false
}

// trustedOwner reports whether a file of the user owner may be trusted by
// the user uid: its own, or root's.
func trustedOwner(owner uint32, uid int) bool {
	return owner == 0 || int64(owner) == int64(uid)
}

// fileOwner is the uid of the file fi describes.
func fileOwner(fi os.FileInfo) uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Uid
	}
	return ^uint32(0)
}

// fileGroup is the gid of the file fi describes.
func fileGroup(fi os.FileInfo) uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Gid
	}
	return ^uint32(0)
}

func splitPath(p string) []string {
	var out []string
	for _, s := range strings.Split(p, "/") {
		if s != "" && s != "." {
			out = append(out, s)
		}
	}
	return out
}

// errUntrustedFile marks a file of a trusted directory that is not
// loaded: not a regular file, or one the rule does not trust.
var errUntrustedFile = errors.New("untrusted file")

// openTrustedFile opens the file at path of a trusted directory for
// reading, as module files are opened (source.go): without blocking (a
// FIFO planted there would otherwise wait for a writer forever), without
// following a symbolic link, then checked on the descriptor (no race with
// a swap): a regular file, owned by the user uid or root, not writable by
// group or others.
func openTrustedFile(path string, uid int) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%w: %s is %s", errUntrustedFile, path, fileKind(fi.Mode()))
	}
	if err := trustedMode(path, fi, uid, true); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%w: %v", errUntrustedFile, err)
	}
	return f, fi, nil
}

// ReadTrustedFile reads the file at path, at most max bytes, opened and
// checked as openTrustedFile does for the process's effective user: for
// a program's own files that it runs (the snippet runtimes).
func ReadTrustedFile(path string, max int) ([]byte, error) {
	f, fi, err := openTrustedFile(path, os.Geteuid())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > int64(max) {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, max)
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %s", path, errnoText(err))
	}
	if len(b) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, max)
	}
	return b, nil
}

// descriptorPath names the file f has open, for a library that opens by
// path: /proc/self/fd/N reopens the very file f refers to, whatever is at
// its path now; fallback where /proc is not mounted.
func descriptorPath(f *os.File, fallback string) string {
	p := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return fallback
}
