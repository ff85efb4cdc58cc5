package sandbox

// Fuel for the host work of WASI calls. wasmtime's preview1 charges the
// guest nothing for what a call makes the host do, so a guest-chosen count
// or length turned a few fuel into unbounded host work: 1,000,000 iovecs
// walked per fd_write, 16 MiB of random bytes per random_get (allocated on
// the host before the buffer's bounds were checked: a 1-page guest made the
// host allocate and fill 1 GiB), 4 MB path strings, or a whole directory
// read and stat'ed on every fd_readdir whatever its buffer. Each such
// function is shadowed here by a host function that refuses what no real
// program needs (EINVAL, ENAMETOOLONG), charges the guest's fuel for the
// work in proportion to the counts and lengths it named, before the work
// (fd_readdir: after, see readdirFuel), and then forwards the call to
// wasmtime's own function through a shim instance (wasi_shim.go), or does the work
// itself (random_get, poll_oneoff). A guest that cannot pay
// stops with fuel_exhausted and the work is not done. The rates are in
// docs/wasi.md ("The fences") and docs/protocol.md.

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// Bounds and rates of the WASI fuel fence.
const (
	// maxIovecs bounds iovs_len of fd_read, fd_write, fd_pread and
	// fd_pwrite: Linux's IOV_MAX. More is EINVAL, as readv(2) answers.
	maxIovecs = 1024
	// iovecFuel is charged per iovec a call names: about what a wasm loop
	// reading and testing an 8-byte entry costs.
	iovecFuel = 4
	// maxPathBytes bounds every path a path_* function takes (and the
	// target of path_symlink): Linux's PATH_MAX. Longer is ENAMETOOLONG,
	// which the kernel would answer anyway after wasmtime had copied it.
	maxPathBytes = 4096
	// pathFuelPerByte is charged per byte of each path: wasmtime resolves a
	// path one component at a time (a system call each), so a path costs
	// far more than a copy of it (4,000 bytes of "a/../": 165 µs).
	pathFuelPerByte = 4
	// randomFuelPerKiB is charged per KiB (rounded up) random_get fills.
	randomFuelPerKiB = 64
	// maxSubscriptions bounds nsubscriptions of poll_oneoff. More is
	// EINVAL (poll(2) refuses more descriptors than RLIMIT_NOFILE too).
	maxSubscriptions = 4096
	// subscriptionFuel is charged per subscription of a poll_oneoff.
	subscriptionFuel = 16
	// readdirFuelPerMicrosecond is what fd_readdir costs per µs it took.
	readdirFuelPerMicrosecond = 64

	// forwardFuel is what each call forwarded to wasmtime's preview1
	// file system costs besides the work its arguments name: wasmtime
	// runs those calls on its async runtime's pool of blocking threads,
	// 40-80 µs of host CPU a call on the reference machine, what guest
	// code burns in about 50,000 fuel (some 1.3 G fuel a second). Without
	// it a loop of path_open and fd_close ran 12 s of host CPU on 1 M
	// fuel; with it fuel bounds the host's work as it bounds the guest's.
	forwardFuel = 50_000
	// cheapCallFuel is what a call costs that does not leave the guest's
	// thread: fd_close, fd_renumber, a write to stdout or stderr (ours).
	cheapCallFuel = 2_000
	// entryFuel is charged per argument or environment entry a call
	// copies (wasmtime's work is per entry besides the bytes).
	entryFuel = 64
	// descriptorFuel is charged per distinct descriptor a poll_oneoff
	// subscribes to: one forwarded call and three cheap ones of
	// wasmtime's to learn its state.
	descriptorFuel = forwardFuel + 3*cheapCallFuel
)

// wasiShadow is one WASI function whose host work the guest pays for.
type wasiShadow struct {
	name string
	// fuel prices a call from its arguments (and the guest's memory, when
	// the function reads arrays there). A non-zero errno refuses the call
	// without forwarding it; a trap stops the guest.
	fuel func(r *store, c *wasmtime.Caller, name string, a []wasmtime.Val) (fuel uint64, errno int32, trap *wasmtime.Trap)
	// after, if set, prices the call once wasmtime's function returned.
	after func(took time.Duration) uint64
	// do, if set, is what a paid call does instead of forwarding it as
	// it is (r.forward).
	do func(r *store, i int, c *wasmtime.Caller, a []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap)
}

