package sandbox

// These tests fail loudly when the pinned wasmtime-go changes under
// capi.go: its version, the Store layout storePtr reads through unsafe, the
// C declarations capi.h repeats instead of including, and the trap codes
// trapCodes indexes by raw value.

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

const wasmtimeModule = "github.com/bytecodealliance/wasmtime-go/v39"

// TestWasmtimeVersionPinned: the wasmtime-go in the build is exactly
// WasmtimeVersion. Test binaries may carry no dependency list in their
// build info, so go.mod is the fallback.
func TestWasmtimeVersionPinned(t *testing.T) {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == wasmtimeModule {
				if d.Replace != nil {
					t.Errorf("%s is replaced by %s %s: capi.go was checked against %s only", wasmtimeModule, d.Replace.Path, d.Replace.Version, WasmtimeVersion)
				}
				if d.Version != WasmtimeVersion {
					t.Fatalf("build uses %s %s, but capi.go was written against %s: re-check capi.go and update WasmtimeVersion", wasmtimeModule, d.Version, WasmtimeVersion)
				}
				t.Logf("build info: %s %s", d.Path, d.Version)
				return
			}
		}
	}
	f, err := os.Open(filepath.Join("..", "go.mod"))
	if err != nil {
		t.Fatalf("no build info for %s and no go.mod: %v", wasmtimeModule, err)
	}
	defer f.Close()
	var versions []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		line = strings.TrimPrefix(line, "require ")
		if strings.HasPrefix(line, "replace ") && strings.Contains(line, wasmtimeModule) {
			t.Errorf("go.mod replaces %s: %q", wasmtimeModule, line)
		}
		fields := strings.Fields(line)
		if len(fields) >= 2 && fields[0] == wasmtimeModule {
			versions = append(versions, fields[1])
		}
	}
	if len(versions) != 1 {
		t.Fatalf("go.mod requires %s %d times (%v), want once", wasmtimeModule, len(versions), versions)
	}
	if versions[0] != WasmtimeVersion {
		t.Fatalf("go.mod requires %s %s, but capi.go was written against %s: re-check capi.go and update WasmtimeVersion", wasmtimeModule, versions[0], WasmtimeVersion)
	}
	t.Logf("go.mod: %s %s", wasmtimeModule, versions[0])
}

// TestStoreLayout: storePtr reads the first word of a wasmtime.Store as the
// *wasmtime_store_t. That holds while the first field is _ptr of that type.
func TestStoreLayout(t *testing.T) {
	st := reflect.TypeFor[wasmtime.Store]()
	if st.NumField() == 0 {
		t.Fatal("wasmtime.Store has no fields")
	}
	f := st.Field(0)
	if f.Name != "_ptr" || f.Offset != 0 {
		t.Fatalf("wasmtime.Store's first field is %s at offset %d, want _ptr at 0: storePtr in capi.go is wrong", f.Name, f.Offset)
	}
	if f.Type.Kind() != reflect.Pointer {
		t.Fatalf("wasmtime.Store._ptr is a %s, want a pointer", f.Type)
	}
	if name := f.Type.Elem().Name(); !strings.Contains(name, "wasmtime_store") {
		t.Fatalf("wasmtime.Store._ptr points to %q, want a wasmtime_store type", name)
	}
	if f.Type.Size() != reflect.TypeFor[uintptr]().Size() {
		t.Fatalf("wasmtime.Store._ptr is %d bytes", f.Type.Size())
	}
	// And the pointer read by storePtr is the live store, not nil.
	eng := wasmtime.NewEngine()
	store := wasmtime.NewStore(eng)
	defer store.Close()
	if storePtr(store) == nil {
		t.Fatal("storePtr returned nil for a live store")
	}
}

// wasmtimeIncludeDir is build/include of the pinned wasmtime-go, via the go
// tool; the test is skipped without one.
func wasmtimeIncludeDir(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not available:", err)
	}
	out, err := exec.Command(gobin, "list", "-m", "-f", "{{.Dir}}", wasmtimeModule).Output()
	if err != nil {
		t.Skipf("go list -m %s: %v", wasmtimeModule, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		t.Skipf("%s is not in the module cache", wasmtimeModule)
	}
	if !strings.HasSuffix(dir, "@"+WasmtimeVersion) {
		t.Errorf("module directory %s is not version %s", dir, WasmtimeVersion)
	}
	return filepath.Join(dir, "build", "include")
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	cComment = regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`)
	cToken   = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*|\S`)
	cIdent   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// cPrototype extracts the declaration of function fn from C source and
