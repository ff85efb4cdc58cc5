package sandbox_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/sandbox"
)

func TestParseValue(t *testing.T) {
	t.Parallel()
	cases := []struct {
		ty   sandbox.ValType
		in   string
		bits uint64
		fail bool
	}{
		// i32: signed, unsigned wrap, range.
		{sandbox.I32, "0", 0, false},
		{sandbox.I32, "42", 42, false},
		{sandbox.I32, " 42\n", 42, false},
		{sandbox.I32, "+7", 7, false},
		{sandbox.I32, "-1", 0xffffffff, false},
		{sandbox.I32, "2147483647", 0x7fffffff, false},
		{sandbox.I32, "-2147483648", 0x80000000, false},
		{sandbox.I32, "2147483648", 0x80000000, false},
		{sandbox.I32, "4294967295", 0xffffffff, false},
		{sandbox.I32, "4294967296", 0, true},
		{sandbox.I32, "-2147483649", 0, true},
		{sandbox.I32, "0x10", 0, true},
		{sandbox.I32, "1.0", 0, true},
		{sandbox.I32, "1_000", 0, true},
		{sandbox.I32, "", 0, true},
		{sandbox.I32, "abc", 0, true},
		// i64: exact beyond 2^53, extremes, unsigned.
		{sandbox.I64, "9007199254740993", 1<<53 + 1, false},
		{sandbox.I64, "-9007199254740993", uint64(-(1<<53 + 1) & (1<<64 - 1)), false},
		{sandbox.I64, "9223372036854775807", math.MaxInt64, false},
		{sandbox.I64, "-9223372036854775808", 1 << 63, false},
		{sandbox.I64, "9223372036854775808", 1 << 63, false},
		{sandbox.I64, "18446744073709551615", math.MaxUint64, false}, // all ones, i.e. -1
		{sandbox.I64, "18446744073709551616", 0, true},
		{sandbox.I64, "-9223372036854775809", 0, true},
		{sandbox.I64, "1e3", 0, true},
		{sandbox.I64, "nan", 0, true},
		// f32.
		{sandbox.F32, "1.5", 0x3fc00000, false},
		{sandbox.F32, "-0", 0x80000000, false},
		{sandbox.F32, "0", 0, false},
		{sandbox.F32, "inf", 0x7f800000, false},
		{sandbox.F32, "+Inf", 0x7f800000, false},
		{sandbox.F32, "Infinity", 0x7f800000, false},
		{sandbox.F32, "-inf", 0xff800000, false},
		{sandbox.F32, "0x7fc00001", 0x7fc00001, false},
		{sandbox.F32, "0X7FA00000", 0x7fa00000, false},
		{sandbox.F32, "0xffffffff", 0xffffffff, false},
		{sandbox.F32, "0x1", 1, false},
		{sandbox.F32, "0x100000000", 0, true}, // more bits than an f32
		{sandbox.F32, "0x1p-2", 0x3e800000, false},
		{sandbox.F32, "0x1.8p1", 0x40400000, false},
		{sandbox.F32, "-0x1p-2", 0xbe800000, false},
		{sandbox.F32, "3.4028235e38", 0x7f7fffff, false},
		{sandbox.F32, "1e39", 0, true}, // overflows an f32
		{sandbox.F32, "0x", 0, true},
		{sandbox.F32, "0xg", 0, true},
		{sandbox.F32, "1.5.5", 0, true},
		{sandbox.F32, "nanx", 0, true},
		{sandbox.F32, "", 0, true},
		// f64.
		{sandbox.F64, "1.5", 0x3ff8000000000000, false},
		{sandbox.F64, "-2.25", 0xc002000000000000, false},
		{sandbox.F64, "5e-324", 1, false},
		{sandbox.F64, "-0", 1 << 63, false},
		{sandbox.F64, "-0.0", 1 << 63, false},
		{sandbox.F64, "INF", 0x7ff0000000000000, false},
		{sandbox.F64, "-infinity", 0xfff0000000000000, false},
		{sandbox.F64, "0x7ff8000000000123", 0x7ff8000000000123, false},
		{sandbox.F64, "0x7ff0000000000001", 0x7ff0000000000001, false},
		{sandbox.F64, "0x7fc00001", 0x7fc00001, false}, // raw f64 bits, not f32's
		{sandbox.F64, "0x1p-1074", 1, false},
		{sandbox.F64, "0x1.fffffffffffffp1023", 0x7fefffffffffffff, false},
		{sandbox.F64, "1e309", 0, true},
		{sandbox.F64, "0x10000000000000000", 0, true},
		{sandbox.F64, "garbage", 0, true},
		{sandbox.F64, "1,5", 0, true},
		// unsupported types.
		{"v128", "0", 0, true},
		{"", "0", 0, true},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s %q", tc.ty, tc.in), func(t *testing.T) {
			v, err := sandbox.ParseValue(tc.ty, tc.in)
			if tc.fail {
				if err == nil {
					t.Fatalf("= %v (bits %#x), want an error", v, v.Bits)
				}
				if tc.ty != "v128" && tc.ty != "" && !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.in)) {
					t.Errorf("error %q does not quote the input", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if v.Type != tc.ty || v.Bits != tc.bits {
				t.Errorf("= %s bits %#x, want %s bits %#x", v.Type, v.Bits, tc.ty, tc.bits)
			}
		})
	}
}

