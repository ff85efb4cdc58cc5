package main

import (
	"flag"
	"math"
	"strings"
	"unicode"

	"github.com/sandboxd/sandboxd/limits"
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
