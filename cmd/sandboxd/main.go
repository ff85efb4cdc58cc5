// Command sandboxd runs untrusted WebAssembly under fuel, deadline and
// memory fences.
//
//	sandboxd serve [flags]        the JSON-RPC sidecar on stdin/stdout
//	sandboxd run FILE [flags]     one run, for shell users
//	sandboxd version
//
// See README.md and docs/protocol.md.
package main

import (
	"fmt"
	"io"
	"os"
)

// version is reported by `sandboxd version` and the sidecar's initialize.
const version = "0.1.0"

const usage = `sandboxd runs untrusted WebAssembly under fuel, deadline and memory fences.

Usage:
  sandboxd serve [flags]                 serve JSON-RPC on stdin/stdout (see docs/protocol.md)
  sandboxd run FILE [flags]              run one export of a .wasm or .wat file
  sandboxd version                       print the version

Run "sandboxd serve -h" or "sandboxd run -h" for their flags.
`

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func dispatch(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 1
	}
	switch args[0] {
	case "serve":
		return serveMain(args[1:], stdin, stdout, stderr)
	case "run":
		return runMain(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "sandboxd %s (wasmtime-go %s)\n", version, wasmtimeVersion())
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "sandboxd: unknown command %q\n\n%s", args[0], usage)
	return 1
}
