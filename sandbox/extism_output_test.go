package sandbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/sandbox"
)

// outputSetPlugin's functions set outputs a PDK never sets: an offset
// that is no block, a length past the block, a range past the memory; and
// the good ones, a whole block and a prefix of one.
const outputSetPlugin = `(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store (param i64 i32)))
  (import "extism:host/env" "output_set" (func $out (param i64 i64)))
  (func $block (result i64) (local $h i64)
    (local.set $h (call $alloc (i64.const 4)))
    (call $store (local.get $h) (i32.const 0x61))
    (call $store (i64.add (local.get $h) (i64.const 1)) (i32.const 0x62))
    (call $store (i64.add (local.get $h) (i64.const 2)) (i32.const 0x63))
    (call $store (i64.add (local.get $h) (i64.const 3)) (i32.const 0x64))
    (local.get $h))
  (func (export "nowhere") (result i32) (drop (call $block)) (call $out (i64.const 12345) (i64.const 10)) (i32.const 0))
  (func (export "long") (result i32) (call $out (call $block) (i64.const 4000)) (i32.const 0))
  (func (export "past") (result i32) (drop (call $block)) (call $out (i64.const 65000) (i64.const 100000)) (i32.const 0))
  (func (export "whole") (result i32) (call $out (call $block) (i64.const 4)) (i32.const 0))
  (func (export "prefix") (result i32) (call $out (call $block) (i64.const 2)) (i32.const 0))
  (func (export "none") (result i32) (call $out (i64.const 12345) (i64.const 0)) (i32.const 0)))`

// TestOutputSetOutsideABlockTraps: an output that is not inside a live
// kernel block is a trap (code host) naming output_set, like a host
// function's bad handle, and closes the instance; it was 10 zero bytes,
// 4,000 bytes of the kernel's memory, or nothing, as it happened.
func TestOutputSetOutsideABlockTraps(t *testing.T) {
	e := engine(t)
	m, _, err := e.Compile(context.Background(), sandbox.Source{WAT: outputSetPlugin})
	if err != nil {
		t.Fatal(err)
	}
	instance := func() *sandbox.Instance {
		in, err := e.Instantiate(context.Background(), sandbox.InstanceRequest{Module: m, Limits: limits.Defaults()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(in.Release)
		return in
	}
	for fn, want := range map[string]string{
		"nowhere": "extism:host/env::output_set: offset 12345 is not a live kernel block",
		"long":    "extism:host/env::output_set: length 4000 is past the end of the block at ",
		"past":    "extism:host/env::output_set: offset 65000 is not a live kernel block",
	} {
		in := instance()
		_, err := in.Call(context.Background(), sandbox.CallRequest{Function: fn, Input: []byte{}})
		var se *sandbox.Error
		if !errors.As(err, &se) || se.Kind != sandbox.KindTrap || se.TrapCode != sandbox.TrapCodeHost || !strings.HasPrefix(se.Message, want) {
			t.Errorf("%s: %v (%+v), want a trap host %q", fn, err, se, want)
			continue
		}
		if _, err := in.Call(context.Background(), sandbox.CallRequest{Function: "whole", Input: []byte{}}); !errors.Is(err, sandbox.ErrInstanceClosed) {
			t.Errorf("%s: the instance is not closed after the trap: %v", fn, err)
		}
	}
	in := instance()
	for fn, want := range map[string]string{"whole": "abcd", "prefix": "ab", "none": ""} {
		res, err := in.Call(context.Background(), sandbox.CallRequest{Function: fn, Input: []byte{}})
		if err != nil {
			t.Errorf("%s: %v", fn, err)
		} else if string(res.PluginOutput) != want {
			t.Errorf("%s: output %q, want %q", fn, res.PluginOutput, want)
		}
	}
}
