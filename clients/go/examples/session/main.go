// Command session shows a whole sidecar session from Go: spawn, initialize,
// a run with streamed logs, a run that fails, a guest calling a function
// this program serves, a plugin instance called twice, shutdown. It is the
// last step of `make demo`, run from the checkout's root: the modules it
// runs are files of the checkout's testdata, named relative to it.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/sandboxd/sandboxd/clients/go/sandboxd"
)

func main() {
	if err := session(); err != nil {
		fmt.Fprintln(os.Stderr, "session:", err)
		os.Exit(1)
	}
}

func session() error {
	ctx := context.Background()
	// "": $SANDBOXD_BIN, else sandboxd on PATH, else this checkout's
	// bin/sandboxd (sandboxd.FindBinary).
	c, err := sandboxd.Start(ctx, "", sandboxd.Options{})
	if err != nil {
		return err
	}
	defer c.Close()

	info, err := c.Initialize(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("initialize: %s %s on wasmtime-go %s, %d workers\n", info.ServerInfo.Name, info.ServerInfo.Version, info.Engine.Wasmtime, info.MaxConcurrency)

	res, err := c.Run(ctx, sandboxd.RunParams{
		Module:       sandboxd.ModuleSpec{Path: sandboxd.Str("testdata/wat/logger.wat")},
		Capabilities: &sandboxd.CapabilitySpec{Log: true},
	}, func(seq int, line string) { fmt.Printf("log %d: %s\n", seq, line) })
	if err != nil {
		return err
	}
	fmt.Printf("run logger: %d log line(s), fuel %d, peak memory %d bytes\n", res.LogLines, res.FuelConsumed, res.PeakMemoryBytes)

	res, err = c.Run(ctx, sandboxd.RunParams{
		Module:   sandboxd.ModuleSpec{Path: sandboxd.Str("testdata/wat/well_behaved.wat")},
		Function: "add", Args: []json.RawMessage{json.RawMessage("2"), json.RawMessage("40")},
	}, nil)
	if err != nil {
		return err
	}
	fmt.Printf("run add(2, 40): %s, fuel %d\n", res.Values[0].Value, res.FuelConsumed)

	_, err = c.Run(ctx, sandboxd.RunParams{
		Module: sandboxd.ModuleSpec{Path: sandboxd.Str("testdata/wat/infinite_loop.wat")},
		Limits: map[string]uint64{"fuel": 1_000_000},
	}, nil)
	var e *sandboxd.Error
	if !errors.As(err, &e) {
		return fmt.Errorf("infinite loop: expected a run error, got %v", err)
	}
	fmt.Printf("run infinite_loop: error %d %s\n", e.Code, e.Kind())

	if err := hostFunction(ctx, c); err != nil {
		return err
	}
	if err := plugin(ctx, c); err != nil {
		return err
	}

	if err := c.Close(); err != nil {
		return err
	}
	fmt.Println("shutdown: ok")
	return nil
}

// hostFunction runs a guest that imports env::lookup, which this program
// serves: the sidecar asks the run's handler for each call (host/call).
func hostFunction(ctx context.Context, c *sandboxd.Client) error {
	lookup := func(_ context.Context, call sandboxd.HostCall) ([]sandboxd.HostValue, error) {
		return []sandboxd.HostValue{sandboxd.HostI32(int32(call.Args[0].I64()) * 10)}, nil
	}
	res, err := c.RunWith(ctx, sandboxd.RunParams{
		Module:   sandboxd.ModuleSpec{Path: sandboxd.Str("testdata/wat/host_lookup.wat")},
		Function: "sum", Args: []json.RawMessage{json.RawMessage("4")},
		HostFunctions: []sandboxd.HostFunction{{Module: "env", Name: "lookup", Params: []string{"i64"}, Results: []string{"i32"}}},
	}, sandboxd.RunHandlers{Host: lookup})
	if err != nil {
		return err
	}
	fmt.Printf("run sum(4) of lookup(k) = 10k, served by this program: %s\n", res.Values[0].Value)
	return nil
}

// plugin instantiates the WAT plugin, calls it twice (its var counter
// persists between the calls), shows its own error, and releases it.
func plugin(ctx context.Context, c *sandboxd.Client) error {
	in, err := c.Instantiate(ctx, sandboxd.InstantiateParams{
		Module:       sandboxd.ModuleSpec{Path: sandboxd.Str("testdata/plugins/wat/plugin.wat")},
		Capabilities: &sandboxd.CapabilitySpec{Log: true},
	})
	if err != nil {
		return err
	}
	defer in.Release(ctx)
	res, err := in.Call(ctx, "greet", sandboxd.CallOptions{Input: []byte("Ada")})
	if err != nil {
		return err
	}
	fmt.Printf("call greet(\"Ada\") on %s: %q\n", in.ID, []byte(*res.Output))
	for range 2 {
		if res, err = in.Call(ctx, "count", sandboxd.CallOptions{}); err != nil {
			return err
		}
	}
	fmt.Printf("call count twice: the var is %d\n", binary.LittleEndian.Uint64(*res.Output))
	_, err = in.Call(ctx, "fail", sandboxd.CallOptions{})
	var pe *sandboxd.PluginError
	if !errors.As(err, &pe) {
		return fmt.Errorf("fail: expected a plugin error, got %v", err)
	}
	fmt.Printf("call fail: plugin error %q (return code %d), the instance stays\n", pe.Message, pe.ReturnCode)
	return in.Release(ctx)
}
