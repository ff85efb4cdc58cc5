package mcpserver

import (
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/protocol"
)

// What a tool's answer holds, and its size (docs/mcp.md, "What an answer
// holds"). The structured content has every field, and the guest's
// output (stdout, stderr, a plugin's output, a snippet's value, log
// lines) once, as the sidecar writes it: bytes as protocol.Bytes ({"text"}
// when they are UTF-8 and their JSON string is no longer than their
// base64, else {"base64"}: Bytes.AsText), so each costs at most 4/3 of
// its bytes on the wire however the guest fills it (a NUL is six bytes as text). The text
// content is for clients that read only text: the same answer rendered
// for a reader (the kind and message, the exit code, the value, the
// output), within maxTextBytes on the wire; output that does not fit is
// shown by its first bytes and a note naming the structured field that
// has it all (or only the note, for output that is not text).
//
// MCP says a tool with an output schema SHOULD also return its
// structured content serialized in a text content, for clients that
// predate structured content. That would be the output twice; the text
// here is instead the same answer as a reader wants it, and whole when it
// is small, which is the case the recommendation is for.

const (
	// maxTextBytes bounds the text content, as its JSON string costs on
	// the wire (escapes included).
	maxTextBytes = 8 << 10
	// textPreviewBytes bounds the first bytes shown of one output that
	// does not fit whole, so that a later one has room too.
	textPreviewBytes = 2 << 10
	// textReserveBytes is what showing one output whole leaves for the
	// rest of the text (the outputs after it, their notes).
	textReserveBytes = 1 << 10
	// maxErrorTextBytes bounds an error's message and maxErrorDataText
	// each text of its data (a plugin's own message, a script error's
	// stack trace), on the wire; the names in its data are cut to
	// protocol.MaxQuotedBytes.
	maxErrorTextBytes = 2 << 10
	maxErrorDataText  = 6 << 10
)

// wireLen is what s costs as a JSON string on the wire, quotes excluded
// (as encoding/json writes it; the SDK, which does not escape <, > and
// &, writes no more).
func wireLen(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // something escapes, or is not ASCII
			return len(b) - 2
		}
	}
	return len(s)
}

// cutToWire is s cut (on a rune boundary, "…" after the cut) so that its
// JSON string costs at most limit bytes.
func cutToWire(s string, limit int) string {
	if len(s) <= limit && wireLen(s) <= limit { // a byte costs at least one
		return s
	}
	if limit <= len("…") {
		return ""
	}
	return fitWire(s, limit-len("…")) + "…"
}

// fitWire is the longest prefix of s (found in a few steps: each cuts in
// proportion to the excess) whose JSON string costs at most limit bytes.
func fitWire(s string, limit int) string {
	if limit <= 0 {
		return ""
	}
	p := protocol.CutUTF8(s, limit)
	for {
		c := wireLen(p)
		if c <= limit {
			return p
		}
		p = protocol.CutUTF8(p, len(p)*limit/c) // shorter: c > limit
	}
}

// text builds a text content within maxTextBytes on the wire.
type text struct {
	b    strings.Builder
	left int // what the text may still cost
}

func newText(head string) *text {
	t := &text{left: maxTextBytes}
	t.add(head)
	return t
}

func (t *text) String() string { return t.b.String() }

// add appends s, cut to what is left.
func (t *text) add(s string) {
	if t.left <= 0 {
		return
	}
	s = cutToWire(s, t.left)
	t.left -= wireLen(s)
	t.b.WriteString(s)
}

// room is what one output may cost shown whole: what is left less the
// reserve for the rest.
func (t *text) room() int { return t.left - textReserveBytes }

