package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/internal/framing"
	"github.com/sandboxd/sandboxd/internal/jsonscan"
	"github.com/sandboxd/sandboxd/protocol"
)

// Answers to host calls (hostcall.go), on the reader: routed to the call
// waiting for them, or, when the sidecar cannot read them as answers (too
// large, nested too deep, carrying a method), ending that call with the
// problem when their id says which; dropped, counted and logged when no
// call waits for them.

// routeAnswer takes a response the parent sent (an answer to a host
// call) to its call, on the reader: it never blocks. Anything else (an
// id the sidecar never sent, an answer to a call answered or given up
// already) is dropped, counted and logged.
func (s *Server) routeAnswer(env envelope, size int64) {
	id, ok := parseID(env.ID)
	a := hostAnswer{size: size}
	switch {
	case env.JSONRPC == nil || string(bytes.TrimSpace(env.JSONRPC)) != `"2.0"`:
		a.problem = fmt.Sprintf(`the parent's answer to host call %s does not say "jsonrpc": "2.0"`, protocol.Escape(id.Str))
	case env.Error != nil && !isNull(env.Error) && env.Result != nil:
		a.problem = "the parent's answer has both a result and an error"
	case env.Error != nil && !isNull(env.Error):
		a.rerr = env.Error
	default:
		a.result = env.Result
	}
	if ok && id.IsString && s.hosts.deliver(id.Str, a) {
		return
	}
	if !ok || !id.IsString {
		s.hosts.countUnexpected()
	}
	s.logDroppedAnswer("dropping an answer to no host call in flight (never sent, answered already, or given up)", env.ID)
}

// maxDroppedAnswersLogged bounds the stderr lines about answers dropped:
// a parent can send any number (stats count them all).
const maxDroppedAnswersLogged = 10

// logDroppedAnswer logs a dropped answer, the first
// maxDroppedAnswersLogged of them, then once that no more are logged. The
// id is cut and left to the log's own quoting (escaped once).
func (s *Server) logDroppedAnswer(msg string, id json.RawMessage) {
	h := s.hosts
	h.mu.Lock()
	h.dropsLogged++
	n := h.dropsLogged
	h.mu.Unlock()
	switch {
	case n <= maxDroppedAnswersLogged:
		shown := protocol.CutUTF8(string(id), protocol.MaxQuotedBytes)
		if len(shown) < len(id) {
			shown += "…"
		}
		s.log.Warn(msg, "id", shown)
	case n == maxDroppedAnswersLogged+1:
		s.log.Warn(fmt.Sprintf("more than %d answers to no host call in flight: no more are logged (stats count them: hostCalls.unexpected)", maxDroppedAnswersLogged))
	}
}

// countUnexpected counts an answer to an id that cannot be a host call's.
func (h *hostCalls) countUnexpected() {
	h.mu.Lock()
	h.unexpected++
	h.mu.Unlock()
}

// answeredCall reads, in the members at the start of msg that are valid
// JSON (all of them when msg is valid; before the fault when it is not,
// or before the cut of a message too large to read), the id of the host
// call msg answers: msg must show a result or an error member (readable or
// the one at the fault) and no method member, and its id must be a string
// read before any fault, not the member at it. Host-call ids are the
// sidecar's own ("sbx-N"): a message that shows a method is the parent's
// request, which never ends a host call however it is broken, even with
// an id equal to one.
func answeredCall(msg []byte) (string, bool) {
	var id json.RawMessage
	isAnswer, isRequest := false, false
	look := func(key []byte) {
		switch {
		case keyIs(key, "result"), keyIs(key, "error"):
			isAnswer = true
		case keyIs(key, "method"):
			isRequest = true
		}
	}
	cut := jsonscan.LeadingMembers(msg, func(key, value []byte) {
		if keyIs(key, "id") {
			id = value
		}
		look(key)
	})
	look(cut)
	hid, ok := parseID(id)
	if !isAnswer || isRequest || !ok || !hid.IsString || keyIs(cut, "id") {
		return "", false
	}
	return hid.Str, true
}