// cheapFuel prices a call that does not leave the guest's thread.
func cheapFuel(*store, *wasmtime.Caller, string, []wasmtime.Val) (uint64, int32, *wasmtime.Trap) {
	return cheapCallFuel, 0, nil
}

// forwardedFuel prices a call forwarded to wasmtime with no bytes of
// its own.
func forwardedFuel(*store, *wasmtime.Caller, string, []wasmtime.Val) (uint64, int32, *wasmtime.Trap) {
	return forwardFuel, 0, nil
}

// wasiShadows are the functions forwarded through the shim. poll_oneoff
// (wasi_poll.go) and random_get (wasi_random.go) are ours entirely.
// Set by init, with shadowIndex: what the shadows do refers back to them.
var wasiShadows []wasiShadow

// shadowIndex is each shadow's index in wasiShadows, by name.
var shadowIndex map[string]int

func init() {
	wasiShadows = shadowTable()
	shadowIndex = make(map[string]int, len(wasiShadows))
	for i, s := range wasiShadows {
		shadowIndex[s.name] = i
	}
}

func shadowTable() []wasiShadow {
	return []wasiShadow{
		// Forwarded only, for pollDescriptors: not shadows (no fuel).
		{name: "fd_fdstat_get"},
		{name: "fd_tell"},
		{name: "fd_seek"},

		{name: "fd_write", fuel: iovFuel, do: (*store).transfer},
		{name: "fd_read", fuel: iovFuel, do: (*store).transfer},
		{name: "fd_pwrite", fuel: iovFuel, do: (*store).transfer},
		{name: "fd_pread", fuel: iovFuel, do: (*store).transfer},
		{name: "fd_close", fuel: cheapFuel, do: (*store).fdClose},
		{name: "fd_renumber", fuel: cheapFuel, do: (*store).fdRenumber},
		{name: "fd_sync", fuel: forwardedFuel, do: (*store).fdSync},
		{name: "fd_datasync", fuel: forwardedFuel, do: (*store).fdSync},
		{name: "fd_readdir", fuel: readdirFuel, after: func(took time.Duration) uint64 {
			return uint64(took.Microseconds()) * readdirFuelPerMicrosecond
		}},
		{name: "fd_prestat_dir_name", fuel: func(r *store, _ *wasmtime.Caller, _ string, a []wasmtime.Val) (uint64, int32, *wasmtime.Trap) {
			return copyFuel(min(u32(a, 2), r.wasi.longestPreopen)), 0, nil
		}},
		{name: "args_get", fuel: argsFuel},
		{name: "args_sizes_get", fuel: argsFuel},
		{name: "environ_get", fuel: envFuel},
		{name: "environ_sizes_get", fuel: envFuel},
		{name: "path_create_directory", fuel: pathFuel(1)},
		{name: "path_filestat_get", fuel: pathFuel(2)},
		{name: "path_filestat_set_times", fuel: pathFuel(2)},
		{name: "path_link", fuel: pathFuel(2, 5)},
		{name: "path_open", fuel: pathFuel(2), do: (*store).pathOpen},
		{name: "path_readlink", fuel: pathFuel(1)},
		{name: "path_remove_directory", fuel: pathFuel(1)},
		{name: "path_rename", fuel: pathFuel(1, 4)},
		{name: "path_symlink", fuel: pathFuel(0, 3)},
		{name: "path_unlink_file", fuel: pathFuel(1)},
	}
}

