package sandbox

import (
	crand "crypto/rand"
	"fmt"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// randomGet is preview1's random_get, ours for every run: wasmtime's
// allocates a host buffer of the length the guest names before checking
// it against the guest's memory. A seeded run gets the bytes of its
// splitmix64 stream (the one host::random draws from), little-endian;
// others the operating system's. Paid before: randomFuelPerKiB per KiB
// begun.
func (s *store) randomGet(c *wasmtime.Caller, args []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	buf, n := u32(args, 0), u32(args, 1)
	mem := s.wasi.memory(c)
	if !inBounds(mem, buf, n) {
		return nil, s.wasiTrap(fmt.Sprintf("random_get: bytes [%d, %d) lie outside the guest's memory of %d bytes", buf, buf+n, len(mem)))
	}
	if fuel := (n + 1023) / 1024 * randomFuelPerKiB; fuel > 0 && !consumeFuel(c, fuel) {
		return nil, fuelTrap()
	}
	fill := func(dst []byte) error { _, err := crand.Read(dst); return err }
	if s.wasi.seeded {
		fill = func(dst []byte) error { s.random.fill(dst); return nil }
	}
	// In slices, the fence checked between them (wasi_transfer.go): 1 GiB
	// took 12 s in one call.
	stop, err := fillSliced(mem[buf:buf+n], fill, s.fenceStop)
	if err != nil {
		return nil, wasmtime.NewTrap("sandboxd: random_get: " + err.Error())
	}
	if stop != stopNone {
		return nil, s.stopGuest(stop)
	}
	return errno(errnoSuccess)
}
