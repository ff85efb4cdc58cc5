package sandbox_test

// The host functions defined once per engine (extism_link.go) serve every
// store at once and each finds its own: a run's config, vars, log, input,
// parent and random stream are its own whatever runs beside it.

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/sandboxd/sandboxd/sandbox"
)

// crossPlugin reads config "who", keeps it in var "who", then 20 times
// logs the var and passes its input to the parent's extism:host/user::tag,
// and outputs tag's last answer.
const crossPlugin = `(module
  (import "extism:host/env" "input_offset" (func $input_offset (result i64)))
  (import "extism:host/env" "length" (func $length (param i64) (result i64)))
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "load_u8" (func $load_u8 (param i64) (result i32)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (import "extism:host/env" "config_get" (func $config_get (param i64) (result i64)))
  (import "extism:host/env" "var_get" (func $var_get (param i64) (result i64)))
  (import "extism:host/env" "var_set" (func $var_set (param i64 i64)))
  (import "extism:host/env" "log_info" (func $log_info (param i64)))
  (import "extism:host/user" "tag" (func $tag (param i64) (result i64)))
  (memory (export "memory") 1)
  (func $copy (param $h i64) (result i64) (local $n i64) (local $c i64) (local $i i64)
    (local.set $n (call $length (local.get $h)))
    (local.set $c (call $alloc (local.get $n)))
    (block $done (loop $l
      (br_if $done (i64.ge_u (local.get $i) (local.get $n)))
      (call $store_u8 (i64.add (local.get $c) (local.get $i)) (call $load_u8 (i64.add (local.get $h) (local.get $i))))
      (local.set $i (i64.add (local.get $i) (i64.const 1)))
      (br $l)))
    (local.get $c))
  (func $key (result i64) (local $k i64)
    (local.set $k (call $alloc (i64.const 3)))
    (call $store_u8 (local.get $k) (i32.const 119))
    (call $store_u8 (i64.add (local.get $k) (i64.const 1)) (i32.const 104))
    (call $store_u8 (i64.add (local.get $k) (i64.const 2)) (i32.const 111))
    (local.get $k))
  (func (export "run") (result i32) (local $i i32) (local $out i64)
    (call $var_set (call $key) (call $config_get (call $key)))
    (loop $again
      (call $log_info (call $var_get (call $key)))
      (local.set $out (call $tag (call $copy (call $input_offset))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $again (i32.lt_u (local.get $i) (i32.const 20))))
    (call $output_set (local.get $out) (call $length (local.get $out)))
    (i32.const 0)))`

var tagDecl = sandbox.HostFunction{Module: "extism:host/user", Name: "tag", Params: []string{"bytes"}, Results: []string{"bytes"}}

// TestLinkedHostFunctionsKeepStoresApart: plugin runs side by side, one-shot
// and on warm instances, each with its own config, input and parent
// handler, each see only their own: every log line is their config (through
// their var), their output their handler's answer to their input. Runs of
// host::random with different seeds each get their own stream.
func TestLinkedHostFunctionsKeepStoresApart(t *testing.T) {
	e := engine(t)
	ctx := context.Background()
	m := compileWAT(t, crossPlugin)
	const workers, rounds = 4, 25
	check := func(t *testing.T, w, r int, res *sandbox.CallResult, lines []string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("worker %d round %d: %v", w, r, err)
			return
		}
		want := fmt.Sprintf("tag%d(in%d-%d)", w, w, r)
		if string(res.PluginOutput) != want {
			t.Errorf("worker %d round %d: output %q, want %q", w, r, res.PluginOutput, want)
		}
		if len(lines) != 20 {
			t.Errorf("worker %d round %d: %d log lines, want 20", w, r, len(lines))
		}
		for _, l := range lines {
			if l != fmt.Sprintf("who%d", w) {
				t.Errorf("worker %d round %d: logged %q, another store's config", w, r, l)
				break
			}
		}
	}
	call := func(w, r int) (sandbox.CallRequest, *[]string) {
		var lines []string
		return sandbox.CallRequest{Function: "run", Input: []byte(fmt.Sprintf("in%d-%d", w, r)),
			Log: func(_ sandbox.LogLevel, line string) { lines = append(lines, line) },
			Host: func(_ context.Context, c sandbox.HostCall) ([]sandbox.HostValue, error) {
				b := []byte(fmt.Sprintf("tag%d(%s)", w, c.Args[0].Bytes))
				return []sandbox.HostValue{{Value: sandbox.Value{Type: sandbox.TypeBytes}, Bytes: b}}, nil
			}}, &lines
	}
	instance := func(w int) sandbox.InstanceRequest {
		return sandbox.InstanceRequest{Module: m, Limits: hangLimits(), Capabilities: sandbox.Capabilities{Log: true},
			Config: map[string]string{"who": fmt.Sprintf("who%d", w)}, HostFunctions: []sandbox.HostFunction{tagDecl}}
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(2)
		go func() { // one-shot runs
			defer wg.Done()
			for r := range rounds {
				req, lines := call(w, r)
				res, err := e.CallOnce(ctx, instance(w), req)
				check(t, w, r, res, *lines, err)
			}
		}()
		go func() { // calls of one warm instance
			defer wg.Done()
			in, err := e.Instantiate(ctx, instance(w))
			if err != nil {
				t.Error(err)
				return
			}
			defer in.Release()
			for r := range rounds {
				req, lines := call(w, r)
				res, err := in.Call(ctx, req)
				check(t, w, r, res, *lines, err)
			}
		}()
	}
	wg.Wait()

	random := compileWAT(t, `(module (import "host" "random" (func $r (result i64)))
	  (func (export "run") (result i64) (call $r) (drop) (call $r)))`)
	run := func(seed uint64) (uint64, error) {
		res, err := e.Run(ctx, sandbox.Request{Module: random, Function: "run", Limits: hangLimits(),
			Capabilities: sandbox.Capabilities{Random: true, Seed: seed}})
		if err != nil {
			return 0, err
		}
		return uint64(res.Values[0].I64()), nil
	}
	want := map[uint64]uint64{}
	for seed := range uint64(workers) {
		v, err := run(seed)
		if err != nil {
			t.Fatal(err)
		}
		want[seed] = v
	}
	var failures sync.Map
	for seed := range uint64(workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds * 4 {
				if v, err := run(seed); err != nil || v != want[seed] {
					failures.Store(seed, fmt.Sprintf("seed %d: %d, %v; want %d", seed, v, err, want[seed]))
				}
			}
		}()
	}
	wg.Wait()
	failures.Range(func(_, v any) bool { t.Error(v); return true })
	distinct := map[uint64]bool{}
	for _, v := range want {
		distinct[v] = true
	}
	if len(distinct) != workers {
		t.Errorf("the seeds' values %v are not distinct: the check proves nothing", want)
	}
}
