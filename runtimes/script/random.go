package script

import (
	"crypto/rand"
	"encoding/binary"
	mathrand "math/rand/v2"
)

// Random is a session's own source of the numbers its language's random
// functions give (JavaScript's Math.random, Lua's math.random), instead of
// math/rand's top-level functions, which every session of a guest shares.
// The host pre-initialises the runtime guests (sandbox.Engine.Preinitialize):
// every instance starts from the memory its _initialize left, with the
// same state of every generator in it, so each instance reseeds its
// session from the host's entropy (Reseed, through InstanceStarter)
// before its first evaluation.
// A PCG: seeding it costs two words, where reseeding math/rand's global
// source took a GODEBUG change and 600 k instructions of each instance's
// first evaluation.
type Random struct {
	pcg mathrand.PCG
	rng *mathrand.Rand
}

// NewRandom is a source seeded from crypto/rand (in a guest, the host's
// random_get).
func NewRandom() *Random {
	r := &Random{}
	r.rng = mathrand.New(&r.pcg)
	r.Reseed()
	return r
}

// Reseed seeds r from crypto/rand; without entropy it keeps its state.
func (r *Random) Reseed() {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return
	}
	r.pcg.Seed(binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:]))
}

// Seed makes the sequence that of seed, as a language's own seeding
// function (Lua's math.randomseed) asks.
func (r *Random) Seed(seed int64) { r.pcg.Seed(uint64(seed), 0) }

// Float64 is in [0, 1).
func (r *Random) Float64() float64 { return r.rng.Float64() }

// Int64N is in [0, n); n > 0.
func (r *Random) Int64N(n int64) int64 { return r.rng.Int64N(n) }

// InstanceStarter is a Session holding what a pre-initialised guest must
// read from the host anew in each instance (a Random's seed, the zero of
// Lua's os.clock): every instance starts from the memory _initialize
// left, so a guest calls StartInstance once per instance, before its
// first evaluation.
type InstanceStarter interface {
	StartInstance()
}
