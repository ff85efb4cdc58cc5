package sandbox_test

import (
	"slices"
	"testing"

	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox"
)

// The preview1 functions initialize lists are the ones the engine links.
func TestWASIFunctionsAgree(t *testing.T) {
	if got, want := protocol.WASIFunctions(), sandbox.WASIFunctions(); !slices.Equal(got, want) {
		t.Errorf("protocol lists %v\nthe engine links %v", got, want)
	}
}
