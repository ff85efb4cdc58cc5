package snippet_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox"
)

// TestSnippetsSeeUTC: a snippet reads the host's real time, in UTC,
// whatever the sidecar's time zone (docs/snippets.md, "Time and
// randomness"): JavaScript's local time and Lua's os.date are UTC, their
// "now" lies between two of the host's readings around the evaluation;
// Starlark has no clock.
func TestSnippetsSeeUTC(t *testing.T) {
	for _, tz := range []string{"America/New_York", "Asia/Kolkata"} {
		t.Setenv("TZ", tz)
		for _, c := range []struct {
			lang protocol.Language
			code string
			// want is the value less its last element, the snippet's
			// now in the unit of scale (ms per second for JS, 1 for Lua).
			want  string
			scale int64
		}{
			{js, "[new Date().getTimezoneOffset(), new Date(0).getHours(), new Date(2020, 0, 1).getTime(), new Date(0).toString(), Date.now()]",
				`[0, 0, 1577836800000, "Thu Jan 01 1970 00:00:00 GMT+0000 (UTC)"]`, 1000},
			{lua, `return {os.date("%Y-%m-%d %H:%M %z %Z", 0), os.time({year = 2020, month = 1, day = 1, hour = 0}), os.date("*t").hour == os.date("!*t").hour, os.time()}`,
				`["1970-01-01 00:00 +0000 UTC", 1577836800, true]`, 1},
		} {
			before := time.Now().Unix()
			o, err := eval(t, protocol.Eval{Language: c.lang, Snippet: protocol.Snippet{Code: c.code}, Limits: roomy(limits.Limits{})})
			after := time.Now().Unix() + 1
			if err != nil {
				t.Fatalf("TZ=%s %s: %v", tz, c.lang, err)
			}
			var v []json.RawMessage
			if err := json.Unmarshal(o.Value, &v); err != nil || len(v) == 0 {
				t.Fatalf("TZ=%s %s: value %s", tz, c.lang, o.Value)
			}
			rest, _ := json.Marshal(v[:len(v)-1])
			if !sameJSON(t, rest, c.want) {
				t.Errorf("TZ=%s %s: %s, want %s and the time", tz, c.lang, o.Value, c.want)
			}
			var now float64
			if err := json.Unmarshal(v[len(v)-1], &now); err != nil || int64(now) < before*c.scale || int64(now) > after*c.scale {
				t.Errorf("TZ=%s %s: now %s is not the host's time (%d..%d s)", tz, c.lang, v[len(v)-1], before, after)
			}
		}
	}
	_, err := eval(t, protocol.Eval{Language: starlark, Snippet: protocol.Snippet{Code: "time"}, Limits: roomy(limits.Limits{})})
	if se := wantKind(t, err, sandbox.KindScriptError); se != nil && !strings.Contains(se.Message, "undefined: time") {
		t.Errorf("starlark: %v", se)
	}
}

// TestLuaClockCountsFromTheInstance: os.clock is the seconds since the
// instance began (there is no CPU-time clock in WASI), never negative,
// and does not go back in a session. It was gopher-lua's, counting from a
// time read when the runtime was pre-initialised, on another instance's
// monotonic clock: about -0.02 in every instance.
func TestLuaClockCountsFromTheInstance(t *testing.T) {
	o, err := eval(t, protocol.Eval{Language: lua, Snippet: protocol.Snippet{Code: "return os.clock()"}, Limits: roomy(limits.Limits{})})
	if err != nil {
		t.Fatal(err)
	}
	if clock := number(t, o.Value); clock < 0 {
		t.Errorf("one-shot: os.clock() = %v", clock)
	}
	ctx := context.Background()
	s, _, err := sharedRunner(t).NewSession(ctx, protocol.SessionRequest{Language: lua})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	last := 0.0
	for i := range 3 {
		o, err := s.Eval(ctx, sessionEval("return os.clock()"))
		if err != nil {
			t.Fatal(err)
		}
		clock := number(t, o.Value)
		if clock < last {
			t.Errorf("session, evaluation %d: os.clock() = %v after %v", i, clock, last)
		}
		last = clock
	}
}

// TestRandomNumbersPerEvaluation: in a session each evaluation draws on
// (JavaScript's Math.random, Lua's math.random), and two one-shot
// evaluations of Lua's math.randomseed(n) draw the same: the one way to
// ask for a sequence.
func TestRandomNumbersPerEvaluation(t *testing.T) {
	ctx := context.Background()
	for lang, code := range map[protocol.Language]string{js: "Math.random()", lua: "return math.random()"} {
		s, _, err := sharedRunner(t).NewSession(ctx, protocol.SessionRequest{Language: lang})
		if err != nil {
			t.Fatal(err)
		}
		var drawn []string
		for range 2 {
			o, err := s.Eval(ctx, sessionEval(code))
			if err != nil {
				t.Fatalf("%s: %v", lang, err)
			}
			drawn = append(drawn, string(o.Value))
		}
		s.Close()
		if drawn[0] == drawn[1] {
			t.Errorf("%s: two evaluations in a session drew %s", lang, drawn[0])
		}
	}
	var seeded []string
	for range 2 {
		o, err := eval(t, protocol.Eval{Language: lua, Snippet: protocol.Snippet{Code: "math.randomseed(42) return {math.random(), math.random(1, 1000)}"}, Limits: roomy(limits.Limits{})})
		if err != nil {
			t.Fatal(err)
		}
		seeded = append(seeded, string(o.Value))
	}
	if seeded[0] != seeded[1] {
		t.Errorf("math.randomseed(42) drew %s, then %s", seeded[0], seeded[1])
	}
}

func number(t *testing.T, v json.RawMessage) float64 {
	t.Helper()
	var f float64
	if err := json.Unmarshal(v, &f); err != nil {
		t.Fatalf("value %s: %v", v, err)
	}
	return f
}
