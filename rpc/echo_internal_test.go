package rpc

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/limits"
)

// TestEvalParamsAreEchoedBriefly: eval's params (which a server over the
// fake engine, serving no snippets, never reads) quote what the parent
// sent cut, as every method's do (TestOversizedInputIsEchoedBriefly):
// each error under 16 KiB.
func TestEvalParamsAreEchoedBriefly(t *testing.T) {
	text, _ := json.Marshal(strings.Repeat("é\x1b\u202e<x", 1<<16))
	big := string(text)
	def, max := limits.Defaults(), limits.DefaultMaximums()
	check := func(params string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%.80s…: accepted", params)
			return
		}
		if n := len(ErrorObject(err).Message); n >= 16<<10 {
			t.Errorf("%.80s…: an error of %d bytes: %.200s…", params, n, err)
		}
	}
	for _, params := range []string{
		`{"language":` + big + `,"code":"1"}`,
		`{"language":"js","code":"1",` + big + `:1}`,
		`{"instance":` + big + `,"code":"1"}`,
		`{"language":"js","code":"1","hostCall":` + big + `}`,
	} {
		_, err := decodeEval(json.RawMessage(params))
		check(params, err)
	}
	for _, limits := range []string{`{` + big + `:1}`, `{"fuel":"` + strings.Repeat("9", 1<<19) + `"}`} {
		params := `{"instance":"inst-1","code":"x","limits":` + limits + `}`
		spec, err := decodeEval(json.RawMessage(params))
		if err == nil {
			_, err = spec.sessionEvalLimits(def, max)
		}
		check(params, err)
		params = `{"language":"js","code":"x","limits":` + limits + `}`
		if spec, err = decodeEval(json.RawMessage(params)); err == nil {
			_, err = spec.evalLimits(def, max)
		}
		check(params, err)
	}
	for _, params := range []string{
		`{"language":` + big + `}`,
		`{"language":"js","hostCall":` + big + `}`,
	} {
		_, err := decodeSessionInstantiate(json.RawMessage(params))
		check(params, err)
	}
}
