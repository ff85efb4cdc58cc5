package protocol

import "context"

// AfterAnswer lets an engine put off work its caller need not wait for
// until the request's answer has gone out: freeing a run's store (the
// wasmtime store, its memory given back to the pool or the kernel) is
// tens of microseconds that the parent would otherwise wait for before
// it reads its result. The caller runs the work it takes (returns true
// for) once the answer is written, on the goroutine that wrote it,
// while the request still holds its run slot (it no longer counts as in
// flight: it is answered); it returns false when the answer has already
// gone (the request was cancelled and answered meanwhile), and the
// engine then does the work itself.
type AfterAnswer func(work func()) (taken bool)

type afterAnswerKey struct{}

// WithAfterAnswer returns ctx carrying after, for the engine's calls made
// with it.
func WithAfterAnswer(ctx context.Context, after AfterAnswer) context.Context {
	return context.WithValue(ctx, afterAnswerKey{}, after)
}

// DoAfterAnswer runs work once the answer to ctx's request is out, when
// ctx carries an AfterAnswer that takes it, and now otherwise. work must
// not send anything the answer's recipient must see before the answer.
func DoAfterAnswer(ctx context.Context, work func()) {
	if after, ok := ctx.Value(afterAnswerKey{}).(AfterAnswer); ok && after(work) {
		return
	}
	work()
}
