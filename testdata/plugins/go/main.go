// Command plugin is a test plugin for sandboxd, written with Extism's Go PDK
// and built as a reactor (GOOS=wasip1 GOARCH=wasm go build
// -buildmode=c-shared). Every exported function is an Extism plugin
// function: it reads the input, sets the output or an error, and returns 0
// on success.
package main

import (
	"strconv"

	"github.com/extism/go-pdk"
)

// greet says hello to the input.
//
//go:wasmexport greet
func greet() int32 {
	pdk.OutputString("Hello, " + pdk.InputString() + "!")
	return 0
}

// count adds one to the var "count" and outputs it: the var lives as long
// as the instance.
//
//go:wasmexport count
func count() int32 {
	n := pdk.GetVarInt("count") + 1
	pdk.SetVarInt("count", n)
	pdk.OutputString(strconv.Itoa(n))
	return 0
}

// config outputs the config value "greeting", or reports a plugin error.
//
//go:wasmexport config
func config() int32 {
	v, ok := pdk.GetConfig("greeting")
	if !ok {
		pdk.SetErrorString("no greeting in the config")
		return 1
	}
	pdk.OutputString(v)
	return 0
}

// logs logs one line at each level from debug to error.
//
//go:wasmexport logs
func logs() int32 {
	pdk.Log(pdk.LogDebug, "a debug line")
	pdk.Log(pdk.LogInfo, "an info line")
	pdk.Log(pdk.LogWarn, "a warn line")
	pdk.Log(pdk.LogError, "an error line")
	return 0
}

// fail reports a plugin error naming the input.
//
//go:wasmexport fail
func fail() int32 {
	pdk.SetErrorString("failed on purpose: " + pdk.InputString())
	return 1
}

// echo outputs its input unchanged (any bytes).
//
//go:wasmexport echo
func echo() int32 {
	pdk.Output(pdk.Input())
	return 0
}

// spin never returns: its deadline stops it.
//
//go:wasmexport spin
func spin() int32 {
	n := 0
	for {
		n++
	}
}

var hoard [][]byte

// hog allocates (and touches) a MiB at a time until the memory cap stops it.
//
//go:wasmexport hog
func hog() int32 {
	for {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		hoard = append(hoard, b)
	}
}

func main() {}
