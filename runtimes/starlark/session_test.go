package starlark_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/runtimes/starlark"
)

func ExampleSession() {
	s := starlark.New(os.Stdout)
	s.Eval("def greet(name):\n    print('hello', name)\n    return len(name)", nil)
	v, _ := s.Eval("greet(input['name'])", []byte(`{"name": "Ada"}`))
	fmt.Println(string(v))
	_, err := s.Eval("greet(None)", nil)
	fmt.Println(err.Message, "at line", err.Line)
	// Output:
	// hello Ada
	// 3
	// hello None
	// Error in len: len: value of type NoneType has no len at line 3
}

func TestRecursionIsAnError(t *testing.T) {
	s := starlark.New(nil)
	_, err := s.Eval("def f(n):\n    return f(n + 1)\nf(0)", nil)
	if err == nil || err.Message != "Error: function f called recursively" {
		t.Fatalf("%v", err)
	}
}

func TestSessionsShareNothing(t *testing.T) {
	a, b := starlark.New(nil), starlark.New(nil)
	if _, err := a.Eval("shared = 1", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Eval("shared", nil); err == nil || err.Message != "snippet:1:1: undefined: shared" {
		t.Fatalf("the second session: %v", err)
	}
}

func TestErrorTextsAreBounded(t *testing.T) {
	s := starlark.New(nil)
	_, err := s.Eval("fail('x' * 1000000)", nil)
	if err == nil || len(err.Message) > 1024 || len(err.Text) > 4096 || !strings.HasPrefix(err.Message, "Error in fail: fail: xxx") {
		t.Fatalf("%d-byte message, %d-byte text", len(err.Message), len(err.Text))
	}
}
