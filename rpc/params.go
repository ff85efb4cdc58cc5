package rpc

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/internal/jsonscan"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/protocol"
)

// runSpec is a decoded `run` request, before the module is compiled.
type runSpec struct {
	source   protocol.Source
	function string
	args     []json.RawMessage
	limits   limits.Limits
	caps     protocol.Capabilities
	// A plugin run's (params_instance.go): nil input is none given.
	input  []byte
	config map[string]string
	// defaultFunction: function was omitted, so a WASI command's _start
	// is called when the module exports one (compileRun decides).
	defaultFunction bool
}

// object decodes raw as a JSON object whose keys are all in allowed,
// naming field (its path) in every error. Unknown keys are refused so that
// a typo ("timeout" for "timeoutMs") is an error, not a silent default.
func object(raw json.RawMessage, field string, allowed ...string) (map[string]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, paramErr(field, "must be an object, got %s", kindOfJSON(raw))
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, paramErr(field, "must be an object: %v", err)
	}
	for k, v := range obj {
		if contains(allowed, k) && isNull(v) {
			delete(obj, k) // null is absent
			continue
		}
		if !contains(allowed, k) {
			if k == "" {
				return nil, paramErr(field, "unknown field \"\" (allowed: %s)", strings.Join(allowed, ", "))
			}
			return nil, paramErr(join(field, protocol.Escape(k)), "unknown field (allowed: %s)", strings.Join(allowed, ", "))
		}
	}
	return obj, nil
}

func join(parent, child string) string {
	if parent == "params" || parent == "" {
		return child
	}
	return parent + "." + child
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func kindOfJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func stringField(raw json.RawMessage, field string) (string, error) {
	if s, ok := plainString(raw); ok {
		return s, nil
	}
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", paramErr(field, "must be a string, got %s", kindOfJSON(bytes.TrimSpace(raw)))
	}
	return s, nil
}

// plainString returns the content of a JSON string literal that needs no
// unescaping: no backslash, no control character, valid UTF-8. A base64
// module of tens of MiB is such a string, and this saves decoding it twice.
func plainString(raw json.RawMessage) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	body := raw[1 : len(raw)-1]
	for _, c := range body {
		if c < 0x20 || c == '\\' || c == '"' {
			return "", false
		}
	}
	if !utf8.Valid(body) {
		return "", false
	}
	return string(body), true
}

func boolField(raw json.RawMessage, field string) (bool, error) {
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, paramErr(field, "must be true or false, got %s", kindOfJSON(bytes.TrimSpace(raw)))
	}
	return b, nil
}

// uintField reads a JSON integer >= 0 (or, if allowString, a decimal
// string: digits, with an optional sign) that fits in 64 bits. positive
// only words the message for a negative value: the caller checks for zero.
func uintField(raw json.RawMessage, field string, allowString, positive bool) (uint64, error) {
	raw = bytes.TrimSpace(raw)
	lit := string(raw)
	if allowString && len(raw) > 0 && raw[0] == '"' {
		if err := json.Unmarshal(raw, &lit); err != nil || !decimalDigits(lit) {
			// Not any float text: big.ParseFloat, below, also reads
			// "1p3" (8) and ".5e1".
			return 0, paramErr(field, "must be an integer, got the string %s", protocol.Quote(lit))
		}
	} else if len(raw) == 0 || !(raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')) {
		return 0, paramErr(field, "must be an integer, got %s", kindOfJSON(raw))
	}
	if len(lit) > 400 {
		return 0, paramErr(field, "must be an integer that fits in 64 bits")
	}
	if len(lit) > 0 && len(lit) < 20 && (len(lit) == 1 || lit[0] != '0') && strings.Trim(lit, "0123456789") == "" {
		if n, err := strconv.ParseUint(lit, 10, 64); err == nil { // plain digits: the usual case
			return n, nil
		}
	}
	n, ok := protocol.ExactInteger(lit)
	if !ok {
		return 0, paramErr(field, "must be an integer, got %s", lit)
	}
	if n.Sign() < 0 {
		if positive {
			return 0, paramErr(field, "must be > 0, got %s", lit)
		}
		return 0, paramErr(field, "must be >= 0, got %s", lit)
	}
	if !n.IsUint64() {
		return 0, paramErr(field, "must be at most %d", uint64(math.MaxUint64))
	}
	return n.Uint64(), nil
}

// decimalDigits reports whether s is digits with an optional sign.
func decimalDigits(s string) bool {
	digits := strings.TrimLeft(s, "+-")
	return digits != "" && len(s)-len(digits) <= 1 && strings.Trim(digits, "0123456789") == ""
}

