package protocol

import (
	"errors"
	"strings"
	"testing"
)

// TestWASICheckFileUnderAFile: a files grant that puts a file under
// another file is the parent's mistake, named as such, wherever the two
// sort ("/a", "/a-b", "/a/c": '-' sorts between them, so the file and its
// child are not neighbours). Before, only neighbours were compared and
// the grant reached the lay-out, which failed as the sidecar's own fault
// (kind host, quoting its temporary path).
func TestWASICheckFileUnderAFile(t *testing.T) {
	for _, files := range []map[string][]byte{
		{"/x": nil, "/x/y": nil},
		{"/a": nil, "/a-b": nil, "/a/c": nil},
		{"/a": nil, "/a!": nil, "/a.d": nil, "/a/b/c/d": nil},
		{"/d/a": nil, "/d/a+": nil, "/d/a/b": nil, "/e": nil},
	} {
		w := WASI{Files: files}
		var ge *GrantError
		if err := w.Check(); !errors.As(err, &ge) || !strings.Contains(ge.Problem, "cannot be under it") {
			t.Errorf("%v: Check() = %v, want a file-under-a-file GrantError", keys(files), err)
		}
	}
	// Siblings that merely share a prefix are fine.
	ok := WASI{Files: map[string][]byte{"/a": nil, "/a-b": nil, "/ab/c": nil, "/a-b-c/d": nil}}
	if err := ok.Check(); err != nil {
		t.Errorf("siblings sharing a prefix: %v", err)
	}
}

func keys(m map[string][]byte) []string { return sortedKeys(m) }
