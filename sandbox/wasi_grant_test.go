package sandbox_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/sandbox"
)

// TestWASIGrantIsWithinTheMemoryCap: what a WASI grant keeps on the host
// for the store's life (stdin, arguments, environment, files, as
// protocol.WASI.HostBytes counts them) may be at most the memory cap;
// more is refused before a store exists, for runs and instances alike.
// Before, nothing bounded it: 3 instances of 2 M empty arguments (17 MiB
// sent) held +727 MiB.
func TestWASIGrantIsWithinTheMemoryCap(t *testing.T) {
	m := compileWAT(t, strings.ReplaceAll(wasiHello, "CODE", "0"))
	const cap = 1 << 20
	for _, w := range []*sandbox.WASI{
		{Stdin: make([]byte, cap)},
		{Args: make([]string, 6000)}, // 6,000 entries of wasmtime's strings
		{Files: map[string][]byte{"/f": make([]byte, cap-4096)}},
	} {
		req := wasiRequest(m, w)
		req.Limits.MemoryBytes = cap
		_, err := engine(t).Run(context.Background(), req)
		se := wantKind(t, err, sandbox.KindMemoryLimitExceeded)
		if !strings.Contains(se.Message, "the WASI grant keeps") || se.Requested != w.HostBytes() || se.Limit != cap || se.Usage != nil {
			t.Errorf("grant of %d host bytes under a %d-byte cap: %+v", w.HostBytes(), cap, se)
		}
		_, err = engine(t).Instantiate(context.Background(), sandbox.InstanceRequest{Module: m, Limits: req.Limits, Capabilities: req.Capabilities})
		wantKind(t, err, sandbox.KindMemoryLimitExceeded)
	}
	// Within the cap it runs, and the guest's own memory is as before.
	req := wasiRequest(m, &sandbox.WASI{Stdin: make([]byte, cap/2)})
	req.Limits.MemoryBytes = cap
	res, err := engine(t).Run(context.Background(), req)
	if err != nil || res.PeakMemoryBytes != 65536 {
		t.Errorf("a grant within the cap: %v, %+v", err, res)
	}
}
