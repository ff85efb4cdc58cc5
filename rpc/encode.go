package rpc

import (
	"encoding/json"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/sandboxd/sandboxd/protocol"
)

// responseBody encodes a response in one pass.
func responseBody(id jsonrpc2.ID, result any, rerr *jsonrpc2.Error) ([]byte, error) {
	idJSON, err := id.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var payload []byte
	key := `,"result":`
	if rerr != nil {
		key = `,"error":`
		payload, err = json.Marshal(rerr)
	} else {
		payload, err = json.Marshal(result)
	}
	if err != nil {
		return nil, err
	}
	body := make([]byte, 0, len(payload)+len(idJSON)+32)
	body = append(body, `{"jsonrpc":"2.0","id":`...)
	body = append(body, idJSON...)
	body = append(body, key...)
	body = append(body, payload...)
	return append(body, '}'), nil
}

// errorMessage is an error response to a message that never reached a
// method (unparsable, oversized, an invalid envelope).
type errorMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// errorBody encodes an error response to the raw id (nil: null).
func errorBody(id json.RawMessage, code int64, msg string) []byte {
	m := errorMessage{JSONRPC: "2.0", ID: id}
	if m.ID == nil {
		m.ID = json.RawMessage("null")
	}
	m.Error.Code, m.Error.Message = code, msg
	b, _ := json.Marshal(m)
	return b
}

// encodeResponse is responseBody that cannot fail: an encoding error
// becomes an internal error response.
func (s *Server) encodeResponse(id jsonrpc2.ID, result any, rerr *jsonrpc2.Error) []byte {
	body, err := responseBody(id, result, rerr)
	if err != nil {
		s.log.Error("encoding a response", "error", err)
		body, _ = responseBody(id, nil, protocolError(CodeInternalError, "internal error: %v", err))
	}
	return body
}

// reply queues the response to a request that was not admitted as a job
// (initialize, stats, refusals). It never blocks.
func (s *Server) reply(id jsonrpc2.ID, result any, rerr *jsonrpc2.Error) {
	s.out.send(s.encodeResponse(id, result, rerr))
}

type logNotification struct {
	JSONRPC string             `json:"jsonrpc"`
	Method  string             `json:"method"`
	Params  protocol.LogParams `json:"params"`
}

// logWire is what a run's log notifications may still take on the wire.
// The engine charges each line for a request id of at most 32 encoded
// bytes (sandbox.LogLineOverhead); a longer id is copied into every
// notification, so a 100 KB id made a 1 MiB logBytes worth 800 MB on the
// wire and in the outbox. The sidecar, which knows the id, charges every
// notification its framed size against logBytes as well: the first that
// does not fit is dropped with every later one (the log stays a prefix),
// and the result says logTruncated.
type logWire struct {
	left    uint64
	sent    int // notifications queued; also the next seq
	dropped bool
}

// notifyLog queues one log notification of a run, if it fits the run's
// wire budget. It never blocks.
func (s *Server) notifyLog(id jsonrpc2.ID, w *logWire, level, line string) {
	if w.dropped {
		return
	}
	body, err := json.Marshal(logNotification{JSONRPC: "2.0", Method: NotifyLog, Params: protocol.LogParams{ID: id, Seq: w.sent, Line: line, Level: level}})
	if err != nil {
		s.log.Error("encoding a log notification", "error", err)
		return
	}
	cost := uint64(s.out.cost(body))
	if cost > w.left {
		w.dropped = true
		return
	}
	w.left -= cost
	w.sent++
	s.out.send(body)
}