// reduces it to its type: comments, storage classes and parameter names
// dropped, typedefs from the typedefs map expanded.
func cPrototype(t *testing.T, src, fn string, typedefs map[string]string) string {
	t.Helper()
	src = cComment.ReplaceAllString(src, " ")
	i := strings.Index(src, fn+"(")
	if i < 0 {
		t.Fatalf("no declaration of %s", fn)
	}
	// Back to the start of the declaration: the return type may sit on the
	// lines above the name, up to a blank or preprocessor line or the end
	// of the previous declaration.
	begin := strings.LastIndex(src[:i], "\n") + 1
	for begin > 0 {
		prev := strings.LastIndex(src[:begin-1], "\n") + 1
		line := strings.TrimSpace(src[prev : begin-1])
		if line == "" || strings.HasPrefix(line, "#") || strings.ContainsAny(line, ";{}") {
			break
		}
		begin = prev
	}
	end := strings.Index(src[i:], ";")
	if end < 0 {
		t.Fatalf("unterminated declaration of %s", fn)
	}
	toks := cToken.FindAllString(src[begin:i+end], -1)
	var out []string
	for k, tok := range toks {
		switch tok {
		case "WASM_API_EXTERN", "WASI_API_EXTERN", "extern":
			continue
		}
		if def, ok := typedefs[tok]; ok {
			tok = def
		}
		// A declarator name: an identifier right before ',' or ')' that
		// follows '*' or another identifier (a type). Not the function's own
		// name, which precedes '('.
		if cIdent.MatchString(tok) && k+1 < len(toks) && (toks[k+1] == "," || toks[k+1] == ")") &&
			k > 0 && (toks[k-1] == "*" || cIdent.MatchString(toks[k-1])) {
			continue
		}
		out = append(out, tok)
	}
	return strings.Join(out, " ")
}

// capiC is the C side of capi.go: capi.h, the declarations, then capi.c,
// the definitions.
func capiC(t *testing.T) string {
	t.Helper()
	return readFile(t, "capi.h") + "\n" + readFile(t, "capi.c")
}

// TestCDeclarationsMatchHeaders: every wasmtime function and constant
// capi.h declares by hand matches the pinned headers.
func TestCDeclarationsMatchHeaders(t *testing.T) {
	inc := wasmtimeIncludeDir(t)
	storeH := readFile(t, filepath.Join(inc, "wasmtime", "store.h"))
	errorH := readFile(t, filepath.Join(inc, "wasmtime", "error.h"))
	capi := capiC(t)

	typedefs := map[string]string{}
	for _, m := range regexp.MustCompile(`typedef\s+(\w+)\s+(wasmtime_update_deadline_kind_t)\s*;`).FindAllStringSubmatch(storeH, -1) {
		typedefs[m[2]] = m[1]
	}
	if typedefs["wasmtime_update_deadline_kind_t"] != "uint8_t" {
		t.Errorf("wasmtime_update_deadline_kind_t is %q in store.h; capi.go passes a uint8_t*", typedefs["wasmtime_update_deadline_kind_t"])
	}
	for _, fn := range []struct{ name, header string }{
		{"wasmtime_store_epoch_deadline_callback", storeH},
		{"wasmtime_error_new", errorH},
		{"wasmtime_context_get_fuel", storeH},
		{"wasmtime_context_set_fuel", storeH},
		{"wasmtime_error_delete", errorH},
		{"wasmtime_trap_new_code", readFile(t, filepath.Join(inc, "wasmtime", "trap.h"))},
	} {
		want := cPrototype(t, fn.header, fn.name, typedefs)
		got := cPrototype(t, capi, fn.name, typedefs)
		t.Logf("%s: %s", fn.name, want)
		if got != want {
			t.Errorf("capi.h declares\n\t%s\nbut the pinned header declares\n\t%s", got, want)
		}
	}

	// sbx_on_epoch writes 0 as "continue".
	if !regexp.MustCompile(`#define\s+WASMTIME_UPDATE_DEADLINE_CONTINUE\s+0\b`).MatchString(storeH) {
		t.Error("WASMTIME_UPDATE_DEADLINE_CONTINUE is no longer 0; sbx_on_epoch writes 0")
	}
	if !strings.Contains(capi, "*kind = 0;") {
		t.Error("capi.c no longer sets *kind = 0: re-check this test")
	}
}

