package protocol

import "context"

// SlotYield lets an engine wait without holding its caller's concurrency
// slot: the sidecar runs a job only while it holds one of
// --max-concurrency run slots, and a run that must wait for something
// other runs hold (room in the engine's pool, which a run waiting for its
// parent keeps) would otherwise keep a slot those runs need to finish.
// The engine calls the SlotYield its context carries with the wait; the
// caller gives its slot back, runs wait, and takes a slot again before
// returning (ahead of work that has none yet). It returns ctx's error,
// holding no slot, if ctx ends before a slot comes back.
type SlotYield func(ctx context.Context, wait func()) error

type slotYieldKey struct{}

// WithSlotYield returns ctx carrying yield, for the engine's calls made
// with it.
func WithSlotYield(ctx context.Context, yield SlotYield) context.Context {
	return context.WithValue(ctx, slotYieldKey{}, yield)
}

// SlotYieldOf is the SlotYield ctx carries, or one that just waits (the
// caller holds no slot to give back).
func SlotYieldOf(ctx context.Context) SlotYield {
	if y, ok := ctx.Value(slotYieldKey{}).(SlotYield); ok {
		return y
	}
	return func(ctx context.Context, wait func()) error {
		wait()
		return ctx.Err()
	}
}