// TestParseValueNaN checks the textual NaNs: they must be NaNs of the
// right sign with the quiet bit set. The exact payload is logged.
func TestParseValueNaN(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ty  sandbox.ValType
		in  string
		neg bool
	}{
		{sandbox.F32, "nan", false}, {sandbox.F32, "NaN", false}, {sandbox.F32, "+nan", false}, {sandbox.F32, "-nan", true},
		{sandbox.F64, "nan", false}, {sandbox.F64, "NAN", false}, {sandbox.F64, "+nan", false}, {sandbox.F64, "-nan", true},
	} {
		v, err := sandbox.ParseValue(tc.ty, tc.in)
		if err != nil {
			t.Errorf("%s %q: %v", tc.ty, tc.in, err)
			continue
		}
		var sign, quiet uint64 = 1 << 63, 1 << 51
		if tc.ty == sandbox.F32 {
			sign, quiet = 1<<31, 1<<22
		}
		if !math.IsNaN(v.Float()) || v.Bits&quiet == 0 || (v.Bits&sign != 0) != tc.neg || v.Bits>>32 != 0 && tc.ty == sandbox.F32 {
			t.Errorf("%s %q = bits %#x, want a quiet NaN (negative %v)", tc.ty, tc.in, v.Bits, tc.neg)
		}
		t.Logf("%s %q = %v", tc.ty, tc.in, v)
	}
}

