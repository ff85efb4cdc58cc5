package sandboxd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sandboxd/sandboxd/protocol"
)

// Long-lived instances and Extism plugins (docs/protocol.md, "Instances
// and plugins"). Instances live in the sidecar: they die with it (its
// exit, its input ending, a crash), and an *Instance of a dead sidecar
// answers ErrClosed.

// InstantiateParams are the params of `instantiate`: a module, its
// capabilities, its limits (the run limits and varBytes) and a plugin's
// config.
type InstantiateParams = protocol.InstantiateParams

// InstantiateResult is what `instantiate` answers.
type InstantiateResult = protocol.InstantiateResult

// CallResult is what `call` answers. Output is set for plugin functions:
// the bytes the plugin output ([]byte(*res.Output)).
type CallResult = protocol.CallResult

// Instance is a long-lived instance in the sidecar. Its methods are safe
// for concurrent use; calls to one instance run one at a time, in the
// order the sidecar reads them.
type Instance struct {
	c *Client
	// ID is the sidecar's opaque name of the instance.
	ID string
	// Result is instantiate's answer: module id, exports, whether the
	// module is a plugin, what instantiation consumed.
	Result *InstantiateResult
	host   HostHandler // the instance's (InstantiateWith's RunHandlers.Host)
}

// Instantiate calls `instantiate`. If ctx ends first, the instantiate is
// cancelled and, as for Call, its answer is awaited for up to 5 s more;
// an instance whose answer comes after that, however late, is released
// by the client as soon as the answer is read, since no caller holds it.
func (c *Client) Instantiate(ctx context.Context, p InstantiateParams) (*Instance, error) {
	return c.InstantiateWith(ctx, p, RunHandlers{})
}

// InstantiateWith is Instantiate with handlers for the notifications of
// instantiation (the start function, _initialize); none runs after it
// returned.
func (c *Client) InstantiateWith(ctx context.Context, p InstantiateParams, h RunHandlers) (*Instance, error) {
	if c.closing.Load() {
		return nil, ErrClosed
	}
	var res InstantiateResult
	if p.HostCall == "" {
		p.HostCall = hostCallOf(ctx)
	}
	if err := c.call(ctx, protocol.MethodInstantiate, p, &res, h, cancelGrace); err != nil {
		return nil, typedError(err)
	}
	return &Instance{c: c, ID: res.Instance, Result: &res, host: h.Host}, nil
}

// CallOptions are the optional parts of a call.
type CallOptions struct {
	// Input is what a plugin function reads; nil sends none (empty).
	Input []byte
	// Args are the values of a plain function, as in RunParams.
	Args []json.RawMessage
	// Limits may set fuel, timeoutMs, logBytes, outputBytes (the others
	// are fixed at instantiate); unset fields take the instance's.
	Limits map[string]uint64
	// Log receives the call's log lines in order, with an Extism line's
	// level ("" for host::log); Output a WASI instance's output pieces.
	// Both run on the reading goroutine: quick, and never calling the
	// Client.
	Log    func(seq int, level, line string)
	Output func(seq int, stream string, data []byte)
	// Host serves this call's host calls instead of the instance's
	// handler (nil: the instance's).
	Host HostHandler
}

// Call calls function on the instance. A plugin error is a *PluginError,
// a closed or unknown instance an *InstanceClosedError; both unwrap to
// the *Error of the response.
func (in *Instance) Call(ctx context.Context, function string, o CallOptions) (*CallResult, error) {
	c := in.c
	if c.closing.Load() {
		return nil, ErrClosed
	}
	p := protocol.CallParams{Instance: in.ID, Function: function, Args: o.Args, Limits: o.Limits, HostCall: hostCallOf(ctx)}
	if o.Input != nil {
		b := protocol.Bytes(o.Input)
		p.Input = &b
	}
	var res CallResult
	h := RunHandlers{LevelLog: o.Log, Output: o.Output, Host: o.Host}
	if h.Host == nil {
		h.Host = in.host
	}
	if err := c.call(ctx, protocol.MethodCall, p, &res, h, cancelGrace); err != nil {
		return nil, typedError(err)
	}
	return &res, nil
}

