// Package sandbox runs untrusted WebAssembly under three independent fences
// and a deny-by-default host ABI. It is the only package that sees wasmtime.
//
// An Engine holds one wasmtime engine, a content-addressed compile cache
// and one epoch ticker; it is safe for concurrent use. Compile turns WAT or
// wasm into a *Module (validated, instrumented and compiled in a child
// process under a deadline and a memory limit, then cached: see
// IsCompileChild, which every program using an Engine must dispatch in
// main); Run calls
// one export of a module in a fresh store and returns a *Result or an
// *Error whose Kind says why the run stopped.
//
// # The fences
//
// Fuel: wasmtime counts instructions; the store starts with Limits.Fuel and
// the guest traps when it runs out (kind fuel_exhausted). Fuel is loaded
// before instantiation, so the start function pays too.
//
// Deadline: one global ticker increments the engine's epoch every tick
// (Config.Tick, 1 ms) while any run is in flight. Each store's epoch
// deadline is always one tick ahead and a small C callback (capi.go) runs
// on the guest's thread at every tick: it stops the guest when the run's
// monotonic deadline has passed (kind timeout) or its context was
// cancelled (kind cancelled), and otherwise lets it go on for another
// tick. Overshoot is about one tick plus scheduling delay.
//
// Memory: before compilation every memory.grow and table.grow in the module
// is rewritten into a call of an injected helper (package
// internal/wasmbin) that refuses growth past the run's cap and records the
// refusal in an exported global. A run whose growth was refused reports
// memory_limit_exceeded however the guest reacted to the -1; a trap with
// no refusal behind it is reported as the trap it is. Initial memories
// and tables are checked against the caps before any store exists, and
// wasmtime's own store limiter stays on as a backstop.
//
// # The host ABI
//
// Nothing is importable unless the run grants it (Capabilities):
// host::log(ptr, len) copies a bounds-checked line from the guest's
// exported "memory" to Request.Log; host::random() is splitmix64 seeded
// per run; host::now_ns() is monotonic time since the run began. Imports
// are checked before a store exists, names and signatures both.
//
// # Values
//
// Value carries a wasm value as its type and raw bits, so i64 beyond 2^53,
// -0.0, infinities and NaN payloads cross every boundary unchanged.
package sandbox