// TestTrapCodesMatchHeader: trapCodes[i] is the stable name of the i-th
// WASMTIME_TRAP_CODE_ enumerator of the pinned trap.h.
func TestTrapCodesMatchHeader(t *testing.T) {
	inc := wasmtimeIncludeDir(t)
	trapH := cComment.ReplaceAllString(readFile(t, filepath.Join(inc, "wasmtime", "trap.h")), " ")
	body := regexp.MustCompile(`(?s)enum\s+wasmtime_trap_code_enum\s*\{(.*?)\}`).FindStringSubmatch(trapH)
	if body == nil {
		t.Fatal("trap.h has no enum wasmtime_trap_code_enum")
	}
	if strings.Contains(body[1], "=") {
		t.Fatalf("the trap code enum now assigns explicit values; this test assumes consecutive codes:\n%s", body[1])
	}
	var names []string
	for _, m := range regexp.MustCompile(`WASMTIME_TRAP_CODE_(\w+)`).FindAllStringSubmatch(body[1], -1) {
		names = append(names, m[1])
	}
	renamed := map[string]string{
		"INTEGER_DIVISION_BY_ZERO":  "integer_divide_by_zero",
		"BAD_CONVERSION_TO_INTEGER": "invalid_conversion_to_integer",
		"UNREACHABLE_CODE_REACHED":  "unreachable",
	}
	want := make([]string, len(names))
	for i, n := range names {
		if r, ok := renamed[n]; ok {
			want[i] = r
		} else {
			want[i] = strings.ToLower(n)
		}
	}
	if len(want) != len(trapCodes) {
		t.Errorf("trap.h has %d trap codes, trapCodes has %d", len(want), len(trapCodes))
	}
	for i := range max(len(want), len(trapCodes)) {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(trapCodes) {
			g = trapCodes[i]
		}
		if w != g {
			t.Errorf("trap code %d: trapCodes has %q, trap.h implies %q", i, g, w)
		}
	}
	if trapCodes[rawTrapInterrupt] != "interrupt" || trapCodes[rawTrapOutOfFuel] != "out_of_fuel" {
		t.Errorf("rawTrapInterrupt=%d (%s) rawTrapOutOfFuel=%d (%s)", rawTrapInterrupt, trapCodes[rawTrapInterrupt], rawTrapOutOfFuel, trapCodes[rawTrapOutOfFuel])
	}
}

// TestFuelTrapIsOutOfFuel: fuelTrap is wasmtime's out-of-fuel trap, so
// classify reports fuel_exhausted (wrapTrap's layout is checked above).
func TestFuelTrapIsOutOfFuel(t *testing.T) {
	code := fuelTrap().Code()
	if code == nil || int(*code) != rawTrapOutOfFuel {
		t.Fatalf("fuelTrap().Code() = %v, want %d (out of fuel)", code, rawTrapOutOfFuel)
	}
}

