package sandboxd

// Finding the sidecar binary, in the order the Python and Node clients use
// (minus the binary those packages can carry: a Go module carries none).

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
)

// ErrBinaryNotFound is wrapped by the error of FindBinary (and of Start
// with an empty binary) when no sandboxd binary is found; the message
// names every place that was tried.
var ErrBinaryNotFound = errors.New("sandboxd binary not found")

// buildHint ends every ErrBinaryNotFound message.
const buildHint = "build it with `make binary` (or `make build`, which adds the snippet runtimes) in the sandboxd repository (needs Go and gcc), " +
	"then pass its path to Start, set SANDBOXD_BIN, or put it on PATH (`make install`)"

// goModule is the module path a sandboxd checkout's go.mod declares.
const goModule = "github.com/sandboxd/sandboxd"

// FindBinary finds the sidecar binary, trying in order:
//
//  1. explicit, if not empty: a path (anything with a path separator,
//     relative to the current directory), or a bare name looked up on PATH;
//  2. $SANDBOXD_BIN, if set and not empty, read the same way;
//  3. `sandboxd` on PATH;
//  4. bin/sandboxd of a sandboxd checkout: first the one the program's
//     go.mod points at with a directory `replace` of
//     github.com/sandboxd/sandboxd (as recorded in the program's build
//     info; a relative replacement is resolved against the directory of
//     the program's own go.mod, found above the current directory), then
//     the one holding the current directory. A checkout is the nearest
//     directory at or above the start whose go.mod declares module
//     github.com/sandboxd/sandboxd.
//
// The compiled-in source location of this package is never used: it names
// the machine and directory the program was built in, not where it runs.
// An explicit path or $SANDBOXD_BIN that is not an executable file is an
// error, not a fall-through to the next place (which would run some other
// build). The result is an absolute path. Errors wrap ErrBinaryNotFound
// and say what was tried and how to build the binary.
func FindBinary(explicit string) (string, error) {
	cwd, err := os.Getwd()
	if err != nil {
		cwd = ""
	}
	bi, _ := debug.ReadBuildInfo()
	return findBinary(explicit, os.Getenv("SANDBOXD_BIN"), checkoutStarts(bi, cwd))
}

// findBinary is FindBinary with its inputs given: the environment's
// SANDBOXD_BIN and the directories to look above for a checkout, in order.
func findBinary(explicit, envBin string, starts []string) (string, error) {
	var wanted, from string
	switch {
	case explicit != "":
		wanted, from = explicit, "the binary argument"
	case envBin != "":
		wanted, from = envBin, "$SANDBOXD_BIN"
	default:
		return findDefault(starts)
	}
	if strings.ContainsRune(wanted, filepath.Separator) || strings.ContainsRune(wanted, '/') {
		abs, err := filepath.Abs(wanted)
		if err != nil {
			abs = wanted
		}
		if isExecutableFile(abs) {
			return abs, nil
		}
		return "", fmt.Errorf("%w: %s (from %s) is not an executable file; %s", ErrBinaryNotFound, abs, from, buildHint)
	}
	if found, ok := searchPath(wanted); ok {
		return found, nil
	}
	return "", fmt.Errorf("%w: no executable %q on PATH (from %s); %s", ErrBinaryNotFound, wanted, from, buildHint)
}

func findDefault(starts []string) (string, error) {
	if found, ok := searchPath("sandboxd"); ok {
		return found, nil
	}
	var checkouts []string
	for _, start := range starts {
		root, ok := findCheckout(start)
		if !ok || slices.Contains(checkouts, root) {
			continue
		}
		checkouts = append(checkouts, root)
		if candidate := filepath.Join(root, "bin", "sandboxd"); isExecutableFile(candidate) {
			return candidate, nil
		}
	}
	var where string
	switch {
	case len(checkouts) > 0:
		where = "the sandboxd checkout at " + strings.Join(checkouts, " or ") + " has no bin/sandboxd"
	case len(starts) > 0:
		where = "no sandboxd checkout holds " + strings.Join(starts, " or ") +
			" (the directory go.mod's `replace` of " + goModule + " names, if the build info records one, and the current directory)"
	default:
		where = "the current directory is unknown and go.mod has no `replace` of " + goModule
	}
	return "", fmt.Errorf("%w: $SANDBOXD_BIN is not set, there is no sandboxd on PATH, and %s; %s", ErrBinaryNotFound, where, buildHint)
}

