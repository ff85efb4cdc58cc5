package rpc

import (
	"github.com/sandboxd/sandboxd/internal/framing"
	"github.com/sandboxd/sandboxd/protocol"
)

// The wire types and values moved to package protocol (pure Go, shared with
// the Go client). These names keep rpc.X usable for existing callers.

// Method names.
const (
	MethodInitialize = protocol.MethodInitialize
	MethodRun        = protocol.MethodRun
	MethodCompile    = protocol.MethodCompile
	MethodStats      = protocol.MethodStats
	MethodShutdown   = protocol.MethodShutdown
	MethodExit       = protocol.MethodExit
	MethodCancel     = protocol.MethodCancel
	NotifyLog        = protocol.NotifyLog
)

// Protocol error codes.
const (
	CodeParseError     = protocol.CodeParseError
	CodeInvalidRequest = protocol.CodeInvalidRequest
	CodeMethodNotFound = protocol.CodeMethodNotFound
	CodeInvalidParams  = protocol.CodeInvalidParams
	CodeInternalError  = protocol.CodeInternalError
	CodeBusy           = protocol.CodeBusy
	CodeCancelled      = protocol.CodeCancelled
)

type (
	ModuleSpec       = protocol.ModuleSpec
	RunParams        = protocol.RunParams
	CapabilitySpec   = protocol.CapabilitySpec
	RandomSpec       = protocol.RandomSpec
	WireValue        = protocol.WireValue
	RunResult        = protocol.RunResult
	CompileParams    = protocol.CompileParams
	ImportInfo       = protocol.ImportInfo
	ExportInfo       = protocol.ExportInfo
	CompileResult    = protocol.CompileResult
	InitializeResult = protocol.InitializeResult
	ServerInfo       = protocol.ServerInfo
	EngineInfo       = protocol.EngineInfo
	ServerCaps       = protocol.ServerCaps
	LimitsInfo       = protocol.LimitsInfo
	StatsResult      = protocol.StatsResult
	CacheInfo        = protocol.CacheInfo
	CancelParams     = protocol.CancelParams
	LogParams        = protocol.LogParams
	ErrorData        = protocol.ErrorData
	FrameInfo        = protocol.FrameInfo
	Message          = protocol.Message
	WireError        = protocol.WireError
	ErrorResponse    = protocol.ErrorResponse
)

// EncodeValue is protocol.EncodeValue.
func EncodeValue(v protocol.Value) WireValue { return protocol.EncodeValue(v) }

// EncodeValues is protocol.EncodeValues.
func EncodeValues(vs []protocol.Value) []WireValue { return protocol.EncodeValues(vs) }

// DecodeArg is protocol.DecodeArg.
func DecodeArg(raw []byte, ty protocol.ValType) (protocol.Value, error) {
	return protocol.DecodeArg(raw, ty)
}

// Framing is how messages are delimited on the byte stream.
type Framing = framing.Framing

// The two framings. Content-Length is the LSP base protocol.
const (
	FramingContentLength = framing.ContentLength
	FramingNDJSON        = framing.NDJSON
)

// FramingError means the input can no longer be split into messages: the
// sidecar answers what it owes and exits with status 2.
type FramingError = framing.Error
