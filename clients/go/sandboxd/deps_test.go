package sandboxd

import (
	"os/exec"
	"strings"
	"testing"
)

// TestClientNeedsNoServer: a program using the client (the package, its
// example command, its Examples) does not import the sidecar's server
// package rpc; the client's own types (aliases of package protocol's)
// cover what it needs. Only the package's internal tests import rpc, to
// run the real server in process for the client to talk to.
func TestClientNeedsNoServer(t *testing.T) {
	const server = "github.com/sandboxd/sandboxd/rpc"
	for _, pkg := range []string{
		"github.com/sandboxd/sandboxd/clients/go/sandboxd",
		"github.com/sandboxd/sandboxd/clients/go/examples/session",
	} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == server {
				t.Errorf("%s depends on %s, the server", pkg, server)
			}
		}
	}
	out, err := exec.Command("go", "list", "-f", "{{join .XTestImports \"\\n\"}}", "github.com/sandboxd/sandboxd/clients/go/sandboxd").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, imp := range strings.Fields(string(out)) {
		if imp == server {
			t.Errorf("the Examples (package sandboxd_test) import %s, the server", server)
		}
	}
}
