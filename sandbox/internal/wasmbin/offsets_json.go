package wasmbin

import (
	"encoding/json"
	"errors"
)

// An OffsetMap crosses a process boundary with its Info: the sandbox
// compiles in a child process and keeps compiled modules on disk. Its
// JSON form is {"end": N, "anchors": [new0, orig0, new1, orig1, ...]}.

type offsetMapJSON struct {
	End     int   `json:"end"`
	Anchors []int `json:"anchors"`
}

// MarshalJSON encodes the map.
func (m *OffsetMap) MarshalJSON() ([]byte, error) {
	flat := make([]int, 0, 2*len(m.anchors))
	for _, a := range m.anchors {
		flat = append(flat, a.new, a.orig)
	}
	return json.Marshal(offsetMapJSON{End: m.end, Anchors: flat})
}

// UnmarshalJSON decodes a map MarshalJSON encoded, checking that the
// anchors come in strictly increasing rewritten order, as Original needs.
func (m *OffsetMap) UnmarshalJSON(b []byte) error {
	var j offsetMapJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	if len(j.Anchors)%2 != 0 {
		return errors.New("wasmbin: offset map: odd number of anchor values")
	}
	anchors := make([]offsetAnchor, 0, len(j.Anchors)/2)
	for i := 0; i < len(j.Anchors); i += 2 {
		if n := len(anchors); n > 0 && j.Anchors[i] <= anchors[n-1].new {
			return errors.New("wasmbin: offset map: anchors out of order")
		}
		anchors = append(anchors, offsetAnchor{new: j.Anchors[i], orig: j.Anchors[i+1]})
	}
	m.anchors, m.end = anchors, j.End
	return nil
}
