package snippet

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox"
)

// Config configures a Runner. The zero value is valid: every zero field
// takes the documented default.
type Config struct {
	// Dir is the directory of the runtimes: js.wasm, lua.wasm and
	// starlark.wasm (make runtimes builds them into bin/runtimes).
	// Default FindDir().
	Dir string
	// CompiledDirs are where a runtime's compiled artefact is looked for,
	// in order, and where one compiled here is written (the first that
	// takes it). Default: Dir, then UserCompiledDir() (for a Dir the
	// process cannot write, such as an install's).
	CompiledDirs []string
	// Spares is how many interpreters of each language are kept started
	// ahead of need for one-shot evaluations (spares.go). Default
	// DefaultSpares; NoSpares (any negative value) keeps none, so every
	// one-shot evaluation starts its own (what the CLI wants: it
	// evaluates once).
	Spares int
	// Defaults are the run defaults an evaluation or session takes a
	// limit from when it sets none (Runner.Defaults: memoryBytes is the
	// larger of this and its language's, since the cap counts the
	// interpreter). Default limits.Defaults(); the sidecar gives its
	// --default-* flags. Every field must be set.
	Defaults limits.Limits
	// Maximums bound every evaluation's and session's limits: a limit the
	// caller sets above one is refused; a default above one is lowered
	// to it. Default limits.DefaultMaximums(); the sidecar gives its
	// --max-* flags.
	Maximums limits.Limits
	// PruneStale, after a runtime is compiled into CompiledDirs[0],
	// removes what other builds of the program left there and the
	// artefacts of runtimes no longer in Dir (sandbox.PruneArtefacts):
	// for a directory only one build uses at a time, such as bin/runtimes
	// next to bin/sandboxd, which every rebuild would otherwise grow by
	// the three runtimes' 80 MB of machine code.
	PruneStale bool
	// Notice, if set, is told when a runtime must be compiled (a minute
	// of CPU for JavaScript) and when that is done, so that no caller
	// waits without knowing why. The CLI prints it on stderr.
	Notice func(message string)
}

// Documented defaults and fences of a Runner.
const (
	// DefaultSpares keeps one started interpreter per language that has
	// been used: about 12 MB of memory for JavaScript, 5 for Lua and
	// Starlark.
	DefaultSpares = 1
	// NoSpares as Config.Spares keeps none.
	NoSpares = -1

	// An interpreter's start (instantiation and _initialize: the Go
	// runtime's and the interpreter's set-up, 12 M fuel for JavaScript,
	// 3 M for Lua, 1.4 M for Starlark) is sandboxd's work, not the
	// snippet's: it runs under these fences and is never charged to an
	// evaluation, whose fuel, deadline and usage figures are its own.
	StartFuel    = 1 << 30
	StartTimeout = 30 * time.Second

	// A runtime is the operator's file, compiled once per build of
	// sandboxd under these limits (goja's 19 MB took 21-24 s of CPU and
	// up to 768 MiB; 183 s of wall-clock time at load 17).
	CompileTimeout     = 15 * time.Minute
	CompileMemoryBytes = 2 << 30

	// MaxRuntimeBytes bounds the runtime file read (goja's is 19 MB).
	MaxRuntimeBytes = 256 << 20
)

// RuntimesEnv names the environment variable that overrides where the
// runtimes are (FindDir).
const RuntimesEnv = "SANDBOXD_RUNTIMES"

// RuntimeFile is the file of lang's runtime in the runtimes' directory.
func RuntimeFile(lang protocol.Language) string { return string(lang) + ".wasm" }

// FindDir returns where the runtimes are: $SANDBOXD_RUNTIMES if it is
// set; else runtimes/ next to the executable (symlinks resolved: bin/
// runtimes for bin/sandboxd) if it exists; else ../lib/sandboxd/runtimes
// from the executable's directory (where make install puts them) if that
// exists; else runtimes/ next to the executable, which an evaluation's
// error then names.
func FindDir() string {
	if dir := os.Getenv(RuntimesEnv); dir != "" {
		return dir
	}
	exe, err := os.Executable()
	if err != nil {
		return "runtimes"
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	bin := filepath.Dir(exe)
	beside := filepath.Join(bin, "runtimes")
	for _, dir := range []string{beside, filepath.Join(bin, "..", "lib", "sandboxd", "runtimes")} {
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			return filepath.Clean(dir)
		}
	}
	return beside
}

// UserCompiledDir is where runtimes compiled for a Dir that cannot hold
// them are kept: $XDG_CACHE_HOME/sandboxd/runtimes (~/.cache/…), or ""
// when the user has no cache directory.
func UserCompiledDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "sandboxd", "runtimes")
}

func (c Config) withDefaults() (Config, error) {
	if c.Dir == "" {
		c.Dir = FindDir()
	}
	if c.CompiledDirs == nil {
		c.CompiledDirs = []string{c.Dir}
		if user := UserCompiledDir(); user != "" {
			c.CompiledDirs = append(c.CompiledDirs, user)
		}
	}
	if c.Spares == 0 {
		c.Spares = DefaultSpares
	}
	if c.Spares < 0 {
		c.Spares = 0
	}
	if c.Defaults == (limits.Limits{}) {
		c.Defaults = limits.Defaults()
	}
	if err := c.Defaults.Validate(limits.HardMaximums()); err != nil {
		return c, fmt.Errorf("snippet: defaults: %w", err)
	}
	if c.Maximums == (limits.Limits{}) {
		c.Maximums = limits.DefaultMaximums()
	}
	if err := c.Maximums.Validate(limits.HardMaximums()); err != nil {
		return c, fmt.Errorf("snippet: maximums: %w", err)
	}
	if len(c.CompiledDirs) == 0 {
		return c, errors.New("snippet: CompiledDirs: give at least one directory (or none at all for the default)")
	}
	return c, nil
}

// SpareStores is how many stores the spares hold at most, each a one-shot
// run's share of the engine's pool: a program that sizes its engine for
// its runs (sandbox.Config.MaxRuns) adds this, or runs would wait for
// stores the spares keep.
func (c Config) SpareStores() int {
	c, err := c.withDefaults()
	if err != nil {
		return 0
	}
	return c.Spares * len(protocol.Languages())
}

// checkRuntimeDirs refuses runtimes another user could change: Dir and
// each of CompiledDirs that exists must be trusted by the rule of
// sandbox.CheckTrustedDir (owned by the process's user or root, writable
// by no one else, and so every directory above them unless sticky). One
// that does not exist yet is not checked: without runtimes the sidecar
// serves everything else, and a compiled directory is made (0700) and
// checked when a runtime is first stored there.
func checkRuntimeDirs(c Config) error {
	for _, dir := range append([]string{c.Dir}, c.CompiledDirs...) {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			continue
		}
		if err := sandbox.CheckTrustedDir(dir); err != nil {
			return fmt.Errorf("snippet runtimes' directory %s: %w", dir, err)
		}
	}
	return nil
}
