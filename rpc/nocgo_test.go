package rpc

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestProtocolLayerWithoutCgo: the sidecar's protocol layer and the Go
// client link neither wasmtime nor the sandbox package, so they build with
// CGO_ENABLED=0 (make test-go also runs their tests that way). Only
// package sandbox sees wasmtime; cmd/sandboxd joins the two.
func TestProtocolLayerWithoutCgo(t *testing.T) {
	pkgs := []string{
		"github.com/sandboxd/sandboxd/rpc",
		"github.com/sandboxd/sandboxd/protocol",
		"github.com/sandboxd/sandboxd/internal/framing",
		"github.com/sandboxd/sandboxd/internal/mcpserver",
		"github.com/sandboxd/sandboxd/clients/go/sandboxd",
	}
	for _, pkg := range pkgs {
		cmd := exec.Command("go", "list", "-deps", "-test", pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps -test %s with CGO_ENABLED=0: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "github.com/bytecodealliance/wasmtime-go") ||
				dep == "github.com/sandboxd/sandboxd/sandbox" || dep == "runtime/cgo" {
				t.Errorf("%s depends on %s: the protocol layer must build without cgo", pkg, dep)
			}
		}
	}
}
