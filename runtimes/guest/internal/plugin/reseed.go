//go:build wasip1

package plugin

import (
	"crypto/rand"
	"encoding/binary"
	mathrand "math/rand"
	"os"
)

// The host pre-initialises the runtimes (sandbox.Engine.Preinitialize):
// _initialize runs once, ahead of time, and every instance starts from
// the memory it left. The Go runtime's random state is in that memory, so
// math/rand's top-level functions, which goja's Math.random and
// gopher-lua's math.random call, would give every instance the same
// sequence. The first evaluation of an instance therefore reseeds them
// from WASI random_get (crypto/rand asks the host on every read, so it is
// the instance's own entropy). rand.Seed is a no-op since Go 1.24 unless
// GODEBUG has randseednop=0; the runtime takes a GODEBUG set through
// os.Setenv at once. A snippet cannot read the environment, so the
// setting is invisible to it; what it changes is that Lua's
// math.randomseed(n) works again, as the Lua manual says it does.
var reseeded bool

// reseed gives math/rand's top-level functions a seed of the instance's
// own, once per instance.
func reseed() {
	if reseeded {
		return
	}
	reseeded = true
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return // no entropy: the sequence stays the snapshot's
	}
	if err := os.Setenv("GODEBUG", "randseednop=0"); err != nil {
		return
	}
	//lint:ignore SA1019 reseeding the global source is the point
	mathrand.Seed(int64(binary.LittleEndian.Uint64(b[:])))
}
