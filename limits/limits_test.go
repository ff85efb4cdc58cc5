package limits_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
)

func TestDefaultsAreValid(t *testing.T) {
	if err := limits.Defaults().Validate(limits.DefaultMaximums()); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if err := limits.DefaultMaximums().Validate(limits.HardMaximums()); err != nil {
		t.Fatalf("default maximums: %v", err)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	max := limits.DefaultMaximums()
	cases := []struct {
		name   string
		change func(*limits.Limits)
		field  string
	}{
		{"zero fuel", func(l *limits.Limits) { l.Fuel = 0 }, "fuel"},
		{"fuel above max", func(l *limits.Limits) { l.Fuel = max.Fuel + 1 }, "fuel"},
		{"zero timeout", func(l *limits.Limits) { l.Timeout = 0 }, "timeoutMs"},
		{"sub-millisecond timeout", func(l *limits.Limits) { l.Timeout = 1500 * time.Microsecond }, "timeoutMs"},
		{"memory above max", func(l *limits.Limits) { l.MemoryBytes = max.MemoryBytes + 1 }, "memoryBytes"},
		{"zero tables", func(l *limits.Limits) { l.TableElements = 0 }, "tableElements"},
		{"zero instances", func(l *limits.Limits) { l.Instances = 0 }, "instances"},
		{"memories above max", func(l *limits.Limits) { l.Memories = max.Memories + 1 }, "memories"},
		{"zero log bytes", func(l *limits.Limits) { l.LogBytes = 0 }, "logBytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := limits.Defaults()
			tc.change(&l)
			err := l.Validate(max)
			var fe *limits.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, limits.ErrInvalid) {
				t.Fatalf("Validate = %v, want a FieldError for %s", err, tc.field)
			}
		})
	}
}

func TestFieldsRoundTrip(t *testing.T) {
	var l limits.Limits
	for i, f := range limits.Fields() {
		f.Set(&l, uint64(i+1))
	}
	for i, f := range limits.Fields() {
		if got := f.Get(l); got != uint64(i+1) {
			t.Errorf("%s: got %d after setting %d", f.Name, got, i+1)
		}
	}
}

// TestFieldsIsACopy: what a caller does to the list it gets changes
// nobody else's.
func TestFieldsIsACopy(t *testing.T) {
	fs := limits.Fields()
	name := fs[0].Name
	fs[0].Name = "changed"
	fs[0].Get = nil
	if got := limits.Fields()[0]; got.Name != name || got.Get == nil {
		t.Fatalf("Fields()[0] = %q after a caller changed its copy", got.Name)
	}
}
