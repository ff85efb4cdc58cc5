package rpc

import (
	"encoding/json"
	"strconv"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/sandboxd/sandboxd/protocol"
)

// responseBody encodes a response in one pass.
func responseBody(id jsonrpc2.ID, result any, rerr *jsonrpc2.Error) ([]byte, error) {
	idJSON, err := id.MarshalJSON()
	if err != nil {
		return nil, err
	}
	head := func(b []byte, key string) []byte {
		b = append(b, `{"jsonrpc":"2.0","id":`...)
		b = append(b, idJSON...)
		return append(b, key...)
	}
	if rerr == nil {
		// A plain run's or call's result is written straight after the
		// head, in one buffer, without reflection.
		if body, ok := appendPlainResult(head(make([]byte, 0, 320), `,"result":`), result); ok {
			return append(body, '}'), nil
		}
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
	body := head(make([]byte, 0, len(payload)+len(idJSON)+32), key)
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
	s.out.sendSoon(body)
}

// appendPlainResult appends the JSON of the result of a plain run or call
// (values and counters: no output, no WASI streams, no plugin output),
// the bytes json.Marshal would write, without reflection; false for any
// other result, which json.Marshal encodes. TestPlainResultEncoding
// holds the two to the same bytes.
func appendPlainResult(b []byte, result any) ([]byte, bool) {
	switch r := result.(type) {
	case *protocol.RunResult:
		if r.Output != nil || r.WASIResult != nil || r.LogDropped != 0 || !marshalsAsIs(r.ModuleID) || !plainValues(r.Values) {
			return nil, false
		}
		b = appendValues(append(b, `{"values":`...), r.Values)
		b = appendCounters(b, r.FuelConsumed, r.PeakMemoryBytes, r.ElapsedMicros, r.QueuedMicros)
		b = append(append(append(b, `,"moduleId":"`...), r.ModuleID...), '"')
		return appendLog(b, r.LogLines, r.LogTruncated), true
	case *protocol.CallResult:
		if r.Output != nil || r.OutputTruncated != nil || r.ExitCode != nil || r.Stdout != nil || r.Stderr != nil || r.LogDropped != 0 ||
			!plainValues(r.Values) {
			return nil, false
		}
		b = appendValues(append(b, `{"values":`...), r.Values)
		b = appendCounters(b, r.FuelConsumed, r.PeakMemoryBytes, r.ElapsedMicros, r.QueuedMicros)
		return appendLog(b, r.LogLines, r.LogTruncated), true
	}
	return nil, false
}

func appendValues(b []byte, vs []protocol.WireValue) []byte {
	if vs == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(append(append(b, `{"type":"`...), v.Type...), `","value":`...)
		b = append(b, v.Value...)
		if v.Bits != "" {
			b = append(append(append(b, `,"bits":"`...), v.Bits...), '"')
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

func appendCounters(b []byte, fuel, peak uint64, elapsed, queued int64) []byte {
	b = strconv.AppendUint(append(b, `,"fuelConsumed":`...), fuel, 10)
	b = strconv.AppendUint(append(b, `,"peakMemoryBytes":`...), peak, 10)
	b = strconv.AppendInt(append(b, `,"elapsedMicros":`...), elapsed, 10)
	return strconv.AppendInt(append(b, `,"queuedMicros":`...), queued, 10)
}

func appendLog(b []byte, lines int, truncated bool) []byte {
	b = strconv.AppendInt(append(b, `,"logLines":`...), int64(lines), 10)
	return append(strconv.AppendBool(append(b, `,"logTruncated":`...), truncated), '}')
}

// plainValues reports whether values can be appended as they are: types
// and bits plain strings, each value a compact number or plain string
// (what EncodeValue writes).
func plainValues(vs []protocol.WireValue) bool {
	for _, v := range vs {
		if !marshalsAsIs(v.Type) || !marshalsAsIs(v.Bits) || len(v.Value) == 0 {
			return false
		}
		val := v.Value
		if val[0] == '"' {
			if len(val) < 2 || val[len(val)-1] != '"' || !marshalsAsIs(string(val[1:len(val)-1])) {
				return false
			}
			continue
		}
		if last := val[len(val)-1]; !(val[0] == '-' || val[0] >= '0' && val[0] <= '9') || last < '0' || last > '9' {
			return false
		}
		for _, c := range val {
			if !(c >= '0' && c <= '9' || c == '-' || c == '.' || c == 'e' || c == 'E' || c == '+') {
				return false
			}
		}
	}
	return true
}

// marshalsAsIs reports whether json.Marshal writes s between quotes
// unchanged: printable ASCII without the characters it escapes.
func marshalsAsIs(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
