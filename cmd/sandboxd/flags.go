package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strings"
	"unicode"

	"github.com/sandboxd/sandboxd/limits"
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
	vals := make([]*uint64, len(limits.Fields))
	for i, f := range limits.Fields {
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
		for i, f := range limits.Fields {
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
	field string // its wire name in limits.Fields
	flag  string
	mib   bool // the flag counts MiB of a byte limit
	usage string
}

// cliLimits gives every limit of limits.Fields a flag in every one-shot
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
	for _, f := range limits.Fields {
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