// decodeModule reads a module spec: exactly one of wat, wasm, id, path.
// raw must be valid JSON (a member of params that were checked).
func decodeModule(raw json.RawMessage, field string) (protocol.Source, error) {
	obj, err := validObject(raw, field, "wat", "wasm", "id", "path")
	if err != nil {
		return protocol.Source{}, err
	}
	if len(obj) != 1 {
		return protocol.Source{}, paramErr(field, "give exactly one of wat, wasm, id, path (got %d)", len(obj))
	}
	var src protocol.Source
	for k, v := range obj {
		if k == "wasm" {
			if src.Wasm, err = decodeBase64(v, join(field, k)); err != nil {
				return src, err
			}
			continue
		}
		s, err := validStringField(v, join(field, k))
		if err != nil {
			return src, err
		}
		if s == "" {
			return src, paramErr(join(field, k), "must not be empty")
		}
		switch k {
		case "wat":
			src.WAT = s
		case "id":
			if !strings.HasPrefix(s, protocol.IDPrefix) {
				return src, paramErr(join(field, k), "must look like %s<hex>, got %s", protocol.IDPrefix, protocol.Quote(s))
			}
			src.ID = s
		case "path":
			src.Path = s
		}
	}
	return src, nil
}

// decodeRunModule is decodeModule for a run, whose module is looked up
// by how it came on the wire before anything is decoded: wat and wasm are
// left as their JSON literals (Source.Encoded), checked only for being
// non-empty strings. decodeEncoded decodes them, with decodeModule's
// errors, when the literal is not known.
func decodeRunModule(raw json.RawMessage, field string) (protocol.Source, error) {
	obj, err := validObject(raw, field, "wat", "wasm", "id", "path")
	if err != nil {
		return protocol.Source{}, err
	}
	if len(obj) != 1 {
		return protocol.Source{}, paramErr(field, "give exactly one of wat, wasm, id, path (got %d)", len(obj))
	}
	for _, k := range []string{"wat", "wasm"} {
		v, ok := obj[k]
		if !ok {
			continue
		}
		v = bytes.TrimSpace(v)
		if len(v) == 0 || v[0] != '"' {
			return protocol.Source{}, paramErr(join(field, k), "must be a string, got %s", kindOfJSON(v))
		}
		if len(v) == 2 {
			return protocol.Source{}, paramErr(join(field, k), "must not be empty")
		}
		return protocol.Source{Encoded: &protocol.Encoded{Field: k, Literal: v}}, nil
	}
	return decodeModule(raw, field)
}

// decodeEncoded decodes the wat or wasm that decodeRunModule left encoded
// (nothing, if src was decoded already or is an id or path). The literal
// stays in src: Compile remembers the module by it.
func decodeEncoded(src *protocol.Source) error {
	e := src.Encoded
	if e == nil || src.WAT != "" || src.Wasm != nil {
		return nil
	}
	field := join("module", e.Field)
	switch e.Field {
	case "wasm":
		b, err := decodeBase64(e.Literal, field)
		if err != nil {
			return err
		}
		src.Wasm = b
	case "wat":
		s, err := validStringField(e.Literal, field)
		if err != nil {
			return err
		}
		src.WAT = s
	}
	return nil
}

// decodeBase64 decodes the valid JSON string raw as base64, straight from
// the message when it has no escapes (a module of tens of MiB is copied
// once, into its bytes).
func decodeBase64(raw json.RawMessage, field string) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '"' {
		return nil, paramErr(field, "must be a string, got %s", kindOfJSON(raw))
	}
	text := raw[1 : len(raw)-1]
	if bytes.IndexByte(text, '\\') >= 0 {
		text = []byte(validString(raw))
	}
	if len(text) == 0 {
		return nil, paramErr(field, "must not be empty")
	}
	b := make([]byte, base64.StdEncoding.DecodedLen(len(text)))
	n, err := base64.StdEncoding.Decode(b, text)
	if err != nil {
		return nil, paramErr(field, "not valid base64: %v", err)
	}
	return b[:n], nil
}

// limitNames are the names of limits.Fields.
var limitNames = func() []string {
	names := make([]string, len(limits.Fields))
	for i, f := range limits.Fields {
		names[i] = f.Name
	}
	return names
}()

// decodeLimits overlays the given fields on defaults and checks them
// against the server's maximums. raw must be valid JSON.
func decodeLimits(raw json.RawMessage, defaults, max limits.Limits) (limits.Limits, error) {
	l := defaults
	if raw == nil {
		return l, nil
	}
	obj, err := validObject(raw, "limits", limitNames...)
	if err != nil {
		return l, err
	}
	return limitsFrom(obj, defaults, max)
}