// iovFuel prices fd_read, fd_write, fd_pread and fd_pwrite (the iovec
// array is argument 1, its length argument 2): every iovec named, and the
// bytes moved. wasmtime walks the array to the first non-empty buffer and
// transfers that one only, a forwarded call per slice of it; a write to
// stdout or stderr is ours (writeStdio) and moves every buffer, on the
// guest's thread.
func iovFuel(r *store, c *wasmtime.Caller, name string, a []wasmtime.Val) (uint64, int32, *wasmtime.Trap) {
	iovs, n := u32(a, 1), u32(a, 2)
	if n > maxIovecs {
		return 0, errnoInval, nil
	}
	fuel := n * iovecFuel
	mem := r.wasi.memory(c)
	if iovs%4 != 0 || !inBounds(mem, iovs, n*8) {
		return fuel, 0, nil // wasmtime traps before any transfer
	}
	stdio := name == "fd_write" && r.wasi.stdio.stream(uint32(u32(a, 0))) != 0
	var moved uint64
	for i := uint64(0); i < n; i++ {
		e := mem[iovs+i*8:]
		buf, size := uint64(binary.LittleEndian.Uint32(e)), uint64(binary.LittleEndian.Uint32(e[4:]))
		if size == 0 {
			continue
		}
		if !inBounds(mem, buf, size) {
			// wasmtime would size a host buffer for stdin by it before
			// checking it: stop here, as wasmtime does for the others.
			return 0, 0, r.wasiTrap(fmt.Sprintf("%s: iovec %d [%d, %d) lies outside the guest's memory of %d bytes", name, i, buf, buf+size, len(mem)))
		}
		moved += size
		if !stdio {
			slices := (size + transferSlice - 1) / transferSlice
			return fuel + copyFuel(size) + slices*forwardFuel, 0, nil
		}
	}
	if stdio {
		return fuel + copyFuel(moved) + cheapCallFuel, 0, nil
	}
	return fuel + forwardFuel, 0, nil
}

// readdirFuel prices fd_readdir's copy into the buffer (buf, buf_len are
// arguments 1 and 2). The rest of its work does not depend on the buffer:
// wasmtime reads the whole directory and stats every entry on each call,
// even for a 0-byte buffer (300 ms for 10,000 entries), so that is charged
// by the time it took, after the call (wasiShadow.after).
func readdirFuel(_ *store, _ *wasmtime.Caller, _ string, a []wasmtime.Val) (uint64, int32, *wasmtime.Trap) {
	return forwardFuel + copyFuel(u32(a, 2)), 0, nil
}

func argsFuel(r *store, _ *wasmtime.Caller, _ string, _ []wasmtime.Val) (uint64, int32, *wasmtime.Trap) {
	return copyFuel(r.wasi.argvBytes) + r.wasi.argvEntries*entryFuel, 0, nil
}

func envFuel(r *store, _ *wasmtime.Caller, _ string, _ []wasmtime.Val) (uint64, int32, *wasmtime.Trap) {
	return copyFuel(r.wasi.envBytes) + r.wasi.envEntries*entryFuel, 0, nil
}

// pathFuel prices a path_* function whose paths' lengths are the arguments
// after the given pointer positions.
func pathFuel(ptrs ...int) func(*store, *wasmtime.Caller, string, []wasmtime.Val) (uint64, int32, *wasmtime.Trap) {
	return func(_ *store, _ *wasmtime.Caller, _ string, a []wasmtime.Val) (uint64, int32, *wasmtime.Trap) {
		fuel := uint64(forwardFuel)
		for _, p := range ptrs {
			n := u32(a, p+1)
			if n > maxPathBytes {
				return 0, errnoNameTooLong, nil
			}
			fuel += n * pathFuelPerByte
		}
		return fuel, 0, nil
	}
}

// shadowed runs shadow i: price, charge, forward, and charge what is paid
// after.
func (s *store) shadowed(i int, c *wasmtime.Caller, a []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	sh := &wasiShadows[i]
	fuel, e, trap := sh.fuel(s, c, sh.name, a)
	if trap != nil {
		return nil, trap
	}
	if e != 0 {
		return errno(e)
	}
	if fuel > 0 && !consumeFuel(c, fuel) {
		return nil, fuelTrap()
	}
	if sh.do != nil {
		return sh.do(s, i, c, a)
	}
	if sh.after == nil {
		return s.forward(c, i, a)
	}
	start := time.Now()
	res, trap := s.forward(c, i, a)
	if trap == nil {
		if fuel := sh.after(time.Since(start)); fuel > 0 && !consumeFuel(c, fuel) {
			return nil, fuelTrap()
		}
	}
	return res, trap
}
