package sandbox_test

// A module is also known by how the parent sent it on the wire
// (Source.Encoded: the JSON string of its wat or wasm), so the sidecar
// finds a module sent again before unescaping or base64-decoding it.
// These tests pin that a literal only ever finds the module it was
// remembered with: not another field's, not a changed literal's.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/sandboxd/sandboxd/protocol"
	"github.com/sandboxd/sandboxd/sandbox"
)

func watLiteral(t *testing.T, text string) []byte {
	t.Helper()
	b, err := json.Marshal(text)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEncodedAliasFindsOnlyItsModule(t *testing.T) {
	t.Parallel()
	e := newEngine(t, sandbox.Config{})
	ctx := context.Background()
	textA, textB := uniqueWAT("encoded-a"), uniqueWAT("encoded-b")
	litA, litB := watLiteral(t, textA), watLiteral(t, textB)
	encoded := func(field string, lit []byte) sandbox.Source {
		return sandbox.Source{Encoded: &protocol.Encoded{Field: field, Literal: lit}}
	}
	if m, ok := e.Lookup(encoded("wat", litA)); ok {
		t.Fatalf("a literal never sent found %s", m.ID)
	}
	a, _, err := e.Compile(ctx, sandbox.Source{WAT: textA, Encoded: &protocol.Encoded{Field: "wat", Literal: litA}})
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := e.Compile(ctx, sandbox.Source{WAT: textB, Encoded: &protocol.Encoded{Field: "wat", Literal: litB}})
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == b.ID {
		t.Fatal("two different modules share an id")
	}
	if m, ok := e.Lookup(encoded("wat", litA)); !ok || m.ID != a.ID {
		t.Fatalf("a's literal: %v %v, want %s", m, ok, a.ID)
	}
	if m, ok := e.Lookup(encoded("wat", litB)); !ok || m.ID != b.ID {
		t.Fatalf("b's literal: %v %v, want %s", m, ok, b.ID)
	}
	// One byte changed anywhere (here inside the export name: still a
	// valid literal of a valid module) is a different literal.
	for i := 1; i < len(litA)-1; i++ {
		mutated := append([]byte(nil), litA...)
		mutated[i] ^= 1
		if m, ok := e.Lookup(encoded("wat", mutated)); ok {
			t.Fatalf("literal changed at byte %d found %s", i, m.ID)
		}
	}
	// The same bytes as another field's literal, or as the module's bytes
	// themselves, are another source.
	if m, ok := e.Lookup(encoded("wasm", litA)); ok {
		t.Fatalf("a's wat literal, as a wasm literal, found %s", m.ID)
	}
	if m, ok := e.Lookup(sandbox.Source{WAT: string(litA)}); ok {
		t.Fatalf("a's literal as a WAT text found %s", m.ID)
	}
	// A longer literal with a's as its prefix is not a's.
	if m, ok := e.Lookup(encoded("wat", append(append([]byte(nil), litA...), ' '))); ok {
		t.Fatalf("a's literal with a byte appended found %s", m.ID)
	}
}

// A module known by its bytes becomes known by a new literal of them when
// a Lookup gives both, and a wasm literal is told apart from a wat one.
func TestEncodedAliasLearnedFromBytes(t *testing.T) {
	t.Parallel()
	e := newEngine(t, sandbox.Config{})
	ctx := context.Background()
	text := uniqueWAT("encoded-learn")
	wasm := mustWat2Wasm(t, text)
	m, _, err := e.Compile(ctx, sandbox.Source{Wasm: wasm})
	if err != nil {
		t.Fatal(err)
	}
	lit := []byte(`"` + base64.StdEncoding.EncodeToString(wasm) + `"`)
	enc := &protocol.Encoded{Field: "wasm", Literal: lit}
	if _, ok := e.Lookup(sandbox.Source{Encoded: enc}); ok {
		t.Fatal("a literal never sent was found")
	}
	if got, ok := e.Lookup(sandbox.Source{Wasm: wasm, Encoded: enc}); !ok || got.ID != m.ID {
		t.Fatalf("by bytes with a literal: %v %v", got, ok)
	}
	if got, ok := e.Lookup(sandbox.Source{Encoded: enc}); !ok || got.ID != m.ID {
		t.Fatalf("the literal learned: %v %v", got, ok)
	}
	if got, ok := e.Lookup(sandbox.Source{Encoded: &protocol.Encoded{Field: "wat", Literal: lit}}); ok {
		t.Fatalf("the wasm literal as a wat literal found %s", got.ID)
	}
}
