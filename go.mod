module github.com/sandboxd/sandboxd

go 1.26.0

require (
	github.com/bytecodealliance/wasmtime-go/v39 v39.0.1
	github.com/sourcegraph/jsonrpc2 v0.2.3
	golang.org/x/sync v0.25.0
)