// checkoutStarts are the directories above which FindBinary looks for a
// checkout: the directory replacing github.com/sandboxd/sandboxd in bi
// (the running program's build info, nil if it has none), then cwd (""
// if unknown). A relative replacement is relative to the main module's
// directory, which is looked for above cwd (a go.mod declaring
// bi.Main.Path); if none is found it is left out.
func checkoutStarts(bi *debug.BuildInfo, cwd string) []string {
	var starts []string
	if dir := replaceDir(bi, cwd); dir != "" {
		starts = append(starts, dir)
	}
	if cwd != "" && !slices.Contains(starts, cwd) {
		starts = append(starts, cwd)
	}
	return starts
}

// replaceDir is the directory a `replace github.com/sandboxd/sandboxd =>
// dir` of the main module names, made absolute; "" if there is none or it
// cannot be placed.
func replaceDir(bi *debug.BuildInfo, cwd string) string {
	if bi == nil {
		return ""
	}
	for _, dep := range bi.Deps {
		if dep.Path != goModule || dep.Replace == nil || !isLocalPath(dep.Replace.Path) {
			continue // not us, or replaced by another module, not a directory
		}
		dir := dep.Replace.Path
		if filepath.IsAbs(dir) {
			return filepath.Clean(dir)
		}
		if cwd == "" || bi.Main.Path == "" {
			return ""
		}
		mainDir, ok := findModuleRoot(cwd, bi.Main.Path)
		if !ok {
			return ""
		}
		return filepath.Join(mainDir, dir)
	}
	return ""
}

// isLocalPath says whether a replacement names a directory, as go.mod's
// replace directive tells them from module paths: an absolute path, or
// one starting with ./ or ../ (the build info records the directory's
// version as "(devel)").
func isLocalPath(p string) bool {
	return filepath.IsAbs(p) || p == "." || p == ".." ||
		strings.HasPrefix(p, "./") || strings.HasPrefix(p, "../") ||
		strings.HasPrefix(p, "."+string(filepath.Separator)) || strings.HasPrefix(p, ".."+string(filepath.Separator))
}

// findCheckout is the sandboxd checkout holding start: the nearest
// directory at or above it whose go.mod declares github.com/sandboxd/sandboxd.
func findCheckout(start string) (string, bool) {
	return findModuleRoot(start, goModule)
}

// findModuleRoot is the nearest directory at or above start whose go.mod
// declares module modPath.
func findModuleRoot(start, modPath string) (string, bool) {
	here, err := filepath.Abs(start)
	if err != nil {
		return "", false
	}
	for {
		if declaredModule(filepath.Join(here, "go.mod")) == modPath {
			return here, true
		}
		parent := filepath.Dir(here)
		if parent == here {
			return "", false
		}
		here = parent
	}
}

// declaredModule is the module path of the go.mod file at path ("" if
// there is none or it declares none).
func declaredModule(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`+"`")
		}
	}
	return ""
}

// searchPath looks name up on PATH, as exec.Command would: an absolute
// path, or false (a relative PATH entry's result is refused, see
// exec.ErrDot).
func searchPath(name string) (string, bool) {
	found, err := exec.LookPath(name)
	if err != nil {
		return "", false
	}
	if abs, err := filepath.Abs(found); err == nil {
		found = abs
	}
	return found, true
}

func isExecutableFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
