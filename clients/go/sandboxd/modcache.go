package sandboxd

import (
	"bytes"
	"encoding/json"
	"sync"

	"github.com/sandboxd/sandboxd/protocol"
)

// A module sent as WAT text or wasm bytes is usually sent again and again
// (a run per request, the same module). Encoding its JSON costs a scan
// and an escaping pass over the whole text per request (5–10 µs for
// 2.4 KB of WAT, more than the sidecar's decoding of it), so the client
// keeps the encoded form of the modules it sent last, keyed by their
// content: a module whose text changed is a new key, and is encoded anew.
// The lookup hashes the text (well under a microsecond for kilobytes).

const (
	moduleCacheEntries = 16      // modules whose encoding is kept
	moduleCacheBytes   = 8 << 20 // their encodings' total size
)

// moduleKey is a module's content: which field is set, and its value.
type moduleKey struct {
	wasm bool // false: WAT
	text string
}

type moduleCache struct {
	mu      sync.Mutex
	entries map[moduleKey][]byte
	size    int
}

// keyOf reports whether m is a module worth caching (exactly one of WAT
// and Wasm set, nothing else) and its key.
func keyOf(m protocol.ModuleSpec) (moduleKey, bool) {
	if m.ID != nil || m.Path != nil {
		return moduleKey{}, false
	}
	switch {
	case m.WAT != nil && m.Wasm == nil:
		return moduleKey{text: *m.WAT}, true
	case m.Wasm != nil && m.WAT == nil:
		return moduleKey{wasm: true, text: *m.Wasm}, true
	}
	return moduleKey{}, false
}

// encoded returns m's JSON, from the cache or encoded now (and kept if
// it fits). The bytes are shared: callers must not change them.
func (mc *moduleCache) encoded(k moduleKey, m protocol.ModuleSpec) ([]byte, error) {
	mc.mu.Lock()
	b, ok := mc.entries[k]
	mc.mu.Unlock()
	if ok {
		return b, nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	if len(b) > moduleCacheBytes/4 {
		return b, nil // a big module: not worth holding twice
	}
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if mc.entries == nil {
		mc.entries = make(map[moduleKey][]byte)
	}
	if _, ok := mc.entries[k]; ok {
		return b, nil // another caller kept it meanwhile
	}
	for old, ob := range mc.entries { // evict arbitrary entries until it fits
		if len(mc.entries) < moduleCacheEntries && mc.size+len(b) <= moduleCacheBytes {
			break
		}
		delete(mc.entries, old)
		mc.size -= len(ob)
	}
	mc.entries[k] = b
	mc.size += len(b)
	return b, nil
}

// withModule splits params whose first field is a cacheable module into
// the module and the params without it.
func withModule(params any) (m protocol.ModuleSpec, rest any, ok bool) {
	switch p := params.(type) {
	case protocol.RunParams:
		m, p.Module = p.Module, protocol.ModuleSpec{}
		rest = p
	case protocol.CompileParams:
		m, p.Module = p.Module, protocol.ModuleSpec{}
		rest = p
	case protocol.InstantiateParams:
		m, p.Module = p.Module, protocol.ModuleSpec{}
		rest = p
	default:
		return m, nil, false
	}
	return m, rest, true
}

// emptyModule is how the params without their module begin.
var emptyModule = []byte(`"params":{"module":{}`)

// encodeRequest returns the request's frame body: json.Marshal of the
// envelope, byte for byte, but with a module sent as WAT or wasm taken
// from the cache instead of encoded again.
func (c *Client) encodeRequest(id uint64, method string, params any) ([]byte, error) {
	m, rest, ok := withModule(params)
	var k moduleKey
	if ok {
		k, ok = keyOf(m)
	}
	if !ok {
		return json.Marshal(outMsg{JSONRPC: "2.0", ID: &id, Method: method, Params: params})
	}
	mod, err := c.modules.encoded(k, m)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(outMsg{JSONRPC: "2.0", ID: &id, Method: method, Params: rest})
	if err != nil {
		return nil, err
	}
	// Before "params" the envelope holds only the version, the id and the
	// method name, whose quotes would be escaped: the first match is the
	// params' module field (the first field of all three params types).
	at := bytes.Index(body, emptyModule)
	if at < 0 { // cannot happen; encode it the plain way
		return json.Marshal(outMsg{JSONRPC: "2.0", ID: &id, Method: method, Params: params})
	}
	at += len(emptyModule) - len("{}")
	out := make([]byte, 0, len(body)-2+len(mod))
	out = append(out, body[:at]...)
	out = append(out, mod...)
	out = append(out, body[at+2:]...)
	return out, nil
}
