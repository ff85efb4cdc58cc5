package js_test

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/runtimes/js"
)

func ExampleSession() {
	s := js.New(os.Stdout, os.Stderr)
	s.Eval("function greet(name) { console.log('hello', name); return name.length }", nil)
	v, _ := s.Eval("greet(input.name)", []byte(`{"name": "Ada"}`))
	fmt.Println(string(v))
	_, err := s.Eval("greet()", nil)
	fmt.Println(err.Message, "at line", err.Line)
	// Output:
	// hello Ada
	// 3
	// hello undefined
	// TypeError: Cannot read property 'length' of undefined at line 1
}

// Every way of recursing that goja counts ends as a RangeError, a script
// error that leaves the session usable; none reaches the Go stack's limit.
func TestDeepRecursion(t *testing.T) {
	s := js.New(nil, nil)
	for _, code := range []string{
		"function f(n) { return f(n + 1) + 1 }; f(0)",
		"function f(n) { return [n].map(f) }; f(0)",
		"[2, 1].sort(function c() { return [2, 1].sort(c) })",
		"function f() { return 'x'.replace(/x/, f) }; f()",
		"var o = { get x() { return this.x } }; o.x",
		"function f() { return f.call() }; f()",
		"function F() { new F() }; new F()",
		"var p = new Proxy({}, { get(t, k, r) { return r[k] } }); p.x",
		"var o = { toString() { return '' + this } }; '' + o",
		"function f() { return JSON.stringify({ toJSON: f }) }; f()",
		"async function f() { await f() }; f()",
	} {
		_, err := s.Eval(code, nil)
		if err == nil || err.Message != "RangeError: Maximum call stack size exceeded" {
			t.Errorf("%s: %v, want a RangeError", code, err)
		}
	}
	if v, err := s.Eval("'still usable'", nil); err != nil || string(v) != `"still usable"` {
		t.Fatalf("after the overflows: %s, %v", v, err)
	}
}

func TestSessionsShareNothing(t *testing.T) {
	a, b := js.New(nil, nil), js.New(nil, nil)
	if _, err := a.Eval("var shared = 1; Object.prototype.polluted = true", nil); err != nil {
		t.Fatal(err)
	}
	v, err := b.Eval("[typeof shared, ({}).polluted === undefined]", nil)
	if err != nil || string(v) != `["undefined",true]` {
		t.Fatalf("the second session sees %s, %v", v, err)
	}
}

func TestConsoleStreams(t *testing.T) {
	var stdout, stderr bytes.Buffer
	s := js.New(&stdout, &stderr)
	if _, err := s.Eval("console.log('out'); console.debug('dbg'); console.warn('w'); console.error('e')", nil); err != nil {
		t.Fatal(err)
	}
	if stdout.String() != "out\ndbg\n" || stderr.String() != "w\ne\n" {
		t.Fatalf("stdout %q, stderr %q", stdout.String(), stderr.String())
	}
}

// What a snippet throws is bounded, however long it is.
func TestErrorTextsAreBounded(t *testing.T) {
	s := js.New(nil, nil)
	_, err := s.Eval("throw new Error('x'.repeat(1e6))", nil)
	if err == nil || len(err.Message) > 1024 || len(err.Text) > 4096 || !strings.HasPrefix(err.Message, "Error: xxx") {
		t.Fatalf("%d-byte message, %d-byte text", len(err.Message), len(err.Text))
	}
}

// A toJSON or getter that throws while the value is converted is a
// script error, not a panic.
func TestConversionThatThrows(t *testing.T) {
	s := js.New(nil, nil)
	for code, want := range map[string]string{
		"({ toJSON() { throw new Error('no') } })":               "Error: no",
		"({ get x() { throw new TypeError('getter') } })":        "TypeError: getter",
		"throw { toString() { throw new Error('twice') } }":      "a value whose conversion to a string threw",
		"Promise.reject({ toString() { throw new Error('') } })": "Uncaught (in promise) a value whose conversion to a string threw",
	} {
		if _, err := s.Eval(code, nil); err == nil || err.Message != want {
			t.Errorf("%s: %v, want %q", code, err, want)
		}
	}
}

// A snippet that freezes the global object, or makes input
// non-configurable, leaves the runtime unable to set the next
// evaluation's input: that evaluation's error is fatal (the session
// cannot go on) and so is every later one's.
func TestSnippetThatFixesInputEndsTheSession(t *testing.T) {
	for _, brick := range []string{
		"Object.freeze(globalThis); 1",
		"Object.defineProperty(globalThis, 'input', {value: 0, writable: false, configurable: false}); 1",
	} {
		s := js.New(nil, nil)
		if v, err := s.Eval(brick, nil); err != nil || string(v) != "1" {
			t.Fatalf("%s: %s, %v", brick, v, err)
		}
		_, err := s.Eval("1 + 1", []byte("3"))
		if err == nil || !err.Fatal || !strings.Contains(err.Message, "cannot set the global input: TypeError: Cannot redefine property: input") {
			t.Fatalf("after %s: %+v, want a fatal error naming input", brick, err)
		}
		if _, again := s.Eval("2", nil); again != err {
			t.Fatalf("after %s, a later evaluation: %+v", brick, again)
		}
	}
}

