package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// headerFigures compiles a C program against the pinned headers that
// prints each of exprs (sizeof, offsetof, an enum constant), runs it and
// returns their values, for the guards of what capi.h declares by hand.
// Without a C compiler the test is skipped.
func headerFigures(t *testing.T, exprs ...string) []uintptr {
	t.Helper()
	inc := wasmtimeIncludeDir(t)
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler:", err)
	}
	var prog strings.Builder
	prog.WriteString("#include <stdio.h>\n#include <stddef.h>\n#include <wasmtime.h>\nint main(void) {\n")
	for _, e := range exprs {
		fmt.Fprintf(&prog, "\tprintf(\"%%zu\\n\", (size_t)(%s));\n", e)
	}
	prog.WriteString("\treturn 0;\n}\n")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "layout.c"), []byte(prog.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "layout")
	if out, err := exec.Command(cc, "-I", inc, "-o", exe, filepath.Join(dir, "layout.c")).CombinedOutput(); err != nil {
		t.Fatalf("compiling against the headers: %v\n%s", err, out)
	}
	out, err := exec.Command(exe).Output()
	if err != nil {
		t.Fatal(err)
	}
	var got []uintptr
	for _, f := range strings.Fields(string(out)) {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			t.Fatalf("layout program printed %q", out)
		}
		got = append(got, uintptr(n))
	}
	if len(got) != len(exprs) {
		t.Fatalf("layout program printed %q for %d expressions", out, len(exprs))
	}
	return got
}
