package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrapCodesDocumented: docs/protocol.md's "Trap codes" paragraph
// names the codes a guest meets (wasmtime's first ten, the rest being
// listed here), TrapCodeHost and TrapCodeExit, which are sandboxd's own.
func TestTrapCodesDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "Trap codes:")
	if i < 0 {
		t.Fatal(`docs/protocol.md has no "Trap codes:" paragraph`)
	}
	para := doc[i:]
	if j := strings.Index(para, "\n\n"); j >= 0 {
		para = para[:j]
	}
	for _, code := range append(append([]string{}, trapCodes[:10]...), TrapCodeHost, TrapCodeExit) {
		if !strings.Contains(para, "`"+code+"`") {
			t.Errorf("the Trap codes paragraph does not name `%s`", code)
		}
	}
}
