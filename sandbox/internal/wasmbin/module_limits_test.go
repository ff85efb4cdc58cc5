package wasmbin

import (
	"strings"
	"testing"
)

// TestRewriteStaysWithinWasmtimeLimits: a valid module at wasmparser's
// limits must be refused by the rewriter, naming its own counts, not by
// wasmtime after the rewrite, with offsets into the rewritten bytes.
func TestRewriteStaysWithinWasmtimeLimits(t *testing.T) {
	globals := func(n int) []byte {
		g := []byte{valI32, 0, opI32Const, 0, opEnd}
		payload := appendULEB(nil, uint64(n))
		for range n {
			payload = append(payload, g...)
		}
		return append(append([]byte(nil), wasmHeader...), rawSection(secGlobal, payload)...)
	}
	if _, _, err := Instrument(globals(maxWasmGlobals - numGlobals)); err != nil {
		t.Fatalf("%d globals: %v", maxWasmGlobals-numGlobals, err)
	}
	_, _, err := Instrument(globals(maxWasmGlobals - numGlobals + 1))
	if err == nil || !strings.Contains(err.Error(), "the module has 999997 globals; sandboxd's rewrite adds 4") {
		t.Errorf("one global more: %v", err)
	}

	// A body of 2-byte memory.grow instructions grows when each becomes a
	// call of a helper whose index needs 3 bytes.
	body := []byte{0, opI32Const, 0}
	for len(body) < maxWasmFuncSize-8 {
		body = append(body, opMemoryGrow, 0)
	}
	body = append(body, 0x1a, opEnd) // drop, end
	// 20,000 functions before it push the helper's index past 2^14.
	const before = 20_000
	funcs := appendULEB(nil, before+1)
	for range before + 1 {
		funcs = append(funcs, 0)
	}
	codeAll := appendULEB(nil, before+1)
	for range before {
		codeAll = append(codeAll, 2, 0, opEnd)
	}
	codeAll = append(appendULEB(codeAll, uint64(len(body))), body...)
	wasm := append([]byte(nil), wasmHeader...)
	wasm = append(wasm, rawSection(secType, []byte{1, 0x60, 0, 0})...)
	wasm = append(wasm, rawSection(secFunction, funcs)...)
	wasm = append(wasm, rawSection(secMemory, []byte{1, 0, 1})...)
	wasm = append(wasm, rawSection(secCode, codeAll)...)
	_, _, err = Instrument(wasm)
	if err == nil || !strings.Contains(err.Error(), "after sandboxd's rewrite") {
		t.Errorf("a body that outgrows wasmtime's limit: %v", err)
	}
}
