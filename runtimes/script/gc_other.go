//go:build !wasip1

package script

// fitCollector does nothing outside a wasm guest: the native tests share
// one process.
func fitCollector(uint64) {}
