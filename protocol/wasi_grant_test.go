package protocol

import (
	"errors"
	"fmt"
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

// TestWASIGrantCountsAreBounded: what a store keeps for its life costs
// per entry, so the grant's counts are bounded (an instance of 2 M empty
// arguments held 240 MiB), each -32602 naming the field.
func TestWASIGrantCountsAreBounded(t *testing.T) {
	env := map[string]string{}
	for i := range MaxWASIEnv + 1 {
		env[string(rune('a'+i%26))+strings.Repeat("x", i/26)] = ""
	}
	for _, c := range []struct {
		w     WASI
		field string
	}{
		{WASI{Args: make([]string, MaxWASIArgs+1)}, WASIField + ".args"},
		{WASI{Env: env}, WASIField + ".env"},
		{WASI{Dirs: make([]Dir, MaxWASIDirs+1)}, WASIField + ".dirs"},
		{WASI{Dirs: []Dir{{Host: "/h", Guest: "/" + strings.Repeat("g", MaxWASIPathBytes)}}}, WASIField + ".dirs[0].guest"},
		{WASI{Dirs: []Dir{{Host: "/" + strings.Repeat("h", MaxWASIPathBytes), Guest: "/g"}}}, WASIField + ".dirs[0].host"},
	} {
		var ge *GrantError
		if err := c.w.Check(); !errors.As(err, &ge) || ge.Field != c.field || !strings.Contains(ge.Problem, "at most") {
			t.Errorf("Check() = %v, want a GrantError for %s", err, c.field)
		}
	}
	if err := (&WASI{Args: make([]string, MaxWASIArgs)}).Check(); err != nil {
		t.Errorf("%d arguments: %v", MaxWASIArgs, err)
	}
}

// TestWASIHostBytes: what a grant keeps on the host, as the memory cap
// counts it.
func TestWASIHostBytes(t *testing.T) {
	var none *WASI
	if n := none.HostBytes(); n != 0 {
		t.Errorf("no grant: %d", n)
	}
	w := WASI{
		Argv0: "prog",                                                                // 4 + 1 + entry
		Args:  []string{"", "ab"},                                                    // (0+1) + (2+1) + 2 entries
		Env:   map[string]string{"K": "vv"},                                          // 1 + 2 + 2 + entry
		Stdin: make([]byte, 10),                                                      // 10
		Files: map[string][]byte{"/a/b/c": nil, "/f": make([]byte, WASIPageBytes+1)}, // (1 page + 2 dirs) + 2 pages, + the tree's page
		Dirs:  []Dir{{Host: "/h", Guest: "/g"}},                                      // a page
	}
	want := uint64(5+WASIEntryBytes) + 1 + 3 + 2*WASIEntryBytes + 5 + WASIEntryBytes + 10 + (3+2+1+1)*WASIPageBytes + 2
	if n := w.HostBytes(); n != want {
		t.Errorf("HostBytes = %d, want %d", n, want)
	}
}

// TestWASIGrantErrorsQuoteBriefly: a grant's error quotes the parent's
// names and paths cut (Quote), whatever their length and content: half a
// megabyte of a path, a name or a guest path of control characters gives
// an error under 1 KiB.
func TestWASIGrantErrorsQuoteBriefly(t *testing.T) {
	long := "/" + strings.Repeat("x", 1<<19)
	controls := "/" + strings.Repeat("\x01", MaxWASIPathBytes-1)
	for i, w := range []WASI{
		{Env: map[string]string{"=" + long: "v"}},
		{Files: map[string][]byte{long[1:]: nil}},
		{Files: map[string][]byte{long: nil}},
		{Files: map[string][]byte{"/x": nil, "/x" + long: nil}},
		{Dirs: []Dir{{Host: "/tmp", Guest: controls}, {Host: "/tmp", Guest: controls}}},
		{Dirs: []Dir{{Host: "/tmp", Guest: controls}}, Files: map[string][]byte{controls + "/f": nil}},
	} {
		err := w.Check()
		if err == nil || len(err.Error()) > 1024 {
			t.Errorf("grant %d: an error of %d bytes: %.200s", i, len(fmt.Sprint(err)), err)
		}
	}
}
