package snippet_test

import (
	"context"
	"testing"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// TestPreinitializedRuntimesDrawTheirOwnRandomNumbers: the runtimes are
// pre-initialised, so every instance starts from one memory image, the Go
// runtime's random state included; the guests reseed their sessions'
// random sources per instance (runtimes/script/random.go), so two sessions, and two
// one-shot evaluations, draw different numbers.
func TestPreinitializedRuntimesDrawTheirOwnRandomNumbers(t *testing.T) {
	r := sharedRunner(t)
	ctx := context.Background()
	for lang, code := range map[protocol.Language]string{
		protocol.LanguageJS:  "[Math.random(), Math.random()]",
		protocol.LanguageLua: "return {math.random(), math.random()}",
	} {
		draw := func(session bool) string {
			t.Helper()
			if session {
				s, _, err := r.NewSession(ctx, protocol.SessionRequest{Language: lang})
				if err != nil {
					t.Fatalf("%s: %v", lang, err)
				}
				defer s.Close()
				o, err := s.Eval(ctx, sessionEval(code))
				if err != nil {
					t.Fatalf("%s: %v", lang, err)
				}
				return string(o.Value)
			}
			o, err := eval(t, protocol.Eval{Language: lang, Snippet: protocol.Snippet{Code: code}, Limits: roomy(limits.Limits{})})
			if err != nil {
				t.Fatalf("%s: %v", lang, err)
			}
			return string(o.Value)
		}
		for _, session := range []bool{true, false} {
			if a, b := draw(session), draw(session); a == b {
				t.Errorf("%s (session %v): two instances drew the same numbers %s", lang, session, a)
			}
		}
	}
}
