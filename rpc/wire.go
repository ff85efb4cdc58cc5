package rpc

import (
	"strings"

	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// The params of every method, as the wire has them: each JSON object the
// params hold is a shape, the members it takes, declared here once. The
// decoders (params*.go) read an object through its shape (shape.read, one
// walk over the text screening checked) and take its members by the
// indices below; a member not in the shape is refused naming it, so that a
// typo ("timeout" for "timeoutMs") is an error, not a silent default. The
// documented reading is encoding/json's (exact names, the last of a
// repeated member counts, null is absent); FuzzRedteamDecodeRunDifferential
// holds the decoders to it. docs/protocol.md describes each member.

// shape is the members a JSON object of the params takes.
type shape struct {
	path  string   // the object's field path, for errors: "params", "limits", …
	names []string // by member index; an unknown member's error lists them in this order
	// listed, when set, is what an unknown member's error lists instead:
	// a call's limits take every instance limit, to refuse the fixed ones
	// saying so, but a call may set only four.
	listed []string
	// allowed is the list an unknown member's error gives, joined once.
	allowed string
}

func newShape(path string, names []string, listed ...string) *shape {
	if len(names) > maxMembers {
		panic("rpc: a shape of more than maxMembers members")
	}
	if listed == nil {
		listed = names
	}
	return &shape{path: path, names: names, listed: listed, allowed: strings.Join(listed, ", ")}
}

// run, and what a plugin run adds (input, config).
const (
	runModule = iota
	runFunction
	runArgs
	runLimits
	runCapabilities
	runInput
	runConfig
	runHostFunctions
	runHostCall
)

var runShape = newShape("params", []string{runModule: "module", runFunction: "function", runArgs: "args",
	runLimits: "limits", runCapabilities: "capabilities", runInput: "input", runConfig: "config",
	runHostFunctions: protocol.HostFunctionsField, runHostCall: protocol.HostCallField})

// compile.
const (
	compileModule = iota
	compileLimits
	compilePreinitialize
)

var compileShape = newShape("params", []string{compileModule: "module", compileLimits: "limits", compilePreinitialize: "preinitialize"})

// compileLimitNames are the limits that mean something to `compile`.
var compileLimitNames = []string{"compileTimeoutMs", "compileMemoryBytes"}

// instantiate.
const (
	instantiateModule = iota
	instantiateCapabilities
	instantiateLimits
	instantiateConfig
	instantiateHostFunctions
	instantiateHostCall
	instantiateLanguage // a session's, instead of module (session.go)
)

var instantiateShape = newShape("params", []string{instantiateModule: "module",
	instantiateCapabilities: "capabilities", instantiateLimits: "limits", instantiateConfig: "config",
	instantiateHostFunctions: protocol.HostFunctionsField, instantiateHostCall: protocol.HostCallField,
	instantiateLanguage: "language"})

// call.
const (
	callInstance = iota
	callFunction
	callInput
	callArgs
	callLimits
	callHostCall
)

var callShape = newShape("params", []string{callInstance: "instance", callFunction: "function",
	callInput: "input", callArgs: "args", callLimits: "limits", callHostCall: protocol.HostCallField})

// release.
const releaseInstance = 0

// eval: language (one-shot) or instance (a session), exclusive.
const (
	evalLanguage = iota
	evalInstance
	evalCode
	evalInput
	evalLimits
	evalHostCall
)

var evalShape = newShape("params", []string{evalLanguage: "language", evalInstance: "instance", evalCode: "code",
	evalInput: "input", evalLimits: "limits", evalHostCall: "hostCall"})

var releaseShape = newShape("params", []string{releaseInstance: "instance"})

// A module: exactly one of its members.
const (
	moduleWAT = iota
	moduleWasm
	moduleID
	modulePath
)

var moduleShape = newShape("module", []string{moduleWAT: "wat", moduleWasm: "wasm", moduleID: "id", modulePath: "path"})

// The limits of a run or compile: limits.Fields(), by their index there.
// An instance's add varBytes (at varBytesMember); a call's are an
// instance's, of which it may set callLimitNames.
var (
	limitsShape         = newShape("limits", limitNames())
	instanceLimitsShape = newShape("limits", append(limitNames(), varBytesField))
	callLimitsShape     = newShape("limits", instanceLimitsShape.names, callLimitNames...)
)

// limitFields is limits.Fields(), read once: the decoders walk it for
// every request.
var limitFields = limits.Fields()

// varBytesMember is varBytes' index in an instance's limits.
var varBytesMember = len(limitFields)

// varBytesField is the instance limit that is not a run limit.
const varBytesField = "varBytes"

// callLimitNames are the limits a call may set; the others hold for the
// instance's life and are fixed at instantiate.
var callLimitNames = []string{"fuel", "timeoutMs", "logBytes", "outputBytes"}

func limitNames() []string {
	names := make([]string, len(limitFields))
	for i, f := range limitFields {
		names[i] = f.Name
	}
	return names
}

// capabilities, and its random.
const (
	capLog = iota
	capRandom
	capClock
	capWASI
)

var capabilitiesShape = newShape("capabilities", []string{capLog: "log", capRandom: "random", capClock: "clock", capWASI: "wasi"})

const randomSeed = 0

var randomShape = newShape("capabilities.random", []string{randomSeed: "seed"})

// capabilities.wasi as an object, and each of its dirs (whose path is
// capabilities.wasi.dirs[i]). env, files and config are objects of any
// keys (entries).
const (
	wasiArgs = iota
	wasiEnv
	wasiStdin
	wasiFiles
	wasiDirs
)

var wasiShape = newShape(wasiField, []string{wasiArgs: "args", wasiEnv: "env", wasiStdin: "stdin", wasiFiles: "files", wasiDirs: "dirs"})

const wasiField = "capabilities.wasi"

const (
	dirHost = iota
	dirGuest
	dirWritable
)

var dirShape = newShape(wasiField+".dirs[]", []string{dirHost: "host", dirGuest: "guest", dirWritable: "writable"})

// Each entry of hostFunctions (whose path is hostFunctions[i]).
const (
	hostFnModule = iota
	hostFnName
	hostFnParams
	hostFnResults
)

var hostFunctionShape = newShape(protocol.HostFunctionsField+"[]", []string{hostFnModule: "module", hostFnName: "name",
	hostFnParams: "params", hostFnResults: "results"})

// The result of the parent's answer to a host call.
var hostAnswerShape = newShape("result", []string{"values"})

// a host call's error answer: a JSON-RPC error object.
const (
	hostErrorCode = iota
	hostErrorMessage
	hostErrorData
)

var hostErrorShape = newShape("error", []string{hostErrorCode: "code", hostErrorMessage: "message", hostErrorData: "data"})

// MaxArgs is the most args a run may pass: wasm's limit on a function's
// parameters (wasmparser's, which wasmtime applies). A longer array is
// refused before its elements are decoded, so a message of millions of
// args costs no more than its own size.
const MaxArgs = 1000

// MaxConfigKeys bounds the keys of a plugin's config. The instance keeps
// its config for life, and a map spends about 100 bytes per key besides
// the key and value: a 60 MB message of 4 M empty keys held 1.4 GB per
// instance (and took 84 s to decode) before this bound.
const MaxConfigKeys = 4096
