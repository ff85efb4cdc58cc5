package rpc

import (
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/jsonscan"
)

// nested is n arrays, one inside the other.
func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// TestScreenTooDeep: a message nested past the parser's limit is answered
// with the id it carried before the deep member (naming the limit), and
// -32700 with id null only when no id could be read before it.
func TestScreenTooDeep(t *testing.T) {
	deep := nested(jsonscan.MaxDepth) // with the envelope: one level past the limit
	cases := []struct {
		name, body, id string
		code           int64
		msg            string
	}{
		{"deep params", `{"jsonrpc":"2.0","id":7,"method":"run","params":` + deep + `}`,
			"7", CodeInvalidParams, "params: nested deeper than 10000 levels (the limit)"},
		{"deep other member", `{"jsonrpc":"2.0","id":"a","method":"run","x":{"y":` + nested(jsonscan.MaxDepth-1) + `}}`,
			`"a"`, CodeInvalidRequest, `invalid request: member "x" is nested deeper than 10000 levels (the limit)`},
		{"id after the deep member", `{"jsonrpc":"2.0","method":"run","params":` + deep + `,"id":7}`,
			"null", CodeParseError, "parse error: the message is nested deeper than 10000 levels (the limit)"},
		{"a deep id", `{"jsonrpc":"2.0","method":"run","id":` + deep + `}`,
			"null", CodeParseError, "parse error: the message is nested deeper than 10000 levels (the limit)"},
		{"no id", `{"jsonrpc":"2.0","method":"run","params":` + deep + `}`,
			"null", CodeParseError, "parse error: the message is nested deeper than 10000 levels (the limit)"},
		{"a bad id", `{"jsonrpc":"2.0","id":-1,"method":"run","params":` + deep + `}`,
			"null", CodeParseError, "parse error: the message is nested deeper than 10000 levels (the limit)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			passed, msgs := screenOne(t, []byte(c.body))
			if passed || len(msgs) != 1 || msgs[0].Error == nil {
				t.Fatalf("passed %v, answers %+v", passed, msgs)
			}
			if m := msgs[0]; m.id() != c.id || m.Error.Code != c.code || m.Error.Message != c.msg {
				t.Fatalf("answer id %s, %d %q; want id %s, %d %q", m.id(), m.Error.Code, m.Error.Message, c.id, c.code, c.msg)
			}
		})
	}
	// At the limit the message is valid and passes on.
	if passed, msgs := screenOne(t, []byte(`{"jsonrpc":"2.0","id":7,"method":"run","params":[`+nested(jsonscan.MaxDepth-2)+`]}`)); !passed || len(msgs) != 0 {
		t.Fatalf("at the limit: passed %v, answers %+v", passed, msgs)
	}
	// A syntax error before the deep member is still a parse error.
	if _, msgs := screenOne(t, []byte(`{"jsonrpc":"2.0","id":7,"method":run,"params":`+deep+`}`)); len(msgs) != 1 || msgs[0].Error.Code != CodeParseError || msgs[0].id() != "null" {
		t.Fatalf("a syntax error first: %+v", msgs)
	}
}
