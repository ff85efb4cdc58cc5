package mcpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/sandboxd/sandboxd/internal/jsonscan"
)

// The transport's own reading and writing of a message's envelope. The
// SDK's jsonrpc.DecodeMessage decodes through a JSON decoder that
// allocates (and zeroes) a 32 KiB buffer per call, twice per request (the
// message, then its method), and jsonrpc.EncodeMessage copies and checks
// again the result the SDK has just encoded: on a small tool call the two
// were most of the bytes the server allocated per call (BenchmarkPing).
// Here the envelope is checked once (jsonscan.Valid) and read member by
// member; params, result and error stay the raw text they were, which
// the SDK decodes where it needs them. What is accepted is what
// DecodeMessage accepts: "jsonrpc": "2.0", an id that is a string or a
// number (checkID has narrowed that to integers), a method that is a
// string (or null: ""), and a message without a method is a response,
// which needs an id.

var errNotJSONRPC = errors.New("not a JSON-RPC 2.0 message")

// decodeMessage reads one message. body is the reader's buffer, which
// the next read reuses: what the message keeps of it is copied.
func decodeMessage(body []byte) (jsonrpc.Message, error) {
	if !jsonscan.Valid(body) || kindOf(trimSpace(body)) != "object" {
		return nil, errNotJSONRPC
	}
	body = bytes.Clone(body) // one copy, of which params and result are slices
	var version, id, method, params, result, wireErr []byte
	jsonscan.Members(body, func(key, value []byte) {
		switch jsonscan.String(key) {
		case "jsonrpc":
			version = value
		case "id":
			id = value
		case "method":
			method = value
		case "params":
			params = value
		case "result":
			result = value
		case "error":
			wireErr = value
		}
	})
	if kindOf(version) != "string" || jsonscan.String(version) != "2.0" {
		return nil, errNotJSONRPC
	}
	var msgID jsonrpc.ID
	if k := kindOf(id); k != "nothing" && k != "null" {
		var ok bool
		if msgID, ok = idOf(id); !ok {
			return nil, errNotJSONRPC
		}
	}
	if method != nil {
		name := ""
		switch kindOf(method) {
		case "string":
			name = jsonscan.String(method)
		case "null":
		default:
			return nil, errNotJSONRPC
		}
		return &jsonrpc.Request{ID: msgID, Method: name, Params: raw(params)}, nil
	}
	if !msgID.IsValid() {
		return nil, errNotJSONRPC
	}
	resp := &jsonrpc.Response{ID: msgID, Result: raw(result)}
	if wireErr != nil && string(wireErr) != "null" {
		we, ok := readWireError(wireErr)
		if !ok {
			return nil, errNotJSONRPC
		}
		resp.Error = we
	}
	return resp, nil
}

// idOf is an id (a string or a number) as the SDK reads it: a number
// through a float64 (checkID refuses the numbers that would change).
func idOf(v []byte) (jsonrpc.ID, bool) {
	var value any
	switch kindOf(v) {
	case "string":
		value = jsonscan.String(v)
	case "number":
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return jsonrpc.ID{}, false
		}
		value = f
	default:
		return jsonrpc.ID{}, false
	}
	id, err := jsonrpc.MakeID(value)
	return id, err == nil
}

// readWireError reads an error object by its exact member names (as the
// SDK does, where encoding/json would take "Code" for "code").
func readWireError(v []byte) (*jsonrpc.Error, bool) {
	if kindOf(v) != "object" {
		return nil, false
	}
	we, ok := &jsonrpc.Error{}, true
	jsonscan.Members(v, func(key, value []byte) {
		switch jsonscan.String(key) {
		case "code":
			if kindOf(value) == "null" {
				return
			}
			n, err := strconv.ParseInt(string(value), 10, 64)
			we.Code, ok = n, ok && err == nil
		case "message":
			switch kindOf(value) {
			case "string":
				we.Message = jsonscan.String(value)
			case "null":
			default:
				ok = false
			}
		case "data":
			we.Data = raw(value)
		}
	})
	return we, ok
}

// raw is a member's value as the SDK expects it: nil when absent.
func raw(v []byte) json.RawMessage {
	if v == nil {
		return nil
	}
	return json.RawMessage(v)
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n') {
		b = b[1:]
	}
	return b
}

// encodeMessage writes msg as one line. A response's result (the SDK
// encoded it: valid JSON) and a request's params are copied as they are;
// an error response goes through the SDK's encoder.
func encodeMessage(msg jsonrpc.Message) ([]byte, error) {
	parts, err := encodeParts(msg)
	if err != nil || parts[1] == nil {
		return parts[0], err
	}
	return append(append(append(make([]byte, 0, len(parts[0])+len(parts[1])+len(parts[2])), parts[0]...), parts[1]...), parts[2]...), nil
}

// bigBody is the size of a result or params from which a message is
// written in three pieces (encodeParts) rather than copied into one: a
// tool's answer of megabytes of output is then not copied once more.
const bigBody = 64 << 10

// encodeParts is msg's line as its head, its result or params (the
// SDK's bytes, not copied; nil when the head is the whole line) and the
// rest.
func encodeParts(msg jsonrpc.Message) (parts [3][]byte, err error) {
	var body json.RawMessage
	var head string
	var id jsonrpc.ID
	switch m := msg.(type) {
	case *jsonrpc.Response:
		if m.Error != nil || m.Result == nil {
			parts[0], err = encodeBySDK(msg)
			return parts, err
		}
		id, head, body = m.ID, `,"result":`, m.Result
	case *jsonrpc.Request:
		id, body = m.ID, m.Params
		name, err := json.Marshal(m.Method)
		if err != nil {
			return parts, err
		}
		head = `,"method":` + string(name)
		if body != nil {
			head += `,"params":`
		}
	default:
		parts[0], err = encodeBySDK(msg)
		return parts, err
	}
	out := make([]byte, 0, len(head)+48)
	out = append(out, `{"jsonrpc":"2.0"`...)
	if id.IsValid() {
		out = append(out, `,"id":`...)
		switch v := id.Raw().(type) {
		case int64:
			out = strconv.AppendInt(out, v, 10)
		case string:
			s, err := json.Marshal(v)
			if err != nil {
				return parts, err
			}
			out = append(out, s...)
		}
	}
	out = append(out, head...)
	if len(body) < bigBody {
		out = append(append(out, body...), '}', '\n')
		parts[0] = out
		return parts, nil
	}
	return [3][]byte{out, body, []byte("}\n")}, nil
}

func encodeBySDK(msg jsonrpc.Message) ([]byte, error) {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}
