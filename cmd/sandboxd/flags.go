package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime"
	"strings"
	"time"
	"unicode"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/rpc"
	"github.com/sandboxd/sandboxd/sandbox"
)

// kebab turns a wire name (timeoutMs) into a flag name (timeout-ms).
func kebab(name string) string {
	var b strings.Builder
	for _, r := range name {
		if unicode.IsUpper(r) {
			b.WriteByte('-')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// limitFlags registers --PREFIX-<limit> for every limit, starting from
// base, and returns a function that reads the flags back.
func limitFlags(fs *flag.FlagSet, prefix string, base limits.Limits, what string) func() limits.Limits {
	fields := limits.Fields()
	vals := make([]*uint64, len(fields))
	for i, f := range fields {
		name := prefix + kebab(f.Name)
		if renamed, ok := renamedLimitFlags[name]; ok {
			name = renamed
		}
		usage := what + " " + f.Name
		if noun, ok := limitFlagNouns[f.Name]; ok {
			usage = what + " " + noun + " (limits." + f.Name + ")"
		}
		vals[i] = fs.Uint64(name, f.Get(base), usage)
	}
	return func() limits.Limits {
		l := base
		for i, f := range fields {
			f.Set(&l, *vals[i])
		}
		return l
	}
}

// limitFlagNouns say what a limit counts where its name alone is
// ambiguous: "instances" next to --max-instances (live instantiated
// instances) would read as the same thing.
var limitFlagNouns = map[string]string{"instances": "wasm instances per store"}

// renamedLimitFlags are limit flags whose generated name is taken:
// --max-instances bounds the live long-lived instances (instantiate), so
// the maximum of the per-store instances limit is --max-store-instances.
var renamedLimitFlags = map[string]string{"max-instances": "max-store-instances"}

// cliLimit is how the one-shot commands (run, run --wasi, call) take a
// limit: its flag, in the unit a shell user types (MiB for the byte
// limits of memory, milliseconds for time).
type cliLimit struct {
	field string // its wire name in limits.Fields()
	flag  string
	mib   bool // the flag counts MiB of a byte limit
	usage string
}

// cliLimits gives every limit of limits.Fields() a flag in every one-shot
// command (TestEveryLimitHasAFlagInEveryCommand): a limit that one
// command's guests cannot reach (log bytes of a WASI program, which has
// no host::log) is still accepted and validated there, like a sidecar
// request's.
var cliLimits = []cliLimit{
	{"fuel", "fuel", false, "fuel budget (instructions)"},
	{"timeoutMs", "timeout-ms", false, "wall-clock deadline in milliseconds"},
	{"memoryBytes", "memory-mb", true, "memory cap in MiB (all linear memories and table storage together)"},
	{"tableElements", "table-elements", false, "cap on the elements of each table"},
	{"instances", "instances", false, "cap on the wasm instances in the run's store"},
	{"memories", "memories", false, "number of linear memories allowed"},
	{"logBytes", "log-bytes", false, "total guest log bytes kept"},
	{"outputBytes", "output-bytes", false, "bytes of a WASI program's stdout and of its stderr kept (each); the rest is dropped"},
	{"compileTimeoutMs", "compile-timeout-ms", false, "compile deadline in milliseconds"},
	{"compileMemoryBytes", "compile-memory-mb", true, "compile memory limit in MiB (the compile process's data size)"},
}

// cliLimitFlags registers the flags of cliLimits on fs, starting from
// limits.Defaults(); usage replaces the usage of the flags it names
// (sandboxd call's limits are each call's, or the instance's). The
// function it returns reads the flags back into a validated Limits, or an
// error naming the flag.
func cliLimitFlags(fs *flag.FlagSet, usage map[string]string) func() (limits.Limits, error) {
	def := limits.Defaults()
	fields := map[string]limits.Field{}
	for _, f := range limits.Fields() {
		fields[f.Name] = f
	}
	vals := make([]*uint64, len(cliLimits))
	for i, c := range cliLimits {
		v := fields[c.field].Get(def)
		if c.mib {
			v >>= 20
		}
		text := c.usage
		if u, ok := usage[c.flag]; ok {
			text = u
		}
		vals[i] = fs.Uint64(c.flag, v, text)
	}
	return func() (limits.Limits, error) {
		l := def
		for i, c := range cliLimits {
			v := *vals[i]
			if c.mib {
				v = mibBytes(v)
			}
			fields[c.field].Set(&l, v)
		}
		if err := l.Validate(limits.HardMaximums()); err != nil {
			return l, errors.New(cliLimitError(err))
		}
		return l, nil
	}
}

// cliLimitError names the flag of a limit Validate refused: "--fuel:
// must be > 0".
func cliLimitError(err error) string {
	var fe *limits.FieldError
	if errors.As(err, &fe) {
		for _, c := range cliLimits {
			if c.field == fe.Field {
				return fmt.Sprintf("--%s: %s", c.flag, fe.Problem)
			}
		}
	}
	return err.Error()
}

// parseInterspersed parses flags that may come before or after positional
// arguments (flag.Parse alone stops at the first positional).
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// mibBytes is a flag's count of MiB in bytes, saturating as limits.Millis does:
// --memory-mb 17592186044417 was 1 MiB after the shift wrapped around.
func mibBytes(n uint64) uint64 {
	if n > math.MaxUint64>>20 {
		return math.MaxUint64
	}
	return n << 20
}

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// poolFlags registers the instance pool's flags and returns a function
// that sets the pool's part of an engine's config (sandbox/pool.go): its
// size follows from --max-concurrency (runs at once) and the maximums
// (--max-memories, --max-table-elements) as well as --max-instances;
// these flags choose whether there is one and how much of each slot stays
// resident. Flags the server refuses are left for it to name.
func poolFlags(fs *flag.FlagSet) func(c *sandbox.Config, runs int, maximums limits.Limits) {
	pool := fs.Bool("pool", true, "allocate linear memories and tables from a pool reserved at start, sized by --max-concurrency, --max-instances, --max-memories and --max-table-elements (false: each run maps and unmaps its own)")
	keep := fs.Uint64("pool-keep-resident", sandbox.DefaultKeepResident, "bytes at the start of each pooled linear memory and table zeroed in place when a run ends rather than given back to the kernel, at most 1 GiB (more: fewer page faults for guests that touch more, a longer memset per run; 0: the default)")
	return func(c *sandbox.Config, runs int, maximums limits.Limits) {
		c.NoPool, c.KeepResident, c.MaxRuns = !*pool, *keep, max(runs, 0)
		if maximums.Validate(limits.HardMaximums()) == nil {
			c.Maximums = maximums
		}
	}
}

// sidecarFlags are the flags serve and mcp share, so the two servers are
// configured alike: the run slots and the bounds on waiting requests, the
// engine's (module cache, compiles, module files, WASI directories, WASI
// descriptors, epoch tick, pool), every limit's default and maximum, a
// plugin's varBytes, and the stderr log level.
type sidecarFlags struct {
	fs                    *flag.FlagSet
	maxConc, maxQueue     *int
	maxMsg, maxQueueBytes *int64
	outputHighWater       *int64
	cacheEntries          *int
	cacheBytes            *int64
	cacheDir              *string
	maxCompiles           *int
	maxModule             *int
	pathDirs, wasiDirs    multiFlag
	maxOpenFiles          *int
	tick                  *time.Duration
	logLevel              *string
	defaults, maximums    func() limits.Limits
	defaultVarBytes       *uint64
	maxVarBytes           *uint64
	pool                  func(c *sandbox.Config, runs int, maximums limits.Limits)
}

// newSidecarFlags registers the shared flags on fs. pathDirDefault says
// what --allow-path-dir allows when it is not given.
func newSidecarFlags(fs *flag.FlagSet, pathDirDefault string) *sidecarFlags {
	f := &sidecarFlags{fs: fs}
	f.maxConc = fs.Int("max-concurrency", runtime.NumCPU(), "runs executing at once")
	f.maxQueue = fs.Int("max-queue", rpc.DefaultMaxQueue, "runs waiting for a worker before requests get busy")
	f.maxMsg = fs.Int64("max-message-bytes", rpc.DefaultMaxMessageBytes, "largest accepted message")
	f.maxQueueBytes = fs.Int64("max-queue-bytes", rpc.DefaultMaxQueueBytes, "summed message bytes of the waiting requests before requests get busy (at least --max-message-bytes)")
	f.outputHighWater = fs.Int64("output-high-water", rpc.DefaultOutputHighWater, "bytes of output waiting for a client that is not reading before no further request is read and no run starts")
	f.cacheEntries = fs.Int("cache-entries", sandbox.DefaultCacheEntries, "compiled modules kept in memory (0: none, the cache is off)")
	f.cacheBytes = fs.Int64("cache-bytes", sandbox.DefaultCacheBytes, "bytes the module cache may hold in memory: compiled sizes plus the texts and binaries it knows each module by")
	f.cacheDir = fs.String("cache-dir", "", "directory that keeps compiled modules across restarts (off when empty); machine code the sidecar loads, so it and each directory above it must be owned by you or root and writable by no one else (a parent may be sticky, like /tmp), or the sidecar refuses to start: chmod go-w, chown")
	f.maxCompiles = fs.Int("max-compiles", sandbox.DefaultMaxCompiles(), "compiles running at once, each a child process on one core")
	f.maxModule = fs.Int("max-module-bytes", sandbox.DefaultMaxModuleBytes, "largest accepted module")
	fs.Var(&f.pathDirs, "allow-path-dir", "read module.path files only inside this directory (repeatable; default: "+pathDirDefault+")")
	fs.Var(&f.wasiDirs, "allow-dir", "let WASI runs preopen this directory or any under it (repeatable; default: none)")
	f.maxOpenFiles = fs.Int("max-open-files", sandbox.DefaultMaxOpenFiles, "host descriptors one WASI store may hold, preopens included (past it the guest's path_open gets EMFILE)")
	f.tick = fs.Duration("tick", sandbox.DefaultTick, "epoch tick: the granularity of deadlines and cancellation")
	f.logLevel = fs.String("log-level", "info", "stderr log level: debug, info, warn, error")
	f.defaults = limitFlags(fs, "default-", limits.Defaults(), "default")
	f.maximums = limitFlags(fs, "max-", limits.DefaultMaximums(), "maximum")
	// varBytes is an instance's limit, not a run's: its own pair of flags.
	f.defaultVarBytes = fs.Uint64("default-var-bytes", protocol.DefaultVarBytes, "default varBytes (a plugin instance's vars, keys and values together)")
	f.maxVarBytes = fs.Uint64("max-var-bytes", protocol.MaxVarBytes, fmt.Sprintf("maximum varBytes (at most %d)", uint64(protocol.MaxVarBytes)))
	f.pool = poolFlags(fs)
	return f
}

// limits returns the defaults and the maximums. A default the operator
// did not set follows a maximum they lowered below it (--max-fuel 1000000
// alone caps the default fuel too), rather than refusing to start.
func (f *sidecarFlags) limits() (def, maximums limits.Limits) {
	def, maximums = f.defaults(), f.maximums()
	for _, l := range limits.Fields() {
		if l.Get(def) > l.Get(maximums) && !flagSet(f.fs, "default-"+kebab(l.Name)) {
			l.Set(&def, l.Get(maximums))
		}
	}
	return def, maximums
}

// check returns the first shared flag out of range, named as its flag;
// the limits are left to the server's own validation.
func (f *sidecarFlags) check() error {
	switch {
	case *f.maxCompiles < 1:
		return errors.New("--max-compiles: must be >= 1")
	case *f.maxOpenFiles < 1:
		return errors.New("--max-open-files: must be >= 1")
	case *f.maxVarBytes == 0: // the servers would take 0 as "the default"
		return errors.New("max-varBytes: must be > 0")
	case *f.defaultVarBytes == 0:
		return errors.New("default-varBytes: must be > 0")
	}
	if *f.maxMsg > *f.maxQueueBytes && !flagSet(f.fs, "max-queue-bytes") {
		*f.maxQueueBytes = *f.maxMsg // a larger message limit raises the default
	}
	return nil
}

// start is how serve and mcp begin: it parses args (--help ends there,
// ok false with status 0), refuses positional arguments, and puts the
// non-blocking logWriter in front of stderr, so that a parent or client
// that does not read stderr (editors often keep it for a log pane) cannot
// stall the process, with the --log-level logger writing to it. The
// caller closes log when it returns; on a failure (status failed) start
// has closed it, after saying why on it.
func (f *sidecarFlags) start(cmd string, args []string, stdout, stderr io.Writer, failed int) (log *logWriter, logger *slog.Logger, status int, ok bool) {
	if rest, status, ok := parseCommandLine(f.fs, args, stdout, stderr); !ok {
		return nil, nil, status, false
	} else if len(rest) > 0 {
		fmt.Fprintf(stderr, "sandboxd: unexpected argument %q\n", rest[0])
		return nil, nil, failed, false
	}
	log = newLogWriter(stderr)
	logger, err := f.logger(log)
	if err != nil {
		fmt.Fprintf(log, "sandboxd: %v\n", err)
		log.close(time.Second)
		return nil, nil, failed, false
	}
	return log, logger, 0, true
}

// logger is the server's diagnostics logger on stderr, at --log-level.
func (f *sidecarFlags) logger(stderr io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(*f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %v", err)
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})), nil
}

// checkInstanceFlags checks --max-instances and --instance-idle, which
// serve (instances and sessions) and mcp (sessions) both take.
func checkInstanceFlags(maxInstances int, idle time.Duration) error {
	if maxInstances < 1 {
		return errors.New("--max-instances: must be >= 1")
	}
	if idle < time.Millisecond {
		return fmt.Errorf("--instance-idle: must be at least 1ms, got %v", idle)
	}
	return nil
}

// engineConfig is the engine's configuration from the flags. Its compile
// limits are the defaults' (a run's limits carry their own).
func (f *sidecarFlags) engineConfig(def, maximums limits.Limits) sandbox.Config {
	cacheEntries := *f.cacheEntries
	if cacheEntries == 0 {
		cacheEntries = sandbox.CacheOff
	}
	c := sandbox.Config{Tick: *f.tick, CacheEntries: cacheEntries, CacheBytes: *f.cacheBytes,
		CacheDir: *f.cacheDir, MaxModuleBytes: *f.maxModule, ModulePathDirs: f.pathDirs, MaxCompiles: *f.maxCompiles,
		CompileTimeout: def.CompileTimeout, CompileMemoryBytes: def.CompileMemoryBytes, WASIDirs: f.wasiDirs,
		MaxOpenFiles: *f.maxOpenFiles}
	f.pool(&c, *f.maxConc, maximums)
	return c
}