// output appends one output of the guest's, in full when it is text (as
// the structured content carries it, protocol.Bytes.AsText) that fits;
// else its first bytes, if it is text, or else only a note, naming field,
// the structured member that has it all. label names it: "stdout",
// "stderr until it stopped". inline: "label: bytes" on the line (a
// plugin's output), else a section "\n--- label ---\nbytes".
func (t *text) output(label, field string, data []byte, inline bool) {
	head := "\n--- " + label + " ---\n"
	if inline {
		head = label + ": "
	}
	asText := protocol.Bytes(data).AsText() // as the structured content has them
	if asText && len(data) <= t.room() && wireLen(string(data)) <= t.room()-len(head) {
		t.add(head + string(data))
		return
	}
	size := itoa(uint64(len(data)))
	where := "structuredContent." + field
	if !asText {
		if inline {
			t.add(head + "(" + size + " bytes, not text: base64 in " + where + ")")
		} else {
			t.add("\n--- " + label + ": " + size + " bytes, not text (base64 in " + where + ") ---")
		}
		return
	}
	preview := data[:min(len(data), textPreviewBytes)]
	preview = preview[:len(preview)-protocol.IncompleteUTF8Tail(preview)]
	shown := fitWire(string(preview), min(textPreviewBytes, t.room())-len("…"))
	note := "the first " + itoa(uint64(len(shown))) + " of " + size + " bytes; all of them in " + where
	if len(shown) < len(data) {
		shown += "…"
	}
	if inline {
		t.add(label + " (" + note + "): " + shown)
	} else {
		t.add("\n--- " + label + " (" + note + ") ---\n" + shown)
	}
}

// lines appends a section of n lines (a run's log; line(i) is the i-th)
// whole if it fits, else as many first lines as fit the preview (the
// last perhaps cut), with a note naming field.
func (t *text) lines(label, field string, n int, line func(i int) string) {
	if n == 0 {
		return
	}
	head := "\n--- " + label + " ---\n"
	var all []string
	total := len(head)
	for i := 0; i < n && total <= t.room(); i++ {
		all = append(all, line(i))
		total += len(all[i]) + 1
	}
	if total <= t.room() {
		if joined := strings.Join(all, "\n"); wireLen(joined) <= t.room()-len(head) {
			t.add(head + joined)
			return
		}
	}
	budget := min(textPreviewBytes, t.room())
	var shown []string
	cost := 0
	for i := 0; i < n && cost < budget; i++ {
		l := line(i)
		cut := cutToWire(l, budget-cost-2)
		if cut == "" && l != "" {
			break
		}
		shown = append(shown, cut)
		cost += wireLen(cut) + 2
		if len(cut) < len(l) {
			break
		}
	}
	t.add("\n--- " + label + " (the first " + itoa(uint64(len(shown))) + " of " + itoa(uint64(n)) +
		" lines; all of them in structuredContent." + field + ") ---\n" + strings.Join(shown, "\n"))
}

// bounded is e as an answer carries it: its message cut to
// maxErrorTextBytes on the wire, its data's texts to maxErrorDataText and
// its names (a frame's function, from the module's name section; a
// module, an import) to protocol.MaxQuotedBytes. The engine bounds each
// (a plugin's message at 16 KiB, a script's at 1 KiB and its trace at 4
// KiB), but as raw bytes, which escape to six each; the frames' names not
// at all.
func (e *toolError) bounded() *toolError {
	out := *e
	out.Message = cutToWire(e.Message, maxErrorTextBytes)
	if e.Data == nil {
		return &out
	}
	d := *e.Data
	for _, s := range []**string{&d.Message, &d.Text} {
		if *s != nil {
			v := cutToWire(**s, maxErrorDataText)
			*s = &v
		}
	}
	for _, s := range []**string{&d.Module, &d.Name, &d.Function} {
		if *s != nil {
			v := protocol.Bounded(**s)
			*s = &v
		}
	}
	d.Resource = protocol.Bounded(d.Resource)
	d.TrapCode = protocol.Bounded(d.TrapCode)
	if d.Frames != nil {
		d.Frames = append([]protocol.FrameInfo(nil), d.Frames...)
		for i := range d.Frames {
			d.Frames[i].Func = protocol.Bounded(d.Frames[i].Func)
		}
	}
	out.Data = &d
	return &out
}