func TestValueString(t *testing.T) {
	t.Parallel()
	cases := []struct {
		v    sandbox.Value
		want string
	}{
		{sandbox.ValueI32(42), "I32(42)"},
		{sandbox.ValueI32(-1), "I32(-1)"},
		{sandbox.Value{Type: sandbox.I32, Bits: 0xffffffff}, "I32(-1)"},
		{sandbox.ValueI32(math.MinInt32), "I32(-2147483648)"},
		{sandbox.ValueI64(-1), "I64(-1)"},
		{sandbox.ValueI64(math.MaxInt64), "I64(9223372036854775807)"},
		{sandbox.ValueI64(math.MinInt64), "I64(-9223372036854775808)"},
		{sandbox.ValueI64(1<<53 + 1), "I64(9007199254740993)"},
		{sandbox.ValueF32(1.5), "F32(1.5)"},
		{sandbox.ValueF32(0.1), "F32(0.1)"},
		{sandbox.ValueF32(float32(math.Copysign(0, -1))), "F32(-0)"},
		{sandbox.ValueF32(float32(math.Inf(1))), "F32(inf)"},
		{sandbox.ValueF32(math.MaxFloat32), "F32(3.4028235e+38)"},
		{sandbox.Value{Type: sandbox.F32, Bits: 0x7fc00000}, "F32(NaN:0x7fc00000)"},
		{sandbox.Value{Type: sandbox.F32, Bits: 0x7fa00000}, "F32(NaN:0x7fa00000)"},
		{sandbox.Value{Type: sandbox.F32, Bits: 0xffc00001}, "F32(NaN:0xffc00001)"},
		{sandbox.Value{Type: sandbox.F32, Bits: 1}, "F32(1e-45)"},
		{sandbox.ValueF64(-2.25), "F64(-2.25)"},
		{sandbox.ValueF64(0.1), "F64(0.1)"},
		{sandbox.ValueF64(1e21), "F64(1e+21)"},
		{sandbox.ValueF64(5e-324), "F64(5e-324)"},
		{sandbox.ValueF64(math.Copysign(0, -1)), "F64(-0)"},
		{sandbox.ValueF64(math.Inf(-1)), "F64(-inf)"},
		{sandbox.Value{Type: sandbox.F64, Bits: 0x7ff8000000000001}, "F64(NaN:0x7ff8000000000001)"},
		{sandbox.Value{Type: sandbox.F64, Bits: 0x7ff0000000000001}, "F64(NaN:0x7ff0000000000001)"},
		{sandbox.Value{Type: "v128", Bits: 0xab}, "v128(0xab)"},
	}
	for _, tc := range cases {
		if got := tc.v.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.v, got, tc.want)
		}
	}
}

// fuzzTypes maps the fuzzer's type byte to a type; the last is unsupported.
var fuzzTypes = []sandbox.ValType{sandbox.I32, sandbox.I64, sandbox.F32, sandbox.F64, "v128"}

// FuzzParseValue checks ParseValue never panics, that a parsed float's 0x
// bits parse back to the same bits, and that a parsed value's String text
// (NaNs aside) parses back to the same value.
func FuzzParseValue(f *testing.F) {
	for _, s := range []string{"0", "-1", "4294967295", "9007199254740993", "nan", "-nan", "inf", "-inf", "-0",
		"0x7fc00001", "0x1p-2", "1e39", "garbage", " 1 "} {
		for ty := range len(fuzzTypes) {
			f.Add(byte(ty), s)
		}
	}
	f.Fuzz(func(t *testing.T, tyb byte, s string) {
		ty := fuzzTypes[int(tyb)%len(fuzzTypes)]
		v, err := sandbox.ParseValue(ty, s)
		if err != nil {
			return
		}
		if v.Type != ty {
			t.Fatalf("ParseValue(%s, %q) has type %s", ty, s, v.Type)
		}
		if (ty == sandbox.I32 || ty == sandbox.F32) && v.Bits>>32 != 0 {
			t.Fatalf("ParseValue(%s, %q) = bits %#x, beyond 32 bits", ty, s, v.Bits)
		}
		if ty == sandbox.F32 || ty == sandbox.F64 {
			hex := fmt.Sprintf("0x%x", v.Bits)
			w, err := sandbox.ParseValue(ty, hex)
			if err != nil || w != v {
				t.Fatalf("ParseValue(%s, %q) = bits %#x, but ParseValue(%s, %q) = %v, %v", ty, s, v.Bits, ty, hex, w, err)
			}
		}
		if math.IsNaN(v.Float()) && (ty == sandbox.F32 || ty == sandbox.F64) {
			return
		}
		str := v.String()
		inner := str[strings.IndexByte(str, '(')+1 : len(str)-1]
		w, err := sandbox.ParseValue(ty, inner)
		if err != nil || w != v {
			t.Fatalf("ParseValue(%s, %q) = %v (bits %#x), but its text %q parses to %v (bits %#x), %v", ty, s, v, v.Bits, inner, w, w.Bits, err)
		}
	})
}
