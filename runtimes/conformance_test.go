package runtimes_test

// The conformance corpus: snippets per language (testdata/corpus/*.txt),
// run natively through each Session package, against the golden results
// in testdata/golden/*.json. The golden files carry the code and input
// too, so that a test elsewhere (the sidecar's) can replay them through
// the guests without this parser. Regenerate: go test -run Conformance -update.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/runtimes/js"
	"github.com/sandboxd/sandboxd/runtimes/lua"
	"github.com/sandboxd/sandboxd/runtimes/script"
	"github.com/sandboxd/sandboxd/runtimes/starlark"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the native results")

// newSession makes a language's session writing to the given buffers.
var newSession = map[string]func(stdout, stderr *bytes.Buffer) script.Session{
	"js":       func(o, e *bytes.Buffer) script.Session { return js.New(o, e) },
	"lua":      func(o, _ *bytes.Buffer) script.Session { return lua.New(o) },
	"starlark": func(o, _ *bytes.Buffer) script.Session { return starlark.New(o) },
}

// Case is one session of the corpus: its steps run in order in one fresh
// session.
type Case struct {
	Name  string `json:"name"`
	Steps []Step `json:"steps"`
}

// Step is one evaluation and what it gave.
type Step struct {
	Code   string          `json:"code"`
	Input  json.RawMessage `json:"input,omitempty"`
	Value  json.RawMessage `json:"value,omitempty"`
	Error  *script.Error   `json:"error,omitempty"`
	Stdout string          `json:"stdout,omitempty"`
	Stderr string          `json:"stderr,omitempty"`
}

// readCorpus parses a corpus file: "%% case NAME [input JSON]" starts a
// case (a fresh session) and its first step, "%% eval [input JSON]"
// another step in the same session; the lines up to the next %% line are
// the step's code. Lines before the first case are comments.
func readCorpus(path string) ([]Case, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var cases []Case
	var code []string
	flush := func() {
		if len(cases) > 0 {
			steps := cases[len(cases)-1].Steps
			steps[len(steps)-1].Code = strings.Join(code, "\n")
		}
		code = code[:0]
	}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if !strings.HasPrefix(line, "%% ") {
			code = append(code, line)
			continue
		}
		flush()
		head, input, _ := strings.Cut(line[3:], " input ")
		step := Step{}
		if input != "" {
			if !json.Valid([]byte(input)) {
				return nil, fmt.Errorf("%s:%d: the input is not JSON", path, n)
			}
			step.Input = json.RawMessage(input)
		}
		switch kind, name, _ := strings.Cut(head, " "); {
		case kind == "case" && name != "":
			cases = append(cases, Case{Name: name, Steps: []Step{step}})
		case kind == "eval" && len(cases) > 0:
			c := &cases[len(cases)-1]
			c.Steps = append(c.Steps, step)
		default:
			return nil, fmt.Errorf("%s:%d: want %%%% case NAME or %%%% eval", path, n)
		}
	}
	flush()
	return cases, sc.Err()
}

// run evaluates every step natively.
func run(lang string, cases []Case) {
	for i := range cases {
		var stdout, stderr bytes.Buffer
		s := newSession[lang](&stdout, &stderr)
		for j := range cases[i].Steps {
			st := &cases[i].Steps[j]
			input, err := script.ParseInput(st.Input)
			if err != nil {
				panic(err) // readCorpus checked it
			}
			st.Value, st.Error = s.EvalInput(st.Code, input)
			st.Stdout, st.Stderr = stdout.String(), stderr.String()
			stdout.Reset()
			stderr.Reset()
		}
	}
}

func TestConformance(t *testing.T) {
	for lang := range newSession {
		t.Run(lang, func(t *testing.T) {
			cases, err := readCorpus(filepath.Join("testdata", "corpus", lang+".txt"))
			if err != nil {
				t.Fatal(err)
			}
			if len(cases) < 30 {
				t.Fatalf("%d cases in the %s corpus, want at least 30", len(cases), lang)
			}
			run(lang, cases)
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			if err := enc.Encode(cases); err != nil {
				t.Fatal(err)
			}
			got := b.Bytes()
			golden := filepath.Join("testdata", "golden", lang+".json")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test -run Conformance -update writes it)", err)
			}
			if !bytes.Equal(got, want) {
				diff(t, lang, cases, want)
			}
		})
	}
}

// diff names the steps whose results left the golden file.
func diff(t *testing.T, lang string, got []Case, golden []byte) {
	t.Helper()
	var want []Case
	if err := json.Unmarshal(golden, &want); err != nil {
		t.Fatalf("testdata/golden/%s.json: %v", lang, err)
	}
	index := map[string]Case{}
	for _, c := range want {
		index[c.Name] = c
	}
	for _, c := range got {
		w, ok := index[c.Name]
		if !ok || len(w.Steps) != len(c.Steps) {
			t.Errorf("%s: case %q is not in the golden file as it is in the corpus", lang, c.Name)
			continue
		}
		for i := range c.Steps {
			g, _ := json.Marshal(c.Steps[i])
			wj, _ := json.Marshal(w.Steps[i])
			if !bytes.Equal(g, wj) {
				t.Errorf("%s: case %q step %d:\n got %s\nwant %s", lang, c.Name, i+1, g, wj)
			}
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d cases in the corpus, %d in the golden file", lang, len(got), len(want))
	}
	if !t.Failed() {
		t.Errorf("%s: the golden file differs from the results in form only; rerun with -update", lang)
	}
}