// TestFenceStopsStore drives a fence directly on a bare store: the epoch
// callback must stop an endless loop at the deadline (stopTimedOut) or on
// cancel (stopCancelled).
func TestFenceStopsStore(t *testing.T) {
	const fenceHangBound = time.Minute
	cfg := wasmtime.NewConfig()
	cfg.SetEpochInterruption(true)
	eng := wasmtime.NewEngineWithConfig(cfg)
	wasm, err := wasmtime.Wat2Wasm(`(module (func (export "spin") (loop $l (br $l))))`)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := wasmtime.NewModule(eng, wasm)
	if err != nil {
		t.Fatal(err)
	}
	ticker := newEpochTicker(eng, time.Millisecond)
	defer ticker.close()

	cases := []struct {
		name    string
		timeout time.Duration
		cancel  time.Duration // 0: never
		want    stopReason
	}{
		{"deadline", 50 * time.Millisecond, 0, stopTimedOut},
		{"cancel", fenceHangBound, 50 * time.Millisecond, stopCancelled},
		{"cancel before start", fenceHangBound, -1, stopCancelled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := wasmtime.NewStore(eng)
			store.SetEpochDeadline(1)
			// The deadline runs from installFence, so the clock starts
			// before it: took is then never less than what the fence saw.
			start := time.Now()
			f, err := installFence(store, tc.timeout)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				store.Close()
				f.free()
			}()
			if f.reason() != stopNone {
				t.Fatalf("fresh fence has reason %d", f.reason())
			}
			inst, err := wasmtime.NewInstance(store, mod, nil)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.cancel < 0:
				f.cancel()
				f.cancel() // idempotent
			case tc.cancel > 0:
				timer := time.AfterFunc(tc.cancel, f.cancel)
				defer timer.Stop()
			}
			ticker.acquire()
			_, err = inst.GetFunc(store, "spin").Call(store)
			took := time.Since(start)
			ticker.release()
			if err == nil {
				t.Fatal("the endless loop returned")
			}
			t.Logf("stopped after %v: %v", took, firstLine(err.Error()))
			if got := f.reason(); got != tc.want {
				t.Errorf("reason = %d, want %d", got, tc.want)
			}
			if took > fenceHangBound {
				t.Errorf("took %v to stop", took) // a hang, not a speed check
			}
			if tc.want == stopTimedOut && took < tc.timeout {
				t.Errorf("stopped after %v, before the %v deadline", took, tc.timeout)
			}
		})
	}
}

// ---- WASI block of capi.h ----

// TestWasiDeclarationsMatchHeaders: the WASI functions capi.h declares by
// hand match wasi.h, and the wasm_byte_vec_t it builds stdin in matches
// wasm.h's macro-generated declaration.
func TestWasiDeclarationsMatchHeaders(t *testing.T) {
	inc := wasmtimeIncludeDir(t)
	wasiH := readFile(t, filepath.Join(inc, "wasi.h"))
	wasmH := readFile(t, filepath.Join(inc, "wasm.h"))
	capi := capiC(t)
	for _, fn := range []string{"wasi_config_set_stdin_bytes"} {
		want := cPrototype(t, wasiH, fn, nil)
		got := cPrototype(t, capi, fn, nil)
		t.Logf("%s: %s", fn, want)
		if got != want {
			t.Errorf("capi.h declares\n\t%s\nbut wasi.h declares\n\t%s", got, want)
		}
	}
	// wasm.h generates the byte vector with WASM_DECLARE_VEC(byte, ): a
	// {size_t size; wasm_byte_t *data;} struct and
	// wasm_byte_vec_new(out, size_t, const wasm_byte_t[]), wasm_byte_t
	// being char.
	for _, re := range []string{
		`typedef\s+char\s+byte_t\s*;`,
		`typedef\s+byte_t\s+wasm_byte_t\s*;`,
		`WASM_DECLARE_VEC\(byte,\s*\)`,
		`typedef struct wasm_##name##_vec_t \{\s*\\\s*size_t size;\s*\\\s*wasm_##name##_t ptr_or_none\* data;\s*\\\s*\} wasm_##name##_vec_t;`,
		`WASM_API_EXTERN void wasm_##name##_vec_new\(\s*\\\s*own wasm_##name##_vec_t\* out,\s*\\\s*size_t, own wasm_##name##_t ptr_or_none const\[\]\);`,
	} {
		if !regexp.MustCompile(re).MatchString(wasmH) {
			t.Errorf("wasm.h no longer matches %s: re-check wasm_byte_vec_t in capi.h", re)
		}
	}
	for _, decl := range []string{
		"typedef struct wasm_byte_vec_t {\n\tsize_t size;\n\tchar *data;\n} wasm_byte_vec_t;",
		"extern void wasm_byte_vec_new(wasm_byte_vec_t *out, size_t, const char[]);",
	} {
		if !strings.Contains(capi, decl) {
			t.Errorf("capi.h no longer declares %q: re-check this test", decl)
		}
	}
}

// TestWasiConfigLayout: wasiConfigPtr reads the first word of a
// wasmtime.WasiConfig as the *wasi_config_t.
func TestWasiConfigLayout(t *testing.T) {
	wantPtrField(t, reflect.TypeFor[wasmtime.WasiConfig](), "wasi_config", "wasiConfigPtr")
	cfg := wasmtime.NewWasiConfig()
	defer cfg.Close()
	if wasiConfigPtr(cfg) == nil {
		t.Fatal("wasiConfigPtr returned nil for a live config")
	}
}
