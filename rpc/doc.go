// Package rpc is the sidecar: JSON-RPC 2.0 over a byte stream (the
// process's stdin and stdout), framed like a language server, serving the
// methods of docs/protocol.md over an Engine.
//
// It is pure Go: the engine is an interface in protocol types, so this
// package and the Go client build without cgo (cmd/sandboxd adapts
// *sandbox.Engine to it). The files, by job:
//
//	doc.go              this list
//	options.go          Options, their defaults and validation
//	engine.go           the Engine interface the server drives
//	instance.go         instances: the InstanceEngine interface, and
//	                    instantiate, call, release and plugin runs as jobs
//	lifecycle.go        Server, Serve and its one state machine: open →
//	                    shutting down → draining → closed
//	dispatch.go         the reader, its inbox and the dispatcher (fast
//	                    methods answered inline; back-pressure), and the
//	                    runs the reader runs itself
//	screen.go           envelope screening: what the JSON-RPC layer never
//	                    sees; ids by value
//	queue.go            jobs: admission (busy by entries and by bytes),
//	                    ids in flight, cancel, the one response, shutdown
//	execute.go          the prepare stage (decode, compile) and a job's run
//	execute_wasi.go     what a WASI run adds: defaults, its result, output
//	                    notifications
//	slots.go            run slots (--max-concurrency, a semaphore): the run
//	                    queue, starting jobs, a slot given back and taken
//	                    again
//	hostcall.go         host calls: the host/call requests to the parent,
//	                    the wait without a slot, the cycle check, their
//	                    counters
//	hostanswer.go       their answers: routed from the reader to the call
//	                    waiting, ended when unreadable, read by the
//	                    declaration
//	eval.go             snippets: the SnippetEngine interface, eval as a
//	                    job
//	session.go          sessions: instantiate with a language, eval in
//	                    one, in the session's line as calls are
//	encode.go           responses and log notifications as bytes
//	outbox.go           the output: ordering, back-pressure, the drain
//	                    deadline
//	stats.go            initialize's and stats' results
//	wire.go             the params of every method as shapes: each
//	                    object's members, declared once
//	params.go           reading params through their shapes: the object
//	                    reader and the readers of strings, numbers, bytes
//	params_run.go       run and compile params: module, limits,
//	                    capabilities, args
//	params_instance.go  instantiate, call and release params
//	params_wasi.go      capabilities.wasi
//	params_host.go      hostFunctions and hostCall
//	params_eval.go      eval params, and instantiate's for a session
//	errors.go           errors as JSON-RPC error objects
//	compat.go           the names that moved to package protocol, kept
//	faults.go           fault injection (build tag sandboxd_faults)
//
// Framing itself (Content-Length and ndjson) is internal/framing, shared
// with the Go client; the wire types, values and kinds are package
// protocol. The tests drive the real Server over the fake engine of
// internal/rpctest (shared with the Go client's tests), each file beside
// the unit it tests.
package rpc
