package main

// A generator of a large, valid wasm module, so the compile-cache rows
// measure Cranelift on a realistic amount of code (≥ 1 MiB) without a
// toolchain: a WASI program from GOOS=wasip1 would be refused by sandboxd
// for its imports, and this one has none.
//
// Layout: function 0 is the export "run" () -> i32, calling function 1;
// functions 1..n are (i32) -> i32 with long straight-line bodies of
// arithmetic on their parameter, each with different constants so that no
// two bodies are identical.

const (
	secType     = 1
	secFunction = 3
	secExport   = 7
	secCode     = 10

	opLocalGet = 0x20
	opLocalSet = 0x21
	opI32Const = 0x41
	opI32Add   = 0x6a
	opI32Mul   = 0x6c
	opI32Xor   = 0x73
	opCall     = 0x10
	opEnd      = 0x0b
	kindFunc   = 0x00
	typeFunc   = 0x60
	typeI32    = 0x7f
)

// bigModule returns a module of at least minCodeBytes of function bodies.
func bigModule(minCodeBytes int) []byte {
	const stepsPerBody = 80
	var bodies [][]byte
	bodies = append(bodies, runBody())
	total := 0
	for i := 1; total < minCodeBytes; i++ {
		b := arithmeticBody(i, stepsPerBody)
		bodies = append(bodies, b)
		total += len(b)
	}
	types := vec(2, append(funcType(nil, []byte{typeI32}), funcType([]byte{typeI32}, []byte{typeI32})...))
	funcs := []byte{}
	funcs = append(funcs, 0) // run: type 0
	for range len(bodies) - 1 {
		funcs = append(funcs, 1)
	}
	exports := vec(1, append(name("run"), kindFunc, 0))
	code := []byte{}
	for _, b := range bodies {
		code = append(code, uleb(uint64(len(b)))...)
		code = append(code, b...)
	}
	m := []byte("\x00asm\x01\x00\x00\x00")
	m = append(m, wasmSection(secType, types)...)
	m = append(m, wasmSection(secFunction, vec(len(bodies), funcs))...)
	m = append(m, wasmSection(secExport, exports)...)
	m = append(m, wasmSection(secCode, vec(len(bodies), code))...)
	return m
}

// runBody: (func (result i32) (call 1 (i32.const 7)))
func runBody() []byte {
	b := []byte{0} // no locals
	b = append(b, opI32Const)
	b = append(b, sleb(7)...)
	b = append(b, opCall, 1, opEnd)
	return b
}

// arithmeticBody: steps of x = (x * c1 + c2) ^ c3 on the parameter.
func arithmeticBody(seed, steps int) []byte {
	b := []byte{0}
	for s := range steps {
		k := int64(seed*7919 + s*104729)
		b = append(b, opLocalGet, 0, opI32Const)
		b = append(b, sleb(k%1000003+3)...)
		b = append(b, opI32Mul, opI32Const)
		b = append(b, sleb(k%65521)...)
		b = append(b, opI32Add, opI32Const)
		b = append(b, sleb(k%8191)...)
		b = append(b, opI32Xor, opLocalSet, 0)
	}
	return append(b, opLocalGet, 0, opEnd)
}

func funcType(params, results []byte) []byte {
	b := []byte{typeFunc}
	b = append(b, vec(len(params), params)...)
	return append(b, vec(len(results), results)...)
}

func name(s string) []byte { return append(uleb(uint64(len(s))), s...) }

func vec(n int, items []byte) []byte { return append(uleb(uint64(n)), items...) }

func wasmSection(id byte, body []byte) []byte {
	return append(append([]byte{id}, uleb(uint64(len(body)))...), body...)
}

func uleb(v uint64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			c |= 0x80
		}
		b = append(b, c)
		if v == 0 {
			return b
		}
	}
}

func sleb(v int64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		done := (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0)
		if !done {
			c |= 0x80
		}
		b = append(b, c)
		if done {
			return b
		}
	}
}
