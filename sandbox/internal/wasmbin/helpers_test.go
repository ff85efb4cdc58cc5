package wasmbin

import (
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// newTestEngine enables every feature the decoder supports, so that tests
// can exercise all of them; fuel is off because nothing here loops.
func newTestEngine() *wasmtime.Engine {
	cfg := wasmtime.NewConfig()
	cfg.SetWasmMultiMemory(true)
	cfg.SetWasmMemory64(true)
	cfg.SetWasmSIMD(true)
	cfg.SetWasmRelaxedSIMD(true)
	cfg.SetWasmBulkMemory(true)
	cfg.SetWasmReferenceTypes(true)
	cfg.SetWasmMultiValue(true)
	cfg.SetWasmTailCall(true)
	cfg.SetWasmThreads(true)
	return wasmtime.NewEngineWithConfig(cfg)
}

// wat2wasm converts WAT text or fails the test.
func wat2wasm(t testing.TB, wat string) []byte {
	t.Helper()
	wasm, err := wasmtime.Wat2Wasm(wat)
	if err != nil {
		t.Fatalf("Wat2Wasm: %v", err)
	}
	return wasm
}

// instrumentWAT converts, validates, instruments and re-validates a module.
func instrumentWAT(t testing.TB, engine *wasmtime.Engine, wat string) ([]byte, *Info) {
	t.Helper()
	wasm := wat2wasm(t, wat)
	if err := wasmtime.ModuleValidate(engine, wasm); err != nil {
		t.Fatalf("input does not validate: %v", err)
	}
	out, info, err := Instrument(wasm)
	if err != nil {
		t.Fatalf("Instrument: %v", err)
	}
	if err := wasmtime.ModuleValidate(engine, out); err != nil {
		t.Fatalf("instrumented module does not validate: %v", err)
	}
	checkGrowsOnlyInHelpers(t, wasm, out)
	return out, info
}

// sandbox is one instantiated, instrumented module.
type sandbox struct {
	t     testing.TB
	store *wasmtime.Store
	inst  *wasmtime.Instance
}

// instantiate instruments wat and instantiates it with the given imports.
func instantiate(t testing.TB, wat string, imports ...func(*wasmtime.Store) wasmtime.AsExtern) *sandbox {
	t.Helper()
	engine := newTestEngine()
	out, _ := instrumentWAT(t, engine, wat)
	module, err := wasmtime.NewModule(engine, out)
	if err != nil {
		t.Fatalf("NewModule: %v", err)
	}
	store := wasmtime.NewStore(engine)
	var externs []wasmtime.AsExtern
	for _, imp := range imports {
		externs = append(externs, imp(store))
	}
	inst, err := wasmtime.NewInstance(store, module, externs)
	if err != nil {
		t.Fatalf("NewInstance: %v", err)
	}
	return &sandbox{t: t, store: store, inst: inst}
}

func (s *sandbox) export(name string) *wasmtime.Extern {
	s.t.Helper()
	ext := s.inst.GetExport(s.store, name)
	if ext == nil {
		s.t.Fatalf("missing export %q", name)
	}
	return ext
}

// call invokes an export and returns its single integer result widened to
// int64 (0 if it returns nothing).
func (s *sandbox) call(name string, args ...any) int64 {
	s.t.Helper()
	fn := s.export(name).Func()
	if fn == nil {
		s.t.Fatalf("export %q is not a function", name)
	}
	res, err := fn.Call(s.store, args...)
	if err != nil {
		s.t.Fatalf("call %s%v: %v", name, args, err)
	}
	switch v := res.(type) {
	case nil:
		return 0
	case int32:
		return int64(v)
	case int64:
		return v
	default:
		s.t.Fatalf("call %s: unexpected result %T", name, res)
		return 0
	}
}

func (s *sandbox) global(name string) int64 {
	s.t.Helper()
	return s.export(name).Global().Get(s.store).I64()
}

func (s *sandbox) setGlobal(name string, v int64) {
	s.t.Helper()
	if err := s.export(name).Global().Set(s.store, wasmtime.ValI64(v)); err != nil {
		s.t.Fatalf("set %s: %v", name, err)
	}
}

// step is one call in a table-driven scenario.
type step struct {
	fn   string
	args []any
	want int64
}

func (s *sandbox) run(steps []step) {
	s.t.Helper()
	for i, st := range steps {
		if got := s.call(st.fn, st.args...); got != st.want {
			s.t.Errorf("step %d: %s%v = %d, want %d", i, st.fn, st.args, got, st.want)
		}
	}
}

// growSites counts the memory.grow and table.grow instructions in each
// function of wasm, keyed by function index.
func growSites(t testing.TB, wasm []byte) map[uint64]int {
	t.Helper()
	m, err := parseModule(wasm)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	sites := map[uint64]int{}
	if m.code == nil {
		return sites
	}
	r := newReader(m.code.payload, m.code.offset)
	n, err := r.u32()
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		size, _ := r.u32()
		body, err := r.bytes(uint64(size))
		if err != nil {
			t.Fatal(err)
		}
		br := newReader(body, 0)
		if err := skipLocals(br); err != nil {
			t.Fatal(err)
		}
		d := &decoder{r: br}
		for !br.eof() {
			in, err := d.next()
			if err != nil {
				t.Fatalf("function %d: %v", i, err)
			}
			if in.kind == kindMemoryGrow || in.kind == kindTableGrow {
				sites[uint64(m.info.ImportedFuncs)+uint64(i)]++
			}
		}
	}
	return sites
}

// checkGrowsOnlyInHelpers asserts that instrumentation left grow
// instructions only in the injected functions, one per helper.
func checkGrowsOnlyInHelpers(t testing.TB, in, out []byte) {
	t.Helper()
	before, err := parseModule(in)
	if err != nil {
		t.Fatal(err)
	}
	firstHelper := uint64(before.info.ImportedFuncs) + uint64(before.funcs.count)
	for fn, n := range growSites(t, out) {
		if fn < firstHelper || n != 1 {
			t.Errorf("function %d still has %d grow instructions (first helper is %d)", fn, n, firstHelper)
		}
	}
}
