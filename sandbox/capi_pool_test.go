package sandbox

// Guards of the pooling block of capi.h and capi.c (capi_test.go's, for what
// issue 24 bound): its declarations agree with the pinned headers, and
// configPtr reads wasmtime-go's Config as it is laid out.

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/sandboxd/sandboxd/limits"
)

// poolBlockMarker opens the pooling block, the last of capi.h and of capi.c.
const poolBlockMarker = "// ---- the pooling instance allocator (config.h) ----"

// TestPoolDeclarationsMatchHeaders compiles the pooling block after the
// pinned <wasmtime.h>: a declaration whose types differ from the header's
// is a conflicting-types error, and a setter the headers lack (the
// pooling feature compiled out) an undeclared one at link time at the
// latest, here an implicit-declaration error. Every setter sbx_pool_set
// calls must be one of the block's declarations.
func TestPoolDeclarationsMatchHeaders(t *testing.T) {
	inc := wasmtimeIncludeDir(t)
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler:", err)
	}
	conf := readFile(t, filepath.Join(inc, "wasmtime", "conf.h"))
	if !regexp.MustCompile(`(?m)^#define WASMTIME_FEATURE_POOLING_ALLOCATOR\b`).MatchString(conf) {
		t.Fatal("the pinned wasmtime is built without the pooling allocator")
	}
	var block string
	for _, file := range []string{"capi.h", "capi.c"} {
		src := strings.TrimSuffix(strings.TrimSpace(readFile(t, file)), "#endif")
		i := strings.Index(src, poolBlockMarker)
		if i < 0 {
			t.Fatalf("%s has no %q", file, poolBlockMarker)
		}
		block += src[i:] + "\n"
	}
	declared := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^extern [^;(]*?\b(wasmtime_\w+)\(`).FindAllStringSubmatch(block, -1) {
		declared[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`\b(wasmtime_\w+)\(`).FindAllStringSubmatch(block, -1) {
		if !declared[m[1]] {
			t.Errorf("the pooling block calls %s without declaring it", m[1])
		}
	}
	if len(declared) < 10 {
		t.Fatalf("only %d declarations found in the pooling block: re-check this test", len(declared))
	}
	dir := t.TempDir()
	compile := func(block string) ([]byte, error) {
		src := "#include <stdint.h>\n#include <stddef.h>\n#include <wasmtime.h>\n" + block
		path := filepath.Join(dir, "pool.c")
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return exec.Command(cc, "-std=c11", "-Werror", "-Wall", "-Wno-unused-function", "-fsyntax-only", "-I", inc, path).CombinedOutput()
	}
	if out, err := compile(block); err != nil {
		t.Fatalf("the pooling block of capi.h and capi.c does not agree with the pinned headers: %v\n%s", err, out)
	}
	// The check can fail: a declaration with a wrong type does not compile.
	const right = "total_memories_set(wasmtime_pooling_allocation_config_t *, uint32_t)"
	if !strings.Contains(block, right) {
		t.Fatalf("the pooling block no longer declares %q: re-check this test", right)
	}
	if _, err := compile(strings.Replace(block, right, "total_memories_set(wasmtime_pooling_allocation_config_t *, uint64_t)", 1)); err == nil {
		t.Fatal("a declaration of the wrong type compiled: the check proves nothing")
	}
	t.Logf("%d declarations agree with the headers", len(declared))
}

// TestConfigLayout: configPtr reads the first word of a wasmtime.Config
// as the *wasm_config_t.
func TestConfigLayout(t *testing.T) {
	wantPtrField(t, reflect.TypeFor[wasmtime.Config](), "wasm_config", "configPtr")
	cfg := wasmtime.NewConfig()
	if configPtr(cfg) == nil {
		t.Fatal("configPtr returned nil for a live config")
	}
	// A config the pooling block set builds an engine: the settings are
	// ones wasmtime accepts (it aborts the process on a bad one).
	if err := setPooling(cfg, newEnginePool(Config{MaxRuns: 1, MaxInstances: 1, Maximums: limits.DefaultMaximums()}).settings); err != nil {
		t.Fatal(err)
	}
	wasmtime.NewEngineWithConfig(cfg).Close()
}

// wantPtrField checks that the first field of the wasmtime-go type ty is
// _ptr, at offset 0, a pointer to a C type whose name contains elem: what
// the reader named reads through unsafe.
func wantPtrField(t *testing.T, ty reflect.Type, elem, reader string) {
	t.Helper()
	if ty.NumField() == 0 {
		t.Fatalf("%s has no fields", ty)
	}
	f := ty.Field(0)
	if f.Name != "_ptr" || f.Offset != 0 || f.Type.Kind() != reflect.Pointer {
		t.Fatalf("%s's first field is %s (%s) at offset %d, want pointer _ptr at 0: %s in capi.go is wrong", ty, f.Name, f.Type, f.Offset, reader)
	}
	if name := f.Type.Elem().Name(); !strings.Contains(name, elem) {
		t.Fatalf("%s._ptr points to %q, want a %s type", ty, name, elem)
	}
}