// refuseAnswer ends the host call that a message too large to read
// answered, when the start of the message says which (answeredCall: its
// id, and a result or an error, among its leading members, where clients
// write them), and reports whether it did. The message is skipped unread,
// answered nothing.
func (s *Server) refuseAnswer(big *framing.TooLargeError) bool {
	hid, ok := answeredCall(big.Head)
	if !ok {
		return false
	}
	size := "longer than"
	if big.Size >= 0 {
		size = strconv.FormatInt(big.Size, 10) + " bytes, more than"
	}
	a := hostAnswer{problem: fmt.Sprintf("the parent's answer to host call %s is %s --max-message-bytes (%d); it was not read",
		protocol.Escape(hid), size, big.Max)}
	if s.hosts.deliver(hid, a) {
		return true
	}
	s.logDroppedAnswer("dropping an answer too large to read, to no host call in flight", json.RawMessage(strconv.Quote(hid)))
	return true
}

// maxNotJSONExcerpt bounds the excerpt of an answer that is not JSON
// that the error of its call quotes, from the byte at fault on.
const maxNotJSONExcerpt = 16

// endHostCallNotJSON ends the host call that body, a message that is not
// JSON (syn says why and where in trimmed, body without the whitespace
// around it), answers, when answeredCall finds which and that call waits,
// and reports whether it did: the call's error says the answer was not
// JSON, what is wrong, at which byte of body, and quotes a few bytes from
// there. Nothing is sent back for such a message.
func (s *Server) endHostCallNotJSON(body, trimmed []byte, syn *json.SyntaxError) bool {
	hid, ok := answeredCall(trimmed)
	if !ok || !s.hosts.inFlight(hid) {
		return false
	}
	lead := 0 // the whitespace before trimmed
	for lead < len(body) && strings.IndexByte(" \t\n\r", body[lead]) >= 0 {
		lead++
	}
	where := "at its end"
	if at := int(syn.Offset) - 1; syn.Offset > 0 && at < len(trimmed) && !strings.HasPrefix(syn.Error(), "unexpected end") {
		rest := trimmed[at:]
		excerpt := protocol.QuoteN(string(rest[:min(len(rest), maxNotJSONExcerpt+1)]), maxNotJSONExcerpt) // one byte past the bound: QuoteN marks the cut
		where = fmt.Sprintf("at byte %d (%s)", lead+at, excerpt)
	}
	return s.hosts.deliver(hid, hostAnswer{problem: fmt.Sprintf("the parent's answer to host call %s is not JSON: %s %s",
		protocol.Escape(hid), syn.Error(), where)})
}

// endHostCall ends the host call in flight under id, if any, with the
// problem (a format taking the call's escaped id) instead of an answer,
// and reports whether it did: for a message meant as its answer that the
// sidecar cannot read as one. Nothing is sent back for such a message.
func (s *Server) endHostCall(id json.RawMessage, problem string) bool {
	hid, ok := parseID(id)
	if !ok || !hid.IsString || !s.hosts.inFlight(hid.Str) {
		return false
	}
	return s.hosts.deliver(hid.Str, hostAnswer{problem: fmt.Sprintf(problem, protocol.Escape(hid.Str))})
}

// endHostCallsOfBatch ends the host calls that the members of batch, a
// JSON array (valid), answer: each object without a method whose id is a
// host call's in flight ends that call (answers are read one per message,
// as requests are). It reports whether every member did: a batch with
// anything else in it is refused as any batch is.
func (s *Server) endHostCallsOfBatch(batch []byte) bool {
	elems := jsonscan.Elements(batch)
	all := len(elems) > 0
	for _, elem := range elems {
		if elem = jsonscan.TrimSpace(elem); len(elem) == 0 || elem[0] != '{' {
			all = false
			continue
		}
		env := envelopeOf(elem)
		if env.Method != nil || !s.endHostCall(env.ID, "the parent's answer to host call %s came in a batch; send each answer as a message of its own") {
			all = false
		}
	}
	return all
}

