package mcpserver

import (
	"errors"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/sandboxd/sandboxd/internal/jsonscan"
	"github.com/sandboxd/sandboxd/protocol"
)

// What the client sends is echoed in no answer at more than a bounded
// length. The SDK's own errors quote the client's input whole: "unknown
// tool %q" the tool name, "method not found: %q" the method, and a
// params that does not decode "unmarshaling %q into a ..." the whole
// params (a params array, a name that is a number, arguments nested past
// the SDK's 1,000 levels): a 4 MB tool name came back as a 12 MB answer,
// 40 MB of params as 200 MB (1.37 GB of memory while it was built). So:
//
//   - The reader screens each request before the SDK sees it (screen):
//     a method longer than any MCP method, params that are not an object
//     or are nested too deep, a tools/call whose name is not a string or
//     is longer than any tool's, and params past maxParamsBytes on any
//     method but tools/call are answered here, quoting at most
//     protocol.MaxQuotedBytes of what was sent (a notification that fails
//     the screen is dropped, as the SDK drops one it cannot decode). What
//     the SDK would have quoted whole is then never built.
//   - Every error response, whoever made it, is cut as it is written
//     (boundError): its message to maxErrorMessageBytes, its data dropped
//     past maxErrorDataBytes. This is the fence; the screen spares the
//     memory.
//
// The id is the one thing an answer repeats as the client sent it
// (JSON-RPC requires it): its size is the client's own, once.

const (
	// maxMethodBytes is longer than every MCP method name
	// ("notifications/resources/list_changed" is 36 bytes).
	maxMethodBytes = 128
	// maxToolNameBytes is longer than every tool's name.
	maxToolNameBytes = 128
	// maxParamsBytes bounds the params of every method but tools/call
	// (initialize, ping, tools/list, logging/setLevel,
	// notifications/cancelled, ...): what a client sends there is a few
	// hundred bytes, and the SDK decodes them into maps and interfaces,
	// which take up to a hundred times the text (1 MiB of ping params
	// held about 7 MiB while answered).
	maxParamsBytes = 16 << 10
	// maxMetaBytes bounds a tools/call's _meta, which the SDK decodes
	// into a map[string]any (14 MB of {"x":[{"":0},...]} took 1.45 GB)
	// and of which this server reads only progressToken.
	maxMetaBytes = 4 << 10
	// maxParamsDepth is the SDK's nesting limit of params (its
	// internal/json): deeper params fail to decode, and the failure
	// quoted them whole.
	maxParamsDepth = 1000
	// maxErrorMessageBytes and maxErrorDataBytes bound an error
	// response's message and data as written.
	maxErrorMessageBytes = 1 << 10
	maxErrorDataBytes    = 1 << 10
)

// screen says what is wrong with a request the SDK would answer by
// quoting it at length, with the code of its answer; "" if nothing.
func screen(req *jsonrpc.Request) (problem string, code int64) {
	if len(req.Method) > maxMethodBytes {
		return "method not found: " + protocol.Quote(req.Method) + " (" + itoa(uint64(len(req.Method))) + " bytes)", jsonrpc.CodeMethodNotFound
	}
	params := jsonscan.TrimSpace(req.Params)
	switch kindOf(params) {
	case "nothing", "null":
		return "", 0
	case "object":
	default:
		return "invalid params: params must be an object, got " + got(params), jsonrpc.CodeInvalidParams
	}
	if req.Method != "tools/call" && len(params) > maxParamsBytes {
		return "invalid params: " + itoa(uint64(len(params))) + " bytes of params, more than " + itoa(maxParamsBytes) + " for " + protocol.Quote(req.Method), jsonrpc.CodeInvalidParams
	}
	if nesting(params) > maxParamsDepth {
		return "invalid params: nested deeper than " + itoa(maxParamsDepth) + " levels", jsonrpc.CodeInvalidParams
	}
	if req.Method == "tools/call" {
		return screenToolCall(params)
	}
	return "", 0
}

// screenToolCall checks the members of tools/call's params the SDK
// decodes (by their exact names once unescaped, as it reads them): a
// mistyped one failed the decoding, whose message quoted the arguments
// too; a _meta past maxMetaBytes is refused.
func screenToolCall(params []byte) (problem string, code int64) {
	jsonscan.Members(params, func(key, value []byte) {
		if problem != "" {
			return
		}
		want := ""
		switch jsonscan.String(key) {
		case "name":
			if kindOf(value) == "string" {
				if name := jsonscan.String(value); len(name) > maxToolNameBytes {
					problem = "unknown tool " + protocol.Quote(name) + " (" + itoa(uint64(len(name))) + " bytes)"
				}
				return
			}
			want = "a string"
		case "requestState":
			want = "a string"
		case "_meta":
			if len(value) > maxMetaBytes {
				problem = "invalid params: _meta: " + itoa(uint64(len(value))) + " bytes, more than " + itoa(maxMetaBytes) + " (this server reads only its progressToken)"
				return
			}
			want = "an object"
		case "inputResponses":
			// answers to an input_required result, which this server
			// never gives
			if kindOf(value) != "null" {
				problem = "invalid params: inputResponses: this server asks for no input"
			}
			return
		default:
			return
		}
		if kindOf(value) != "null" && got(value) != want {
			problem = "invalid params: " + jsonscan.String(key) + " must be " + want + ", got " + got(value)
		}
	})
	if problem != "" {
		return problem, jsonrpc.CodeInvalidParams
	}
	return "", 0
}

// nesting is how deeply v nests (an object or array of scalars is 1), as
// the SDK counts it. v is valid JSON.
func nesting(v []byte) int {
	d, most := 0, 0
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '"':
			for i++; i < len(v) && v[i] != '"'; i++ {
				if v[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			d++
			most = max(most, d)
		case '}', ']':
			d--
		}
	}
	return most
}

// boundError is an error response as it may be written: its message cut
// to maxErrorMessageBytes (on a rune boundary, "…" where it was cut) and
// its data dropped if longer than maxErrorDataBytes. resp is not changed
// (the SDK's errors may be shared values).
func boundError(resp *jsonrpc.Response) *jsonrpc.Response {
	we := &jsonrpc.Error{Message: resp.Error.Error()}
	var wrapped *jsonrpc.Error
	if errors.As(resp.Error, &wrapped) { // the code, as the SDK's encoder takes it
		we.Code = wrapped.Code
	}
	if direct, ok := resp.Error.(*jsonrpc.Error); ok {
		we.Data = direct.Data
	}
	if len(we.Message) <= maxErrorMessageBytes && len(we.Data) <= maxErrorDataBytes {
		return resp
	}
	if len(we.Message) > maxErrorMessageBytes {
		we.Message = protocol.CutUTF8(we.Message, maxErrorMessageBytes) + "… (cut: " + itoa(uint64(len(we.Message))) + " bytes)"
	}
	if len(we.Data) > maxErrorDataBytes {
		we.Data = nil
	}
	out := *resp
	out.Error = we
	return &out
}
