//go:build !linux

package main

import (
	"io"
	"os"
)

// parentInput returns what the server reads the parent's requests from:
// stdin through Go's poller where it is a pipe or socket (pollable).
func parentInput(f *os.File) (io.Reader, func()) {
	return pollable(f)
}
