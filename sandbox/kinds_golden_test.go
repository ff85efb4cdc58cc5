package sandbox_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxd/sandboxd/protocol"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// TestErrorKindsGolden keeps testdata/wire/error-kinds.json, which the
// Python and Node client tests read, equal to the Go table of kinds: one
// table for the CLI, the protocol and the clients. Run with -update after
// changing sandbox.Kinds.
func TestErrorKindsGolden(t *testing.T) {
	type row struct {
		Kind     string `json:"kind"`
		ExitCode int    `json:"exitCode"`
		RPCCode  int    `json:"rpcCode"`
		Summary  string `json:"summary"`
	}
	var rows []row
	for _, k := range protocol.Kinds() {
		rows = append(rows, row{string(k.Kind), k.ExitCode, k.RPCCode, k.Summary})
	}
	want, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	path := filepath.Join("..", "testdata", "wire", "error-kinds.json")
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./sandbox -run TestErrorKindsGolden -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: run go test ./sandbox -run TestErrorKindsGolden -update", path)
	}
}
