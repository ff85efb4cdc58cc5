package sandbox

// copyFuelPerKiB is the fuel a host function charges per whole KiB it
// copies for the guest: memory.copy's rate in wasm (30 per 1 KiB chunk,
// TestBulkFuelIsProportional; docs/protocol.md states 25-30), so moving
// bytes through the host costs what moving them in wasm does and the fuel
// fence bounds host work as it bounds the guest's.
const copyFuelPerKiB = 30

// copyFuel is the fuel for copying n bytes. The last partial KiB is free,
// so a copy under 1 KiB costs nothing and needs no charge at all (a cgo
// call): every host call already costs the guest the fuel of the call and
// of the kernel calls around it, which bounds the uncharged bytes.
func copyFuel(n uint64) uint64 { return n / 1024 * copyFuelPerKiB }