// A snippet's own error, however it is thrown, is never fatal.
func TestThrownErrorsAreNotFatal(t *testing.T) {
	s := js.New(nil, nil)
	for _, code := range []string{"throw new TypeError('x')", "let a = ;", "undefinedName", "function f() { return f() }; f()"} {
		if _, err := s.Eval(code, nil); err == nil || err.Fatal {
			t.Errorf("%s: %+v", code, err)
		}
	}
}

// Describing what a snippet throws, converting what it returns and
// printing what it logs run the snippet's own code (proxy traps, getters,
// toString, Symbol.toPrimitive, toJSON): whatever that code throws, or a
// recursion in it, is the snippet's script error (or, for a thrown value,
// a fallback description), and the session goes on. want is the error's
// message, "" for none.
func TestHostileValuesAreScriptErrors(t *testing.T) {
	const threw = "a value whose conversion to a string threw"
	for _, c := range []struct{ code, want string }{
		// thrown
		{"throw new Proxy({}, {getPrototypeOf() { throw 2 }})", "[object Object]"},
		{"throw new Proxy({}, {getPrototypeOf() { throw new Proxy({}, {getPrototypeOf() { throw 2 }}) }})", "[object Object]"},
		{"var p = new Proxy({}, {getPrototypeOf() { return Object.getPrototypeOf(p) }}); throw p", "[object Object]"},
		{"throw new Proxy({}, {get() { throw 2 }})", threw},
		{"throw new Proxy({}, {ownKeys() { throw 2 }, getOwnPropertyDescriptor() { throw 2 }})", "[object Object]"},
		{"throw new Proxy(new Error('x'), {getPrototypeOf() { throw 2 }})", "Error: x"},
		{"throw new Proxy(new Error('x'), {get() { throw 2 }})", threw},
		{"throw new Proxy(new Error('x'), {get(t, k) { if (k === 'stack') throw 2; return t[k] }})", "Error: x"},
		{"throw Object.create(Error.prototype, {message: {get() { throw 2 }}})", threw},
		{"throw Object.create(Error.prototype, {name: {get() { throw 2 }}})", threw},
		{"throw Object.create(Error.prototype, {stack: {get() { throw 2 }}})", "Error"},
		{"var e = new Error('x'); Object.defineProperty(e, 'stack', {get() { throw 2 }}); throw e", "Error: x"},
		{"throw {[Symbol.toPrimitive]() { throw 2 }}", threw},
		{"throw {toString() { return String(this) }}", threw},
		{"throw {toString() { throw new Proxy({}, {getPrototypeOf() { throw 2 }}) }}", threw},
		{"throw new Proxy(function f() {}, {get() { throw 2 }})", threw},
		// rejected
		{"Promise.reject(new Proxy({}, {getPrototypeOf() { throw 2 }}))", "Uncaught (in promise) [object Object]"},
		{"Promise.reject(new Proxy({}, {get() { throw 2 }}))", "Uncaught (in promise) " + threw},
		{"Promise.reject(Object.create(Error.prototype, {stack: {get() { throw 2 }}}))", "Uncaught (in promise) Error"},
		// returned
		{"new Proxy({}, {getPrototypeOf() { throw 2 }})", ""},
		{"new Proxy({}, {get() { throw 2 }})", "2"},
		{"new Proxy({}, {ownKeys() { throw 2 }})", "2"},
		{"new Proxy({a: 1}, {getOwnPropertyDescriptor() { throw 2 }})", "2"},
		{"new Proxy([1], {get() { throw 2 }})", "2"},
		{"new Proxy(new Number(1), {get() { throw 2 }})", "2"},
		{"({get x() { throw 2 }})", "2"},
		{"({x: new Proxy({}, {ownKeys() { throw 2 }})})", "2"},
		{"[new Proxy({}, {get() { throw 2 }})]", "2"},
		{"({toJSON() { return new Proxy({}, {ownKeys() { throw 2 }}) }})", "2"},
		{"Promise.resolve(new Proxy({}, {ownKeys() { throw 2 }}))", "2"},
		{"({get x() { return this.x }})", "RangeError: Maximum call stack size exceeded"},
		// logged
		{"console.log(new Proxy({}, {getPrototypeOf() { throw 2 }}))", ""},
		{"console.log(new Proxy({}, {get() { throw 2 }}))", "2"},
		{"console.log(new Proxy({}, {ownKeys() { throw 2 }}))", "2"},
		{"console.log(new Proxy(function f() {}, {get() { throw 2 }}))", "2"},
		{"console.log(new Proxy(new Error('x'), {get() { throw 2 }}))", "2"},
		{"console.log({get x() { throw 2 }})", "2"},
		{"console.log({[Symbol.toPrimitive]() { throw 2 }, toJSON() { throw 2 }})", "2"},
	} {
		t.Run(c.code, func(t *testing.T) {
			s := js.New(nil, nil)
			if _, err := s.Eval("var keep = 42", nil); err != nil {
				t.Fatal(err)
			}
			_, err := s.Eval(c.code, nil)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("%+v, want no error", err)
			case c.want != "" && (err == nil || err.Fatal || err.Message != c.want):
				t.Errorf("%+v, want the script error %q", err, c.want)
			}
			if v, err := s.Eval("keep", nil); err != nil || string(v) != "42" {
				t.Fatalf("the next evaluation: %s, %+v", v, err)
			}
		})
	}
}