// limitsFrom overlays the limits.Fields members of obj (its other members
// are the caller's) on defaults and checks them against max.
func limitsFrom(obj map[string]json.RawMessage, defaults, max limits.Limits) (limits.Limits, error) {
	l := defaults
	for _, f := range limits.Fields {
		v, ok := obj[f.Name]
		if !ok {
			continue
		}
		n, err := uintField(v, "limits."+f.Name, false, true)
		if err != nil {
			return l, err
		}
		if n == 0 {
			return l, paramErr("limits."+f.Name, "must be > 0")
		}
		if f.Name == "timeoutMs" && n > uint64(math.MaxInt64/1_000_000) {
			return l, paramErr("limits.timeoutMs", "must be <= %d (the sidecar's maximum)", f.Get(max))
		}
		f.Set(&l, n)
	}
	if err := l.Validate(max); err != nil {
		var fe *limits.FieldError
		if asFieldError(err, &fe) {
			return l, paramErr("limits."+fe.Field, "%s", fe.Problem)
		}
		return l, paramErr("limits", "%v", err)
	}
	return l, nil
}

func asFieldError(err error, target **limits.FieldError) bool {
	fe, ok := err.(*limits.FieldError)
	if ok {
		*target = fe
	}
	return ok
}

// decodeCapabilities reads a run's grants; raw must be valid JSON.
func decodeCapabilities(raw json.RawMessage) (protocol.Capabilities, error) {
	var caps protocol.Capabilities
	if raw == nil || string(bytes.TrimSpace(raw)) == "null" {
		return caps, nil
	}
	obj, err := validObject(raw, "capabilities", "log", "random", "clock", "wasi")
	if err != nil {
		return caps, err
	}
	if v, ok := obj["wasi"]; ok {
		if caps.WASI, err = decodeWASI(v); err != nil {
			return caps, err
		}
	}
	if v, ok := obj["log"]; ok {
		if caps.Log, err = boolField(v, "capabilities.log"); err != nil {
			return caps, err
		}
	}
	if v, ok := obj["clock"]; ok {
		if caps.Clock, err = boolField(v, "capabilities.clock"); err != nil {
			return caps, err
		}
	}
	if v, ok := obj["random"]; ok {
		r, err := object(v, "capabilities.random", "seed")
		if err != nil {
			return caps, err
		}
		seed, ok := r["seed"]
		if !ok {
			return caps, paramErr("capabilities.random.seed", "required (an integer 0..2^64-1 or a decimal string)")
		}
		if caps.Seed, err = uintField(seed, "capabilities.random.seed", true, false); err != nil {
			return caps, err
		}
		caps.Random = true
	}
	return caps, nil
}

// MaxArgs is the most args a run may pass: wasm's limit on a function's
// parameters (wasmparser's, which wasmtime applies). A longer array is
// refused before its elements are decoded, so a message of millions of
// args costs no more than its own size.
const MaxArgs = 1000

// countElements counts the top-level elements of the JSON array raw,
// stopping past limit: it returns the count so far and false then. It
// allocates nothing; the array's syntax is checked by the decoding that
// follows.
func countElements(raw []byte, limit int) (int, bool) {
	n, depth, inString, escaped, empty := 0, 0, false, false, true
	for _, c := range raw {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			if depth == 1 {
				continue
			}
		case c == ']' || c == '}':
			depth--
		case c == ',' && depth == 1:
			n++
			if n >= limit {
				return n + 1, false
			}
			continue
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			continue
		}
		if depth >= 1 {
			empty = false
		}
	}
	if empty {
		return 0, true
	}
	return n + 1, true
}

// runFields are the members of `run`'s params.
var runFields = []string{"module", "function", "args", "limits", "capabilities", "input", "config"}

// decodeRun reads the params of `run` from any bytes.
func decodeRun(raw json.RawMessage, defaults, max limits.Limits) (*runSpec, error) {
	if !json.Valid(raw) {
		return nil, invalidParams(raw, runFields)
	}
	spec, err := decodeScreenedRun(raw, defaults, max)
	if err != nil {
		return nil, err
	}
	if err := decodeEncoded(&spec.source); err != nil {
		return nil, err
	}
	return spec, nil
}

// invalidParams is the error of params that are not valid JSON.
func invalidParams(raw json.RawMessage, fields []string) error {
	if _, err := object(raw, "params", fields...); err != nil {
		return err
	}
	return paramErr("params", "must be an object")
}

// decodeScreenedRun reads the params of `run` from a message that
// screening checked: raw is valid JSON (fastjson.go). A module sent as
// wat or wasm is left encoded (decodeRunModule): the caller looks it up
// by its literal first, and decodes it (decodeEncoded) if that fails.
func decodeScreenedRun(raw json.RawMessage, defaults, max limits.Limits) (*runSpec, error) {
	spec, err := decodeRunFields(raw, defaults, max)
	if err != nil && spec != nil && spec.source.Encoded != nil {
		// A later member's problem: the module's own, if it has one, is
		// named first, as when the module was decoded before the rest.
		if merr := decodeEncoded(&spec.source); merr != nil {
			return nil, merr
		}
	}
	if err != nil {
		return nil, err
	}
	return spec, nil
}

