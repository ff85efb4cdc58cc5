package sandbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/sandbox"
)

// TestWASIFuelRates pins the documented prices of WASI host work: the fuel
// one more call costs, less the handful of instructions around it.
func TestWASIFuelRates(t *testing.T) {
	for _, c := range []struct {
		name, imp, call string
		want            uint64 // the host work's price
	}{
		{"fd_write, one 64 KiB iovec", `(import "wasi_snapshot_preview1" "fd_write" (func $f (param i32 i32 i32 i32) (result i32)))`,
			`(i32.store (i32.const 0) (i32.const 4096)) (i32.store (i32.const 4) (i32.const 65536))
			 (drop (call $f (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))`, 4 + 64*30 + 2000},
		{"fd_write, 1,024 empty iovecs", `(import "wasi_snapshot_preview1" "fd_write" (func $f (param i32 i32 i32 i32) (result i32)))`,
			`(drop (call $f (i32.const 1) (i32.const 65536) (i32.const 1024) (i32.const 8)))`, 1024*4 + 2000},
		{"fd_write to a file, 100 KiB (two slices)", `(import "wasi_snapshot_preview1" "fd_write" (func $f (param i32 i32 i32 i32) (result i32)))`,
			`(i32.store (i32.const 0) (i32.const 4096)) (i32.store (i32.const 4) (i32.const 102400))
			 (drop (call $f (i32.const 3) (i32.const 0) (i32.const 1) (i32.const 8)))`, 4 + 100*30 + 2*50_000},
		{"path_filestat_get of a 4-byte path", `(import "wasi_snapshot_preview1" "path_filestat_get" (func $f (param i32 i32 i32 i32 i32) (result i32)))`,
			`(drop (call $f (i32.const 3) (i32.const 0) (i32.const 0) (i32.const 4) (i32.const 64)))`, 4*4 + 50_000},
		{"fd_close of no descriptor", `(import "wasi_snapshot_preview1" "fd_close" (func $f (param i32) (result i32)))`,
			`(drop (call $f (i32.const 99)))`, 2000},
		{"random_get, 1 MiB", `(import "wasi_snapshot_preview1" "random_get" (func $f (param i32 i32) (result i32)))`,
			`(drop (call $f (i32.const 0) (i32.const 1048576)))`, 1024 * 64},
		{"random_get, 8 bytes", `(import "wasi_snapshot_preview1" "random_get" (func $f (param i32 i32) (result i32)))`,
			`(drop (call $f (i32.const 0) (i32.const 8)))`, 64},
	} {
		t.Run(c.name, func(t *testing.T) {
			fuel := func(calls int) uint64 {
				wat := fmt.Sprintf(`(module %s (memory (export "memory") 32)
				  (func (export "_start") %s))`, c.imp, strings.Repeat(c.call, calls))
				req := wasiRequest(compileWAT(t, wat), &sandbox.WASI{})
				req.Limits.OutputBytes = 1
				res, err := engine(t).Run(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				return res.Usage.FuelConsumed
			}
			one, two := fuel(1), fuel(2)
			if got := two - one; got < c.want || got > c.want+32 {
				t.Errorf("one more call costs %d fuel, want %d plus at most 32 for its instructions", got, c.want)
			}
		})
	}
}
