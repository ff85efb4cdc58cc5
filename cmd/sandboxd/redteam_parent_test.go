package main

// Red team, hostile or careless parent: regressions for what an attack on
// the sidecar's stdin found, each through the real binary.

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestLongIDsDoNotMultiplyLogNotifications: every `log` notification
// carries its run's id, and the engine's log budget charges each line for
// an id of at most 32 bytes. A parent that sent a 100 KB id got that id
// copied into every notification: a guest logging empty lines made 4,150
// notifications (415 MB queued, sidecar RSS 549 MiB) in 6 s under the
// default logBytes of 1 MiB, and a parent that did not read held them all
// in the sidecar's memory. The sidecar now charges each notification its
// real wire size, id included, against logBytes.
func TestLongIDsDoNotMultiplyLogNotifications(t *testing.T) {
	s := startWire(t)
	const logBytes = 256 << 10
	for _, id := range []string{
		`"` + strings.Repeat("i", 16<<10) + `"`,
		// < costs six bytes as the sidecar encodes it (and as sent here,
		// since wireSidecar compares ids as raw bytes).
		`"` + strings.Repeat(`\u003c`, 4<<10) + `"`,
	} {
		logs, resp := s.run(t, id, map[string]any{
			"module":       map[string]any{"wat": logGuest("", 100_000)},
			"args":         []any{0},
			"limits":       map[string]any{"logBytes": logBytes, "fuel": hugeFuel, "timeoutMs": 60_000},
			"capabilities": map[string]any{"log": true},
		})
		var res struct {
			LogLines     int  `json:"logLines"`
			LogTruncated bool `json:"logTruncated"`
		}
		if resp.err != nil || json.Unmarshal(resp.result, &res) != nil {
			t.Fatalf("want a result, got error %s", resp.err)
		}
		wire := 0
		for _, f := range logs {
			wire += f.size
		}
		t.Logf("id of %d bytes: %d notifications, %d wire bytes for logBytes %d", len(id), len(logs), wire, logBytes)
		if wire > logBytes {
			t.Errorf("id of %d bytes: %d log notifications took %d bytes on the wire, over logBytes %d", len(id), len(logs), wire, logBytes)
		}
		if res.LogLines != len(logs) || !res.LogTruncated {
			t.Errorf("result: logLines %d (sent %d), logTruncated %v; want the sent count and true", res.LogLines, len(logs), res.LogTruncated)
		}
	}
}
