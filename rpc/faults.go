//go:build sandboxd_faults

package rpc

// Fault injection for tests, compiled only with -tags sandboxd_faults: the
// method "sandboxd/panic" panics inside request handling, so tests can
// prove a panic is answered with -32603 and the sidecar keeps serving.
func init() {
	testMethods["sandboxd/panic"] = func() { panic("injected fault: sandboxd/panic") }
}