// decodeRunFields is decodeScreenedRun, but on an error found after the
// module it returns the spec so far with the error.
func decodeRunFields(raw json.RawMessage, defaults, max limits.Limits) (*runSpec, error) {
	obj, err := validObject(raw, "params", runFields...)
	if err != nil {
		return nil, err
	}
	spec := &runSpec{function: "run", defaultFunction: true}
	if err := decodePluginRun(obj, spec); err != nil {
		return nil, err
	}
	m, ok := obj["module"]
	if !ok {
		return nil, paramErr("module", "required: one of {wat}, {wasm}, {id}, {path}")
	}
	if spec.source, err = decodeRunModule(m, "module"); err != nil {
		return spec, err
	}
	if v, ok := obj["function"]; ok {
		spec.defaultFunction = false
		if spec.function, err = validStringField(v, "function"); err != nil {
			return spec, err
		}
		if spec.function == "" {
			return spec, paramErr("function", "must not be empty")
		}
	}
	if v, ok := obj["args"]; ok {
		v = bytes.TrimSpace(v)
		if len(v) == 0 || (v[0] != '[' && string(v) != "null") {
			return spec, paramErr("args", "must be an array, got %s", kindOfJSON(v))
		}
		if n, ok := countElements(v, MaxArgs); !ok {
			return spec, paramErr("args", "has more than %d elements: no wasm function takes more than %d parameters", n-1, MaxArgs)
		}
		if string(v) != "null" {
			spec.args = jsonscan.Elements(v)
		}
	}
	if spec.limits, err = decodeLimits(obj["limits"], defaults, max); err != nil {
		return spec, err
	}
	spec.source.CompileTimeout, spec.source.CompileMemoryBytes = spec.limits.CompileTimeout, spec.limits.CompileMemoryBytes
	if spec.caps, err = decodeCapabilities(obj["capabilities"]); err != nil {
		return spec, err
	}
	return spec, nil
}

// compileLimitFields are the limits that mean something to `compile`.
var compileLimitFields = []string{"compileTimeoutMs", "compileMemoryBytes"}

// decodeCompile reads the params of `compile`. Its limits may set only
// the compile fields: a run limit there would have nothing to fence, and
// is refused naming it rather than silently ignored.
func decodeCompile(raw json.RawMessage, defaults, max limits.Limits) (protocol.Source, error) {
	if !json.Valid(raw) {
		return protocol.Source{}, invalidParams(raw, []string{"module", "limits"})
	}
	obj, err := validObject(raw, "params", "module", "limits")
	if err != nil {
		return protocol.Source{}, err
	}
	m, ok := obj["module"]
	if !ok {
		return protocol.Source{}, paramErr("module", "required: one of {wat}, {wasm}, {id}, {path}")
	}
	src, err := decodeModule(m, "module")
	if err != nil {
		return src, err
	}
	l := defaults
	if v, ok := obj["limits"]; ok {
		if err := onlyCompileLimits(v); err != nil {
			return src, err
		}
		if l, err = decodeLimits(v, defaults, max); err != nil {
			return src, err
		}
	}
	src.CompileTimeout, src.CompileMemoryBytes = l.CompileTimeout, l.CompileMemoryBytes
	return src, nil
}

// onlyCompileLimits refuses a limit of `compile` that fences a run.
// Unknown names and non-objects are left to decodeLimits.
func onlyCompileLimits(raw json.RawMessage) error {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return nil
	}
	for _, f := range limits.Fields {
		if _, ok := obj[f.Name]; ok && !contains(compileLimitFields, f.Name) {
			return paramErr("limits."+f.Name, "does not apply to compile (only %s do)", strings.Join(compileLimitFields, ", "))
		}
	}
	return nil
}

// decodeArgs converts raw args to values of the export's parameter types.
// A count mismatch is left to the engine, which reports it as an export
// error naming the signature.
func decodeArgs(raw []json.RawMessage, params []string) ([]protocol.Value, error) {
	if len(raw) != len(params) {
		vals := make([]protocol.Value, len(raw))
		for i := range vals {
			vals[i] = protocol.Value{Type: "?"}
		}
		return vals, nil
	}
	vals := make([]protocol.Value, len(raw))
	for i, r := range raw {
		ty := protocol.ValType(params[i])
		if !contains([]string{"i32", "i64", "f32", "f64"}, params[i]) {
			return nil, nil // the engine reports the unsupported type
		}
		v, err := protocol.DecodeArg(r, ty)
		if err != nil {
			return nil, paramErr(argField(i), "%v", err)
		}
		vals[i] = v
	}
	return vals, nil
}

func argField(i int) string { return "args[" + strconv.Itoa(i) + "]" }
