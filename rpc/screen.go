package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/sandboxd/sandboxd/internal/jsonscan"
	"github.com/sandboxd/sandboxd/protocol"
)

// Screening: each message is checked here, before any method sees it. A
// message that is not a valid JSON-RPC request or notification gets its
// error response (when it has an id to answer) and the stream moves on.
// The request decoded here is the one the dispatcher handles, params and
// all: there is no second decoding that could disagree with the first.

// request is one screened message. A message that screening refused has
// answer set (or nothing, when it needs no answer) and is not dispatched.
type request struct {
	answer   []byte      // the error response screening wrote for it
	dispatch bool        // set by the reader: screening passed it on
	id       jsonrpc2.ID // valid when hasID
	hasID    bool        // false for a notification
	method   string
	params   json.RawMessage // nil when absent or null
	size     int64           // the message's size, which queueing it costs
}

// envelope is the top level of a message, undecoded. A field that is
// absent is nil; one that is JSON null is "null".
type envelope struct {
	JSONRPC json.RawMessage `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  json.RawMessage `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

// envelopeOf returns the members of the valid JSON object obj that
// JSON-RPC names, matched exactly (encoding/json would match "ID" or
// "Method" too, case-insensitively, the last match winning, so that
// {"method":"stats","Method":"shutdown"} shut the sidecar down). The last
// of repeated members wins, as in encoding/json. Values are copies: obj is
// the framing reader's buffer.
func envelopeOf(obj []byte) envelope {
	var env envelope
	fields := [...]struct {
		name string
		dst  *json.RawMessage
	}{{"jsonrpc", &env.JSONRPC}, {"id", &env.ID}, {"method", &env.Method},
		{"params", &env.Params}, {"result", &env.Result}, {"error", &env.Error}}
	jsonscan.Members(obj, func(key, value []byte) {
		for _, f := range fields {
			if keyIs(key, f.name) {
				*f.dst = append(json.RawMessage(nil), value...)
				return
			}
		}
	})
	return env
}

// keyIs reports whether the JSON string literal key decodes to name.
func keyIs(key []byte, name string) bool {
	if bytes.IndexByte(key, '\\') < 0 {
		return len(key) == len(name)+2 && string(key[1:len(key)-1]) == name
	}
	var s string
	return json.Unmarshal(key, &s) == nil && s == name
}

// screen checks the JSON-RPC envelope of body. It reports whether the
// message should be dispatched; if not, the returned request's answer is
// the error response it is owed (nil if none). The answer is sent in order
// with the responses to the messages before it.
func (s *Server) screen(body []byte) (request, bool) {
	var answered []byte
	send := func(b []byte) { answered = b }
	req, ok := s.screenEnvelope(body, send)
	req.answer = answered
	return req, ok
}

func (s *Server) screenEnvelope(body []byte, send func([]byte)) (request, bool) {
	var env envelope
	trimmed := jsonscan.TrimSpace(body) // not bytes.TrimSpace: "\v{}" is not JSON
	if len(trimmed) > 0 && trimmed[0] == '[' {
		if json.Valid(trimmed) {
			if !s.endHostCallsOfBatch(trimmed) { // answers to host calls end them; a batch of only those is answered nothing
				send(errorBody(nil, CodeInvalidRequest, "batch requests are not supported: send one request per message"))
			}
		} else {
			send(errorBody(nil, CodeParseError, "parse error: the message is not valid JSON"))
		}
		return request{}, false
	}
	if len(trimmed) == 0 || trimmed[0] != '{' {
		switch {
		case json.Valid(trimmed):
			send(errorBody(nil, CodeInvalidRequest, "invalid request: a message must be a JSON object"))
		case s.opts.Framing == FramingNDJSON && bytes.HasPrefix(bytes.ToLower(trimmed), []byte("content-length")):
			send(errorBody(nil, CodeParseError, "parse error: this sidecar reads newline-delimited JSON (--framing=ndjson) but got a Content-Length header: start it with --framing=content-length, or send one JSON message per line"))
		default:
			send(errorBody(nil, CodeParseError, "parse error: the message is not valid JSON"))
		}
		return request{}, false
	}
	if !jsonscan.Valid(trimmed) { // one pass (json.Valid's verdict, faster); the decoding after relies on it
		err := json.Unmarshal(trimmed, &struct{}{}) // only to say what is wrong
		var syn *json.SyntaxError
		if errors.As(err, &syn) && strings.HasSuffix(syn.Error(), "exceeded max depth") {
			if !s.endHostCallTooDeep(trimmed) { // an answer to a host call ends it, unanswered
				send(tooDeepAnswer(trimmed))
			}
			return request{}, false
		}
		if syn != nil && s.endHostCallNotJSON(body, trimmed, syn) { // an answer to a host call ends it, unanswered
			return request{}, false
		}
		send(errorBody(nil, CodeParseError, "parse error: "+err.Error()))
		return request{}, false
	}
	env = envelopeOf(trimmed)
	if env.Method == nil && (env.Result != nil || env.Error != nil) {
		s.routeAnswer(env, int64(len(body))) // a response: answers a host call, never answered itself
		return request{}, false
	}
	if env.Result != nil || env.Error != nil { // with a method: an answer to a host call in flight ends it, unanswered
		if s.endHostCall(env.ID, "the parent's answer to host call %s also has a \"method\" member; an answer has none") {
			return request{}, false
		}
	}
	if env.Method == nil { // neither a request nor an answer: if its id is a waiting host call's, it ends that call, unanswered
		if s.endHostCall(env.ID, "the parent's answer to host call %s has neither a \"result\" nor an \"error\" member") {
			return request{}, false
		}
	}
	req := request{hasID: env.ID != nil, size: int64(len(body))}
	if req.hasID {
		id, ok := parseID(env.ID)
		if !ok {
			send(errorBody(nil, CodeInvalidRequest, "invalid request: id must be a string or an integer in 0..2^63-1"))
			return request{}, false
		}
		req.id = id
	}
	answer := func(code int64, msg string) {
		if req.hasID {
			send(errorBody(env.ID, code, msg))
		} else {
			send(errorBody(nil, code, msg))
		}
	}
	if env.Method == nil {
		answer(CodeInvalidRequest, `invalid request: "method" is missing`)
		return request{}, false
	}
	if m := bytes.TrimSpace(env.Method); len(m) == 0 || m[0] != '"' || json.Unmarshal(m, &req.method) != nil {
		answer(CodeInvalidRequest, `invalid request: "method" must be a string`)
		return request{}, false
	}
	if v := env.JSONRPC; v == nil || string(bytes.TrimSpace(v)) != `"2.0"` {
		answer(CodeInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`)
		return request{}, false
	}
	if p := bytes.TrimSpace(env.Params); env.Params != nil {
		if len(p) == 0 || (p[0] != '{' && p[0] != '[' && string(p) != "null") {
			if req.hasID {
				send(errorBody(env.ID, CodeInvalidParams, "params: must be an object"))
			}
			return request{}, false
		}
		if string(p) != "null" {
			req.params = env.Params
		}
	}
	return req, true
}

// tooDeepAnswer answers a message that is valid JSON up to a member
// nested deeper than the limit. The members before that one are valid (the
// failure path reads them once more): when the id is among them the
// answer carries it, -32602 when the deep member is params, else -32600;
// without an id readable before it, -32700 with id null.
func tooDeepAnswer(msg []byte) []byte {
	var id json.RawMessage
	deep := jsonscan.LeadingMembers(msg, func(key, value []byte) {
		if keyIs(key, "id") {
			id = value
		}
	})
	problem := fmt.Sprintf("nested deeper than %d levels (the limit)", jsonscan.MaxDepth)
	if _, ok := parseID(id); !ok || deep == nil || keyIs(deep, "id") {
		return errorBody(nil, CodeParseError, "parse error: the message is "+problem)
	}
	if keyIs(deep, "params") {
		return errorBody(id, CodeInvalidParams, "params: "+problem)
	}
	return errorBody(id, CodeInvalidRequest, fmt.Sprintf("invalid request: member %s is %s", protocol.Quote(jsonscan.String(deep)), problem))
}

// parseID reads an id by value: any JSON string (escapes decoded, so
// "\u0041" is the id A), or an integer in 0..2^63-1.
func parseID(raw json.RawMessage) (jsonrpc2.ID, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return jsonrpc2.ID{}, false
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return jsonrpc2.ID{}, false
		}
		return jsonrpc2.ID{Str: s, IsString: true}, true
	}
	if raw[0] == '-' {
		return jsonrpc2.ID{}, false
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return jsonrpc2.ID{}, false
	}
	return jsonrpc2.ID{Num: uint64(n)}, true
}

// idKey identifies a request in flight by the value of its id: the string
// 1 and the number 1 are different ids; "\u0041" and "A" are the same.
type idKey struct {
	str   string
	num   uint64
	isStr bool
}

func keyOf(id jsonrpc2.ID) idKey { return idKey{id.Str, id.Num, id.IsString} }

func (k idKey) String() string {
	if k.isStr {
		return protocol.Quote(k.str) // cut and escaped: it is the parent's
	}
	return strconv.FormatUint(k.num, 10)
}
