package sandbox

import (
	"bytes"
	"testing"
)

// The sink never ends a piece inside a UTF-8 sequence the next write can
// complete, so "é" written a byte at a time, flushed between, goes out as
// one text piece; a sequence left incomplete at the end goes out then.
func TestOutputSinkKeepsUTF8SequencesWhole(t *testing.T) {
	var pieces []string
	s := newOutputSink(1<<10, func(stream string, data []byte) { pieces = append(pieces, stream+":"+string(data)) })
	s.write(1, []byte("a\xc3"))
	s.flush()
	s.write(2, []byte("x")) // a stream switch flushes stdout
	s.write(1, []byte("\xa9b\xe2\x82"))
	s.flush()
	out := s.finish()
	want := []string{"stdout:a", "stderr:x", "stdout:\xc3\xa9b", "stdout:\xe2\x82"}
	if len(pieces) != len(want) {
		t.Fatalf("pieces %q, want %q", pieces, want)
	}
	for i := range want {
		if pieces[i] != want[i] {
			t.Fatalf("pieces %q, want %q", pieces, want)
		}
	}
	if string(out.Stdout) != "a\xc3\xa9b\xe2\x82" || string(out.Stderr) != "x" || out.Truncated {
		t.Fatalf("output %q %q %v", out.Stdout, out.Stderr, out.Truncated)
	}
}

// One-byte pieces cost OutputPieceCost each: the stream stops at its wire
// budget, keeps exactly what it forwarded and says it was truncated.
func TestOutputSinkWireBudget(t *testing.T) {
	var sent []byte
	var cost uint64
	const raw = 1 << 10
	s := newOutputSink(raw, func(_ string, data []byte) {
		sent = append(sent, data...)
		cost += OutputPieceCost(data)
	})
	for range raw {
		s.write(1, []byte{0})
		s.flush()
	}
	out := s.finish()
	if cost > OutputWireBudget(raw) || !out.Truncated || !bytes.Equal(out.Stdout, sent) || len(sent) == 0 || len(sent) == raw {
		t.Fatalf("forwarded %d bytes costing %d (budget %d), kept %d, truncated %v",
			len(sent), cost, OutputWireBudget(raw), len(out.Stdout), out.Truncated)
	}
	if got := OutputPieceCost([]byte{0}); got != 8+OutputPieceOverhead { // "\u0000"
		t.Errorf("a NUL costs %d", got)
	}
	if got := OutputPieceCost([]byte{0xff}); got != 6+OutputPieceOverhead { // "/w=="
		t.Errorf("an invalid byte costs %d", got)
	}
}
