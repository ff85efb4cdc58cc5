package sandbox

// The engine's table of live instances: ids, the bound on how many may
// live (Config.MaxInstances), and the reasons recently closed ones went.

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// instanceTable is the engine's registry of live instances.
type instanceTable struct {
	max  int
	idle time.Duration

	mu     sync.Mutex
	live   map[string]*Instance
	prefix string // the random part of the ids, chosen on first use
	// gone names recently closed instances with why (at most
	// closedRemembered, oldest first in goneOrder).
	gone      map[string]string
	goneOrder []string
	next      uint64
	created   uint64
	evicted   uint64
	closed    bool
}

// InstanceStats is a snapshot of an engine's instances.
type InstanceStats struct {
	Live    int    `json:"live"`
	Max     int    `json:"max"`
	Created uint64 `json:"created"`
	Evicted uint64 `json:"evicted"`
}

// InstanceStats reports the live instances and how many were evicted.
func (e *Engine) InstanceStats() InstanceStats {
	t := &e.instances
	t.mu.Lock()
	defer t.mu.Unlock()
	return InstanceStats{Live: len(t.live), Max: t.max, Created: t.created, Evicted: t.evicted}
}

// LookupInstance returns the live instance named id, or an error saying it
// does not exist (never created here, or closed and forgotten).
func (e *Engine) LookupInstance(id string) (*Instance, error) {
	t := &e.instances
	t.mu.Lock()
	defer t.mu.Unlock()
	if in, ok := t.live[id]; ok && in != nil {
		return in, nil
	}
	if reason, ok := t.gone[id]; ok {
		return nil, &InstanceClosedError{Instance: id, Reason: reason}
	}
	return nil, &InstanceClosedError{Instance: id, Reason: "no such instance (never created, or already closed)"}
}

// reserve claims a slot for a new instance.
func (t *instanceTable) reserve() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return "", newError(KindHost, "the engine is closed")
	}
	if len(t.live) >= t.max {
		return "", &Error{Kind: KindHost, err: ErrTooManyInstances,
			Message: fmt.Sprintf("too many instances: %d are live (the maximum is %d); release one", len(t.live), t.max)}
	}
	id := t.nextIDLocked()
	t.live[id] = nil // the slot; filled by add
	return id, nil
}

// name returns a fresh id without claiming a slot, for a one-shot
// instance (CallOnce): it is bounded by its caller's concurrency, like a
// run, so a plugin run is not refused because instantiate's slots are
// taken, and does not take one from an instantiate.
func (t *instanceTable) name() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return "", newError(KindHost, "the engine is closed")
	}
	return t.nextIDLocked(), nil
}

func (t *instanceTable) nextIDLocked() string {
	if t.prefix == "" {
		t.prefix = randomIDPart()
	}
	t.next++
	return "inst-" + t.prefix + "-" + strconv.FormatUint(t.next, 10)
}

// randomIDPart is 48 random bits in hex: two engines (two sidecar
// processes) name their instances differently.
func randomIDPart() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

func (t *instanceTable) add(in *Instance) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.live[in.id] = in
	t.created++
}

// closedRemembered is how many closed instances LookupInstance still
// names with the reason they closed; older ones are "no such instance".
const closedRemembered = 4096

// remove forgets a live instance; reason, if set, is remembered for
// LookupInstance (bounded by closedRemembered).
func (t *instanceTable) remove(id, reason string, evicted bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.live, id)
	if evicted {
		t.evicted++
	}
	if reason == "" {
		return
	}
	if t.gone == nil {
		t.gone = map[string]string{}
	}
	if len(t.goneOrder) >= closedRemembered {
		delete(t.gone, t.goneOrder[0])
		t.goneOrder = t.goneOrder[1:]
	}
	t.gone[id] = reason
	t.goneOrder = append(t.goneOrder, id)
}

// closeAll closes every instance (Engine.Close) and refuses new ones.
func (t *instanceTable) closeAll() {
	t.mu.Lock()
	t.closed = true
	all := make([]*Instance, 0, len(t.live))
	for _, in := range t.live {
		if in != nil {
			all = append(all, in)
		}
	}
	t.mu.Unlock()
	for _, in := range all {
		in.close("the engine closed", false)
		<-in.freed
	}
}
