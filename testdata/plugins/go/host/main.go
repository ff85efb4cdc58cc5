// A plugin built with Extism's Go PDK that calls a function its host
// serves, as the PDK's users write one: extism:host/user::transform takes
// a memory handle and returns one (declare it {"module":
// "extism:host/user", "name": "transform", "params": ["bytes"],
// "results": ["bytes"]}). Rebuild: make plugins.
package main

import "github.com/extism/go-pdk"

//go:wasmimport extism:host/user transform
func transform(uint64) uint64

// run outputs what the host's transform returns for the input, and then
// for that, so that the plugin calls its host twice per call.
//
//go:wasmexport run
func run() int32 {
	in := pdk.AllocateBytes(pdk.Input())
	once := pdk.FindMemory(transform(in.Offset()))
	twice := pdk.FindMemory(transform(once.Offset()))
	pdk.OutputMemory(twice)
	return 0
}

func main() {}
