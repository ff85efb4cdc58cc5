package sandbox

// poll_oneoff is ours. wasmtime's sleeps without looking at the run's
// deadline or cancellation, and keeps every subscription of every call in
// the store until the run ends, outside the memory cap. Ours sleeps on a
// timer bounded by the run's deadline and context, and answers descriptor
// subscriptions at once, as wasmtime's answers them.

import (
	"encoding/binary"
	"math"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// preview1 values poll_oneoff reads and writes.
const (
	subscriptionSize = 48
	eventSize        = 32
	eventClock       = 0
	eventFdRead      = 1
	eventFdWrite     = 2
	eventHangup      = 1 // eventrwflags: fd_readwrite_hangup
	clockRealtime    = 0
	clockMonotonic   = 1
	subAbstime       = 1
	filetypeDir      = 3
	filetypeRegular  = 4
	rightFdRead      = 1 << 1
	rightFdWrite     = 1 << 6
	whenceSet        = 0
	whenceEnd        = 2
	fdstatRightsBase = 8 // the offset of fs_rights_base in an fdstat
)

// pollOneoff is preview1's poll_oneoff. When every subscription is a
// realtime or monotonic clock it sleeps here, until the earliest one is
// due, the run's deadline passes or the run is cancelled, whichever comes
// first; in the last two cases the guest is stopped as the epoch fence
// would stop it. Subscriptions on descriptors are answered at once
// (pollDescriptors): every descriptor a run can have (stdin bytes, the
// output streams, files) is always ready, so nothing waits.
func (s *store) pollOneoff(c *wasmtime.Caller, args []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	in, out := uint64(uint32(args[0].I32())), uint64(uint32(args[1].I32()))
	n, neventsPtr := uint64(uint32(args[2].I32())), uint64(uint32(args[3].I32()))
	mem := s.wasi.memory(c)
	if n == 0 || n > maxSubscriptions || in%8 != 0 || out%8 != 0 || neventsPtr%4 != 0 { // wasmtime's checks too, and our bound
		return errno(errnoInval)
	}
	if !inBounds(mem, in, n*subscriptionSize) || !inBounds(mem, out, n*eventSize) || !inBounds(mem, neventsPtr, 4) {
		return errno(errnoFault)
	}
	if !consumeFuel(c, n*subscriptionFuel) {
		return nil, fuelTrap()
	}
	// Two passes over the guest's subscriptions, nothing allocated per
	// subscription (there may be millions): find the earliest, sleep, then
	// report every clock that is due.
	now := time.Now()
	due := func(mem []byte, i uint64) (userdata uint64, at time.Time, clock bool) {
		return s.clockDue(mem[in+i*subscriptionSize:][:subscriptionSize], now)
	}
	var earliest time.Time
	for i := uint64(0); i < n; i++ {
		_, at, clock := due(mem, i)
		if !clock {
			return s.pollDescriptors(c, in, out, n, neventsPtr, now)
		}
		if i == 0 || at.Before(earliest) {
			earliest = at
		}
	}
	if time.Until(earliest) >= time.Millisecond {
		s.wasi.out.flush() // what the guest wrote before sleeping is seen now
	}
	if stop := s.sleepUntil(earliest); stop != stopNone {
		return nil, s.stopGuest(stop)
	}
	mem = s.wasi.memory(c) // the same memory: the guest could not run meanwhile
	woke := time.Now()
	var events uint32
	for i := uint64(0); i < n; i++ {
		userdata, at, _ := due(mem, i)
		if at.After(woke) && !at.Equal(earliest) {
			continue
		}
		ev := mem[out+uint64(events)*eventSize:][:eventSize]
		clear(ev)
		binary.LittleEndian.PutUint64(ev, userdata)
		ev[10] = eventClock
		events++
	}
	binary.LittleEndian.PutUint32(mem[neventsPtr:], events)
	return errno(errnoSuccess)
}

// clockDue reads subscription s: when it is a realtime or monotonic clock,
// its userdata and when it is due, measured from now.
func (s *store) clockDue(sub []byte, now time.Time) (userdata uint64, at time.Time, clock bool) {
	id := binary.LittleEndian.Uint32(sub[16:])
	if sub[8] != eventClock || (id != clockRealtime && id != clockMonotonic) {
		return 0, time.Time{}, false
	}
	timeout := binary.LittleEndian.Uint64(sub[24:])
	switch flags := binary.LittleEndian.Uint16(sub[40:]); {
	case flags&subAbstime == 0:
		at = addNanos(now, timeout)
	case id == clockRealtime:
		at = now.Add(time.Unix(0, int64(min(timeout, math.MaxInt64))).Sub(now))
	default:
		at = addNanos(s.wasi.monoBase, timeout)
	}
	return binary.LittleEndian.Uint64(sub), at, true
}

// addNanos is t + ns, saturating far in the future.
func addNanos(t time.Time, ns uint64) time.Time {
	if ns > math.MaxInt64 {
		ns = math.MaxInt64
	}
	return t.Add(time.Duration(ns))
}

// sleepUntil waits until due, the run's deadline or its cancellation, and
// says which stopped it (stopNone: due came first).
func (s *store) sleepUntil(due time.Time) stopReason {
	wait := time.Until(due)
	if wait <= 0 {
		return stopNone
	}
	left := s.fence.remaining()
	stop := stopNone
	if left <= wait {
		wait, stop = left, stopTimedOut
	}
	if wait <= 0 {
		return stop
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		// The timer fired at or after the fence's deadline when that was
		// the nearer, so the epoch callback agrees it has passed.
		return stop
	case <-s.wasi.ctx.Done():
		return stopCancelled
	}
}

// pollDescriptors answers a poll_oneoff that subscribes to a descriptor.
// wasmtime's own keeps every subscription of every call in the store until
// the run ends (100-220 bytes each, outside the memory cap: 4,096 stdin
// subscriptions a call, 1,000 calls, held 394 MB), so this is ours too,
// answering as wasmtime's does: every descriptor a run can have (stdin
// bytes, the output streams, regular files) is always ready, so nothing
// waits; each descriptor subscription has an event (nbytes 1; a file read
// at or past its end says hangup) and so has each clock already due; a
// descriptor that cannot be read (or written) as subscribed fails the
// whole call with EBADF. A descriptor's state comes from wasmtime's own
// fd_fdstat_get, fd_tell and fd_seek, whose results are written into the
// first 32 bytes of the events buffer before the events are.
func (s *store) pollDescriptors(c *wasmtime.Caller, in, out, n, neventsPtr uint64, now time.Time) ([]wasmtime.Val, *wasmtime.Trap) {
	type state struct{ read, write, hangup bool }
	states := map[uint32]state{}
	mem := s.wasi.memory(c)
	for i := uint64(0); i < n; i++ {
		sub := mem[in+i*subscriptionSize:][:subscriptionSize]
		switch sub[8] {
		case eventClock:
			if _, _, ok := s.clockDue(sub, now); !ok {
				return errno(errnoInval) // a CPU-time clock, as wasmtime answers
			}
			continue
		case eventFdRead, eventFdWrite:
		default:
			return errno(errnoInval)
		}
		fd := binary.LittleEndian.Uint32(sub[16:])
		st, seen := states[fd]
		if !seen {
			if !consumeFuel(c, descriptorFuel) {
				return nil, fuelTrap()
			}
			// Each descriptor's state takes host calls that do not look
			// at the fence (a thousand of them took 96 ms).
			if stop := s.fenceStop(); stop != stopNone {
				return nil, s.stopGuest(stop)
			}
			var e int32
			var trap *wasmtime.Trap
			if st, e, trap = s.descriptorState(c, fd, out); trap != nil {
				return nil, trap
			} else if e != 0 {
				return errno(errnoBadf)
			}
			states[fd] = st
			mem = s.wasi.memory(c)
			sub = mem[in+i*subscriptionSize:][:subscriptionSize]
		}
		if (sub[8] == eventFdRead && !st.read) || (sub[8] == eventFdWrite && !st.write) {
			return errno(errnoBadf)
		}
	}
	var events uint64
	for i := uint64(0); i < n; i++ {
		sub := mem[in+i*subscriptionSize:][:subscriptionSize]
		ev := mem[out+events*eventSize:][:eventSize]
		if userdata, at, clock := s.clockDue(sub, now); clock {
			if at.After(now) {
				continue
			}
			clear(ev)
			binary.LittleEndian.PutUint64(ev, userdata)
			ev[10] = eventClock
		} else {
			st := states[binary.LittleEndian.Uint32(sub[16:])]
			userdata := binary.LittleEndian.Uint64(sub)
			kind := sub[8]
			clear(ev)
			binary.LittleEndian.PutUint64(ev, userdata)
			ev[10] = kind
			binary.LittleEndian.PutUint64(ev[16:], 1) // nbytes
			if kind == eventFdRead && st.hangup {
				binary.LittleEndian.PutUint16(ev[24:], eventHangup)
			}
		}
		events++
	}
	binary.LittleEndian.PutUint32(mem[neventsPtr:], uint32(events))
	return errno(errnoSuccess)
}

// descriptorState asks wasmtime what fd is, with scratch (8-aligned, 32
// bytes of the guest's memory) for the answers: readable or writable as a
// poll subscription means, and for a readable file whether its position
// is at or past its end. A non-zero errno: fd is no descriptor.
func (s *store) descriptorState(c *wasmtime.Caller, fd uint32, scratch uint64) (st struct{ read, write, hangup bool }, e int32, trap *wasmtime.Trap) {
	call := func(name string, args ...wasmtime.Val) (int32, *wasmtime.Trap) {
		res, trap := s.forward(c, shadowIndex[name], args)
		if trap != nil {
			return 0, trap
		}
		return res[0].I32(), nil
	}
	i32 := func(v uint64) wasmtime.Val { return wasmtime.ValI32(int32(uint32(v))) }
	if e, trap = call("fd_fdstat_get", i32(uint64(fd)), i32(scratch)); trap != nil || e != 0 {
		return st, e, trap
	}
	mem := s.wasi.memory(c)
	filetype := mem[scratch]
	rights := binary.LittleEndian.Uint64(mem[scratch+fdstatRightsBase:])
	if filetype == filetypeDir {
		return st, 0, nil // neither readable nor writable as a stream
	}
	st.read, st.write = rights&rightFdRead != 0, rights&rightFdWrite != 0
	if filetype != filetypeRegular || !st.read {
		return st, 0, nil
	}
	if e, trap = call("fd_tell", i32(uint64(fd)), i32(scratch)); trap != nil || e != 0 {
		return st, e, trap
	}
	pos := binary.LittleEndian.Uint64(s.wasi.memory(c)[scratch:])
	if e, trap = call("fd_seek", i32(uint64(fd)), wasmtime.ValI64(0), i32(whenceEnd), i32(scratch)); trap != nil || e != 0 {
		return st, e, trap
	}
	size := binary.LittleEndian.Uint64(s.wasi.memory(c)[scratch:])
	if e, trap = call("fd_seek", i32(uint64(fd)), wasmtime.ValI64(int64(pos)), i32(whenceSet), i32(scratch)); trap != nil || e != 0 {
		return st, e, trap
	}
	st.hangup = size <= pos
	return st, 0, nil
}
