package lua_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/runtimes/lua"
)

func ExampleSession() {
	s := lua.New(os.Stdout)
	s.Eval("function greet(name) print('hello', name) return #name end", nil)
	v, _ := s.Eval("greet(input.name)", []byte(`{"name": "Ada"}`))
	fmt.Println(string(v))
	_, err := s.Eval("greet()", nil)
	fmt.Println(err.Message)
	// Output:
	// hello	Ada
	// 3
	// hello	nil
	// snippet:1: __len undefined
}

// Recursion through Lua and through Go functions ends as the Lua error
// "stack overflow", a script error that leaves the session usable.
func TestDeepRecursion(t *testing.T) {
	s := lua.New(nil)
	for _, code := range []string{
		"function f(n) return 1 + f(n + 1) end return f(0)",
		"function c(a, b) table.sort({3, 2, 1}, c) return a < b end table.sort({3, 2, 1}, c)",
		"function r() return (string.gsub('x', 'x', r)) end return r()",
		"local t = setmetatable({}, {}) getmetatable(t).__index = function(t, k) return t[k] end return t.x",
		"local t t = setmetatable({}, {__tostring = function() return tostring(t) end}) return tostring(t)",
	} {
		_, err := s.Eval(code, nil)
		if err == nil || !strings.HasSuffix(err.Message, "stack overflow") {
			t.Errorf("%s: %v, want stack overflow", code, err)
		}
	}
	// Through pcall, the innermost call catches it (rethrowing it at every
	// level would be quadratic: each catch builds a traceback).
	v, err := s.Eval("function f(n) local ok, e = pcall(f, n + 1) return e end return f(0)", nil)
	if err != nil || string(v) != `"snippet:1: stack overflow"` {
		t.Errorf("through pcall: %s, %v", v, err)
	}
	if v, err := s.Eval("'still usable'", nil); err != nil || string(v) != `"still usable"` {
		t.Fatalf("after the overflows: %s, %v", v, err)
	}
}

func TestSessionsShareNothing(t *testing.T) {
	a, b := lua.New(nil), lua.New(nil)
	if _, err := a.Eval("shared = 1 string.polluted = true", nil); err != nil {
		t.Fatal(err)
	}
	v, err := b.Eval("{shared == nil, string.polluted == nil}", nil)
	if err != nil || string(v) != `[true,true]` {
		t.Fatalf("the second session sees %s, %v", v, err)
	}
}

func TestErrorTextsAreBounded(t *testing.T) {
	s := lua.New(nil)
	_, err := s.Eval("error(string.rep('x', 1e6))", nil)
	if err == nil || len(err.Message) > 1024 || len(err.Text) > 4096 || !strings.HasPrefix(err.Message, "snippet:1: xxx") {
		t.Fatalf("%d-byte message, %d-byte text", len(err.Message), len(err.Text))
	}
}

// A strict mode that refuses new globals (a __newindex on _G) does not
// stop the runtime from setting input, even once a null input has left
// no input in _G.
func TestStrictGlobalsKeepInput(t *testing.T) {
	s := lua.New(nil)
	steps := []struct{ code, input, want string }{
		{"setmetatable(_G, {__newindex = function(t, k) error('undeclared global ' .. k, 2) end}) return 1", "null", "1"},
		{"return input", "5", "5"},
		{"return input", "null", "null"},
		{"return input", `{"a": 1}`, `{"a":1}`},
	}
	for _, st := range steps {
		if v, err := s.Eval(st.code, []byte(st.input)); err != nil || string(v) != st.want {
			t.Fatalf("%s with input %s: %s, %+v", st.code, st.input, v, err)
		}
	}
	if _, err := s.Eval("x = 1", nil); err == nil || err.Fatal || !strings.Contains(err.Message, "undeclared global x") {
		t.Fatalf("the snippet's strict mode: %+v", err)
	}
}

// TestMathRandom: math.random draws from the session's own source with
// gopher-lua's ranges, math.randomseed makes a sequence repeatable, an
// empty interval is a script error, and two sessions differ.
func TestMathRandom(t *testing.T) {
	s := lua.New(nil)
	v, err := s.Eval(`
local ok = true
for i = 1, 2000 do
  local f, a, b = math.random(), math.random(3), math.random(-2, 2)
  ok = ok and f >= 0 and f < 1 and a >= 1 and a <= 3 and a == math.floor(a) and b >= -2 and b <= 2
end
return ok`, nil)
	if err != nil || string(v) != "true" {
		t.Fatalf("ranges: %s, %v", v, err)
	}
	seq := `math.randomseed(42) local a = {} for i = 1, 5 do a[i] = math.random(1000) end return table.concat(a, ",")`
	first, err := s.Eval(seq, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := lua.New(nil).Eval(seq, nil); string(again) != string(first) {
		t.Fatalf("math.randomseed(42) gave %s, then %s", first, again)
	}
	if _, err := s.Eval("return math.random(5, 1)", nil); err == nil || !strings.Contains(err.Message, "interval is empty") {
		t.Fatalf("an empty interval: %v", err)
	}
	draw := `return math.random(1000000000)`
	a, _ := lua.New(nil).Eval(draw, nil)
	b, _ := lua.New(nil).Eval(draw, nil)
	if string(a) == string(b) {
		t.Fatalf("two sessions drew the same %s", a)
	}
}
