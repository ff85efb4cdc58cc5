//go:build race

package mcpserver

// raceDetector: the race detector's instrumentation allocates too, so
// what a call allocates is not measured under it.
const raceDetector = true
