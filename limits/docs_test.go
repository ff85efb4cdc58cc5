package limits_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/sandboxd/sandboxd/limits"
)

// flagName is a limit's flag suffix: timeoutMs -> timeout-ms.
func flagName(field string) string {
	var b strings.Builder
	for _, r := range field {
		if unicode.IsUpper(r) {
			b.WriteByte('-')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// docValue reads a value as the docs write it in a limit's unit:
// "1,000", "2^50", "16 MiB", "180 s" (for a limit in milliseconds).
func docValue(text, field string) (uint64, error) {
	text = strings.TrimSpace(strings.ReplaceAll(text, ",", ""))
	mult := uint64(1)
	for suffix, m := range map[string]uint64{" KiB": 1 << 10, " MiB": 1 << 20, " GiB": 1 << 30, " s": 1000, " min": 60_000} {
		if strings.HasSuffix(text, suffix) {
			if (suffix == " s" || suffix == " min") != strings.HasSuffix(field, "Ms") {
				return 0, fmt.Errorf("%q: unit%s for %s", text, suffix, field)
			}
			text, mult = strings.TrimSuffix(text, suffix), m
		}
	}
	if base, exp, ok := strings.Cut(text, "^"); ok {
		b, err1 := strconv.ParseFloat(base, 64)
		e, err2 := strconv.ParseFloat(exp, 64)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("%q is not a number", text)
		}
		return uint64(math.Pow(b, e)) * mult, nil
	}
	v, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", text)
	}
	return uint64(v * float64(mult)), nil
}

// TestThreatModelStatesTheDefaults: every default and default maximum
// docs/threat-model.md states, in its table of operator knobs (one row
// per limit, `--default-…` and `--max-…`) and in its text ("`field`,
// default V"), is the one Defaults and DefaultMaximums give, and every
// limit has its row: the page cannot drift from the table in limits.go.
func TestThreatModelStatesTheDefaults(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "threat-model.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	def, maxs := limits.Defaults(), limits.DefaultMaximums()
	fields := map[string]limits.Field{}
	for _, f := range limits.Fields() {
		fields[flagName(f.Name)] = f
	}

	_, knobs, ok := strings.Cut(doc, "## Operator knobs")
	if !ok {
		t.Fatal("docs/threat-model.md has no Operator knobs section")
	}
	row := regexp.MustCompile("(?m)^\\| `--default-([a-z-]+)`, `--max-[a-z-]+` \\| ([^|]+) \\|")
	seen := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(knobs, -1) {
		f, ok := fields[m[1]]
		if !ok {
			continue // not a run's limit (--default-var-bytes)
		}
		seen[f.Name] = true
		values := regexp.MustCompile(`\([^)]*\)`).ReplaceAllString(m[2], "")
		dv, mv, ok := strings.Cut(values, " / ")
		if !ok {
			t.Errorf("row --default-%s: %q is not DEFAULT / MAXIMUM", m[1], m[2])
			continue
		}
		for _, c := range []struct {
			what, text string
			want       uint64
		}{{"default", dv, f.Get(def)}, {"maximum", mv, f.Get(maxs)}} {
			got, err := docValue(c.text, f.Name)
			if err != nil {
				t.Errorf("row --default-%s, %s: %v", m[1], c.what, err)
			} else if got != c.want {
				t.Errorf("docs/threat-model.md gives the %s of %s as %q (%d); limits.go has %d", c.what, f.Name, strings.TrimSpace(c.text), got, c.want)
			}
		}
	}
	for _, f := range limits.Fields() {
		if !seen[f.Name] {
			t.Errorf("docs/threat-model.md's Operator knobs has no row for %s (--default-%s, --max-…)", f.Name, flagName(f.Name))
		}
	}

	mention := regexp.MustCompile("`([a-zA-Z]+)`, default ([0-9][0-9,.^]*(?: (?:KiB|MiB|GiB|s|min))?)")
	for _, m := range mention.FindAllStringSubmatch(doc, -1) {
		f, ok := fields[flagName(m[1])]
		if !ok {
			continue // not a limit
		}
		got, err := docValue(m[2], f.Name)
		if err != nil {
			t.Errorf("%q: %v", m[0], err)
		} else if got != f.Get(def) {
			t.Errorf("docs/threat-model.md says %q (%d); limits.go's default is %d", m[0], got, f.Get(def))
		}
	}
}
