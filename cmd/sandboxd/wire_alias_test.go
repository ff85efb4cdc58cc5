package main

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
	"github.com/sandboxd/sandboxd/rpc"
)

// A module sent again as the same wasm base64 or WAT text is found by the
// text as it came on the wire (before it is decoded); modules whose texts
// differ in one character each run their own code, and a bad base64 is
// still refused naming the field.
func TestSidecarModuleSentAgainRunsItsOwnCode(t *testing.T) {
	c, _ := startClient(t, binPath)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wat := func(k string) string {
		return `(module (func (export "f") (param i32) (result i32) local.get 0 i32.const ` + k + ` i32.add))`
	}
	type source struct {
		spec rpc.ModuleSpec
		want int
	}
	var sources []source
	for _, k := range []string{"1", "2", "3"} { // texts that differ in one byte
		w := wat(k)
		bin, err := wasmtime.Wat2Wasm(w)
		if err != nil {
			t.Fatal(err)
		}
		want := 10 + int(k[0]-'0')
		sources = append(sources,
			source{rpc.ModuleSpec{WAT: sandboxd.Str(w)}, want},
			source{rpc.ModuleSpec{Wasm: sandboxd.Str(base64.StdEncoding.EncodeToString(bin))}, want})
	}
	for round := range 3 {
		for i, s := range sources {
			res, err := c.Run(ctx, sandboxd.RunParams{Module: s.spec, Function: "f", Args: rawArgs(10)}, nil)
			if err != nil {
				t.Fatalf("round %d, source %d: %v", round, i, err)
			}
			if got := string(res.Values[0].Value); got != strconv.Itoa(s.want) {
				t.Fatalf("round %d, source %d: f(10) = %s, want %d (another module's code?)", round, i, got, s.want)
			}
		}
	}
	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Cache.Misses != 3 { // one compile per module; the text and the binary of each share it
		t.Errorf("cache misses %d, want 3 (one per module)", st.Cache.Misses)
	}
	_, err = c.Run(ctx, sandboxd.RunParams{Module: rpc.ModuleSpec{Wasm: sandboxd.Str("AGFzbQEAAAA=!")}, Function: "f"}, nil)
	if e := asRPCError(t, err); e.Code != -32602 || !strings.Contains(e.Message, "module.wasm") {
		t.Fatalf("bad base64: %v", err)
	}
}
