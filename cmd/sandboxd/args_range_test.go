package main

import (
	"strings"
	"testing"
	"time"
)

// TestSidecarIntegerStringsOutOfRange: a decimal string past an integer
// parameter's range is refused -32602 as a range problem, as the same
// number is, not as a string of the wrong type; the edges of the ranges
// are accepted (the unsigned upper halves wrap).
func TestSidecarIntegerStringsOutOfRange(t *testing.T) {
	s := startRaw(t, binPath)
	s.startReading()
	mod := map[string]any{"wat": `(module
	  (func (export "id64") (param i64) (result i64) (local.get 0))
	  (func (export "id32") (param i32) (result i32) (local.get 0)))`}
	for id, tc := range map[string]struct {
		function string
		arg      any
		want     string // the whole message
	}{
		"1": {"id64", "18446744073709551616", `args[0]: the string "18446744073709551616" is out of range for i64`},
		"2": {"id64", "-9223372036854775809", `args[0]: the string "-9223372036854775809" is out of range for i64`},
		"3": {"id32", "4294967296", `args[0]: the string "4294967296" is out of range for i32`},
		"4": {"id32", "-2147483649", `args[0]: the string "-2147483649" is out of range for i32`},
		"5": {"id64", map[string]any{"type": "i64", "value": "18446744073709551616"}, `args[0]: the string "18446744073709551616" is out of range for i64`},
		"6": {"id32", map[string]any{"type": "i32", "value": "4294967296"}, `args[0]: the string "4294967296" is out of range for i32`},
		"7": {"id64", "12x", `args[0]: expected i64, got the string "12x"`},
	} {
		s.request(id, "run", map[string]any{"module": mod, "function": tc.function, "args": []any{tc.arg}})
		m, _ := s.response(id, 60*time.Second)
		if m == nil || m.Error == nil || m.Error.Code != -32602 || m.Error.Message != tc.want {
			t.Errorf("%s(%v): want -32602 %q, got %s", tc.function, tc.arg, tc.want, trunc(m.raw))
		}
	}
	for id, tc := range map[string]struct {
		function string
		arg      any
		want     string
	}{
		"11": {"id64", "18446744073709551615", `"value":"-1"`},
		"12": {"id64", "-9223372036854775808", `"value":"-9223372036854775808"`},
		"13": {"id32", "4294967295", `"value":-1`},
		"14": {"id32", "-2147483648", `"value":-2147483648`},
	} {
		s.request(id, "run", map[string]any{"module": mod, "function": tc.function, "args": []any{tc.arg}})
		m, _ := s.response(id, 60*time.Second)
		if m == nil || m.Error != nil || !strings.Contains(string(m.Result), tc.want) {
			t.Errorf("%s(%v): want a result with %s, got %s", tc.function, tc.arg, tc.want, trunc(m.raw))
		}
	}
}