// endHostCallTooDeep ends the host call that msg, valid JSON up to a
// member nested deeper than the limit, answers: an object without a
// method whose id, among the members before the deep one, is a host
// call's in flight.
func (s *Server) endHostCallTooDeep(msg []byte) bool {
	var id json.RawMessage
	isRequest := false
	jsonscan.LeadingMembers(msg, func(key, value []byte) {
		switch {
		case keyIs(key, "id"):
			id = value
		case keyIs(key, "method"):
			isRequest = true
		}
	})
	return !isRequest && s.endHostCall(id, fmt.Sprintf("the parent's answer to host call %%s is nested deeper than %d levels (the limit)", jsonscan.MaxDepth))
}

// inFlight reports whether host call id waits for its answer.
func (h *hostCalls) inFlight(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pending[id] != nil
}

// maxHostErrorMessage bounds the parent's error message a run's error
// carries.
const maxHostErrorMessage = 16 << 10

// decodeHostAnswer reads an answer for the declaration fn: the parent's
// error answer is a *protocol.HostCallError with its code and message; a
// result is {"values": [...]}, read by the declaration's result types.
// An answer that does not fit is an error saying exactly what is wrong
// (the engine reports both as host_function_error naming the function).
func decodeHostAnswer(fn protocol.HostFunction, a hostAnswer) ([]protocol.HostValue, error) {
	wrong := func(format string, args ...any) error { return fmt.Errorf(format, args...) }
	switch {
	case a.problem != "":
		return nil, errors.New(a.problem)
	case a.rerr != nil:
		// Read by its shape, exact names only, as every object the parent
		// sends ({"Code": 0, "messAge": ""} is not an error object).
		var m members
		var code int64
		var message string
		err := hostErrorShape.read(a.rerr, &m)
		if err == nil && (m.values[hostErrorCode] == nil || m.values[hostErrorMessage] == nil ||
			json.Unmarshal(m.values[hostErrorCode], &code) != nil) {
			err = errors.New("code and message are required")
		}
		if err == nil {
			message, err = stringField(m.values[hostErrorMessage], "error.message")
		}
		if err != nil {
			return nil, wrong(`the parent answered with an error that is not a JSON-RPC error object ({"code": integer, "message": string}): %v`, err)
		}
		return nil, &protocol.HostCallError{Code: code, Message: protocol.CutUTF8(message, maxHostErrorMessage)}
	}
	returns := fn.ResultTypes()
	var m members
	if a.result == nil || isNull(a.result) {
		a.result = json.RawMessage("{}") // no values
	}
	if err := hostAnswerShape.read(a.result, &m); err != nil {
		return nil, wrong(`the parent's answer: %v; an answer is {"values": [...]}`, err)
	}
	var raw []json.RawMessage
	if v := bytes.TrimSpace(m.values[0]); v != nil {
		if v[0] != '[' {
			return nil, wrong("the parent's answer: values must be an array, got %s", kindOfJSON(v))
		}
		if n, ok := countElements(v, len(fn.Results)+1); !ok || n != len(fn.Results) {
			if !ok {
				return nil, wrong("the parent answered with more than %d values; it returns %s", len(fn.Results), returns)
			}
			return nil, wrong("the parent answered with %d values; it returns %s", n, returns)
		}
		raw = jsonscan.Elements(v)
	} else if len(fn.Results) > 0 {
		return nil, wrong("the parent answered with no values; it returns %s", returns)
	}
	values := make([]protocol.HostValue, len(raw))
	for i, r := range raw {
		v, err := protocol.DecodeHostValue(r, protocol.ValType(fn.Results[i]))
		if err != nil {
			var te *protocol.HostTypeError
			if errors.As(err, &te) {
				return nil, wrong("the parent's value %d is %s; it returns %s there", i, protocol.DescribeType(te.Got), fn.Results[i])
			}
			return nil, wrong("the parent's value %d: %v (it returns %s there)", i, err, fn.Results[i])
		}
		values[i] = v
	}
	return values, nil
}
