package rpc

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocListsEveryFile: doc.go is where a newcomer finds each concern's
// file, so every source file of the package is in its list, and nothing
// listed is gone.
func TestDocListsEveryFile(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^//\t(\w+\.go) `).FindAllStringSubmatch(string(doc), -1) {
		listed[m[1]] = true
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		if !listed[f] {
			t.Errorf("doc.go does not list %s", f)
		}
		delete(listed, f)
	}
	for f := range listed {
		t.Errorf("doc.go lists %s, which is not in the package", f)
	}
}