// Release calls `release`. Releasing a closed, evicted or unknown
// instance also succeeds; calls still queued on it get an
// *InstanceClosedError (released), a running one is cancelled.
func (in *Instance) Release(ctx context.Context) error {
	return typedError(in.c.Call(ctx, protocol.MethodRelease, protocol.ReleaseParams{Instance: in.ID}, nil))
}

// ErrInstanceClosed matches every *InstanceClosedError with errors.Is.
var ErrInstanceClosed = errors.New("sandboxd: instance closed")

// InstanceClosedError is the -32001 answer: the instance was released,
// evicted, closed by a call that ended in a trap or a fence, or never
// existed. Reason says which.
type InstanceClosedError struct {
	Instance string
	Reason   string
	Err      *Error
}

func (e *InstanceClosedError) Error() string {
	return fmt.Sprintf("sandboxd: instance %s is closed: %s", e.Instance, e.Reason)
}

func (e *InstanceClosedError) Unwrap() error        { return e.Err }
func (e *InstanceClosedError) Is(target error) bool { return target == ErrInstanceClosed }

// TooManyInstancesError is the -32002 answer to instantiate: the
// sidecar's --max-instances are live.
type TooManyInstancesError struct {
	Instances    int
	MaxInstances int
	Err          *Error
}

func (e *TooManyInstancesError) Error() string {
	return fmt.Sprintf("sandboxd: too many instances: %d are live (the maximum is %d)", e.Instances, e.MaxInstances)
}

func (e *TooManyInstancesError) Unwrap() error { return e.Err }

// PluginError is a plugin function's own error (kind plugin_error, code
// 10). The instance stays open.
type PluginError struct {
	Message         string // the plugin's own
	Function        string
	ReturnCode      int32
	FuelConsumed    uint64
	PeakMemoryBytes uint64
	Err             *Error
}

func (e *PluginError) Error() string {
	return fmt.Sprintf("sandboxd: plugin error in %s (return code %d): %s", e.Function, e.ReturnCode, e.Message)
}

func (e *PluginError) Unwrap() error { return e.Err }

// InstanceClosed reports whether a failed call closed its instance (every
// trap and fence does: its state can no longer be trusted).
func InstanceClosed(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	var d struct {
		InstanceClosed bool `json:"instanceClosed"`
	}
	_ = json.Unmarshal(e.Data, &d)
	return d.InstanceClosed
}

// typedError turns the instance errors of a response into their types.
func typedError(err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	switch {
	case e.Code == protocol.CodeInstanceClosed:
		var d protocol.InstanceClosedData
		_ = json.Unmarshal(e.Data, &d)
		return &InstanceClosedError{Instance: d.Instance, Reason: d.Reason, Err: e}
	case e.Code == protocol.CodeTooManyInstances:
		var d protocol.TooManyInstancesData
		_ = json.Unmarshal(e.Data, &d)
		return &TooManyInstancesError{Instances: d.Instances, MaxInstances: d.MaxInstances, Err: e}
	case e.Kind() == string(protocol.KindScriptError):
		return scriptError(e) // eval.go
	case e.Kind() == string(protocol.KindPluginError):
		var d struct {
			Message         string `json:"message"`
			Function        string `json:"function"`
			ReturnCode      int32  `json:"returnCode"`
			FuelConsumed    uint64 `json:"fuelConsumed"`
			PeakMemoryBytes uint64 `json:"peakMemoryBytes"`
		}
		_ = json.Unmarshal(e.Data, &d)
		return &PluginError{Message: d.Message, Function: d.Function, ReturnCode: d.ReturnCode,
			FuelConsumed: d.FuelConsumed, PeakMemoryBytes: d.PeakMemoryBytes, Err: e}
	}
	return err
}
