package rpc

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/protocol"
)

// FuzzHostAnswer: whatever the parent answers a host call with (a result
// or an error object, any valid JSON: the reader screens the rest), reading
// it by the declaration never panics; an answer taken has exactly the
// declared results, each of its type, and a refusal says what is wrong in
// a bounded message.
func FuzzHostAnswer(f *testing.F) {
	for _, s := range []struct {
		answer string
		types  byte
		isErr  bool
	}{
		{`{"values":[{"type":"i32","value":7}]}`, 0, false},
		{`{"values":[{"type":"bytes","value":{"base64":"AAE="}},{"type":"f64","value":1.5}]}`, 0x34, false},
		{`{"values":[]}`, 0xff, false},
		{`null`, 0, false},
		{`{"values":[1e199999999]}`, 1, false},
		{`{"code":-32000,"message":"no"}`, 0, true},
		{`{"code":1.5,"message":7}`, 0, true},
	} {
		f.Add([]byte(s.answer), s.types, s.isErr)
	}
	types := []string{"i32", "i64", "f32", "f64", "bytes"}
	f.Fuzz(func(t *testing.T, answer []byte, results byte, isErr bool) {
		if !json.Valid(answer) {
			return
		}
		// results: its low 2 bits the count (0..3), 2 bits each the types
		// (the second result's shifted by one, so all five occur).
		fn := protocol.HostFunction{Module: "env", Name: "f"}
		for i := range int(results & 3) {
			fn.Results = append(fn.Results, types[int(results>>(2+2*i))&3+i%2])
		}
		a := hostAnswer{result: answer}
		if isErr {
			a = hostAnswer{rerr: answer}
		}
		values, err := decodeHostAnswer(fn, a)
		var parents *protocol.HostCallError
		if errors.As(err, &parents) { // the parent's own message, maybe empty: the engine quotes it
			if len(parents.Message) > maxHostErrorMessage {
				t.Fatalf("%q: the parent's message kept %d bytes", answer, len(parents.Message))
			}
			return
		}
		if err != nil {
			if n := len(err.Error()); n == 0 || n > maxHostErrorMessage+4096 {
				t.Fatalf("%q for %v: a %d-byte error", answer, fn.Results, n)
			}
			return
		}
		if isErr {
			t.Fatalf("an error answer %q was taken as values %v", answer, values)
		}
		if len(values) != len(fn.Results) {
			t.Fatalf("%q: %d values for %v", answer, len(values), fn.Results)
		}
		for i, v := range values {
			if string(v.Type) != fn.Results[i] {
				t.Fatalf("%q: value %d is %s, declared %s", answer, i, v.Type, fn.Results[i])
			}
		}
	})
}

// TestHostErrorAnswerIsReadByExactNames: the parent's error answer is a
// JSON-RPC error object read as every object it sends is, by exact
// member names (FuzzHostAnswer found {"Code":0,"messAge":""} taken as
// one); its message is kept, cut at maxHostErrorMessage.
func TestHostErrorAnswerIsReadByExactNames(t *testing.T) {
	fn := protocol.HostFunction{Module: "env", Name: "f", Results: []string{"i32"}}
	for answer, want := range map[string]string{
		`{"code":-32000,"message":"no key 9"}`:           "",
		`{"code":1,"message":"","data":{"any":"thing"}}`: "",
		`{"Code":0,"messAge":""}`:                        `unknown field`,
		`{"code":1.5,"message":"x"}`:                     "code and message are required",
		`{"code":1}`:                                     "code and message are required",
		`{"code":1,"message":7}`:                         "message",
		`[]`:                                             "must be an object",
	} {
		_, err := decodeHostAnswer(fn, hostAnswer{rerr: json.RawMessage(answer)})
		var parents *protocol.HostCallError
		switch {
		case want == "" && !errors.As(err, &parents):
			t.Errorf("%s: %v, want the parent's error", answer, err)
		case want != "" && (err == nil || errors.As(err, &parents) || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want an error saying %q", answer, err, want)
		}
	}
	big := strings.Repeat("é", maxHostErrorMessage)
	_, err := decodeHostAnswer(fn, hostAnswer{rerr: json.RawMessage(`{"code":1,"message":"` + big + `"}`)})
	var parents *protocol.HostCallError
	if !errors.As(err, &parents) || len(parents.Message) > maxHostErrorMessage || !utf8.ValidString(parents.Message) {
		t.Fatalf("a long message: %v", err)
	}
}
