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
// wasmtime's own function through a shim instance (below), or does the work
// itself (random_get, poll_oneoff). A guest that cannot pay
// stops with fuel_exhausted and the work is not done. The rates are in
// docs/wasi.md ("The fences") and docs/protocol.md.

import (
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
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

// preview1 errnos our shadows answer.
const (
	errnoNameTooLong = 37
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

// u32 is argument i as the unsigned 32-bit value WASI means.
func u32(a []wasmtime.Val, i int) uint64 { return uint64(uint32(a[i].I32())) }

// wasiShadows are the functions forwarded through the shim. poll_oneoff
// (wasi.go, pollDescriptors) and random_get (randomGet) are ours entirely.
// Set by init, with shadowIndex: what the shadows do refers back to them.
var wasiShadows []wasiShadow

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
// stdout or stderr is ours (stdioWrite) and moves every buffer, on the
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
	stdio := name == "fd_write" && r.wasi.stdioWrite(uint32(u32(a, 0)))
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

// wasiTrap stops the guest for a bad argument, classified as the
// out-of-bounds trap it is (like host::log's).
func (s *store) wasiTrap(msg string) *wasmtime.Trap {
	s.cur.hostTrap = msg
	return wasmtime.NewTrap(msg)
}

// linkShadows defines, in linker over wasmtime's WASI, the shadows of the
// functions the module imports. Those whose price is next to nothing for
// this run (arguments and environment of under 16 entries and 1 KiB,
// preopen names under 1 KiB) are left to wasmtime: the shadow would cost
// more than the work.
func (s *store) linkShadows(linker *wasmtime.Linker) error {
	w := s.wasi
	shim, err := w.engine.wasiShim()
	if err != nil {
		return err
	}
	for _, imp := range s.module.Imports {
		i, ok := shadowIndex[imp.Name]
		if imp.Module != WASIModule || !ok || wasiShadows[i].fuel == nil {
			continue
		}
		switch {
		case strings.HasPrefix(imp.Name, "args_") && w.argvEntries < 16 && copyFuel(w.argvBytes) == 0,
			strings.HasPrefix(imp.Name, "environ_") && w.envEntries < 16 && copyFuel(w.envBytes) == 0,
			imp.Name == "fd_prestat_dir_name" && copyFuel(w.longestPreopen) == 0:
			continue
		}
		if err := linker.FuncNew(WASIModule, imp.Name, shim.types[i], s.guarded(WASIModule+"::"+imp.Name, func(c *wasmtime.Caller, a []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
			return s.shadowed(i, c, a)
		})); err != nil {
			return err
		}
	}
	return nil
}

// shadowIndex is each shadow's index in wasiShadows, by name.
var shadowIndex map[string]int

// shadowTypes are the shadows' function types by index. A wasmtime
// function type belongs to the first engine that uses it, hence once per
// engine.
func shadowTypes() ([]*wasmtime.FuncType, error) {
	types := make([]*wasmtime.FuncType, len(wasiShadows))
	for i, s := range wasiShadows {
		ty, err := wasiFuncType(s.name)
		if err != nil {
			return nil, err
		}
		types[i] = ty
	}
	return types, nil
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

// forward calls wasmtime's own function i. A host function cannot call it
// directly (WASI functions find the guest's memory through their caller),
// so a shim module that imports the guest's memory, re-exports it as
// "memory" and calls each function on the host's behalf is instantiated in
// the run's store on first use (hence the one extra instance a WASI run may
// have). It is compiled once per engine.
func (s *store) forward(c *wasmtime.Caller, i int, a []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	w := s.wasi
	if w.shim == nil {
		ext := c.GetExport("memory")
		if ext == nil || ext.Memory() == nil {
			return nil, wasmtime.NewTrap(wasiShadows[i].name + " needs the guest to export its memory as \"memory\"")
		}
		inst, err := s.instantiateShim(c, ext.Memory())
		if err != nil {
			return nil, wasmtime.NewTrap("sandboxd: WASI shim: " + cleanMessage(err.Error()))
		}
		w.shim = inst
	}
	res, trap := forwardWASI(c, w.shim, wasiShadows[i].name, a)
	if trap != nil {
		return nil, trap
	}
	return []wasmtime.Val{wasmtime.ValI32(res)}, nil
}

// instantiateShim instantiates the shim in the caller's store over mem,
// the guest's memory, and wasmtime's own functions.
func (s *store) instantiateShim(c *wasmtime.Caller, mem *wasmtime.Memory) (*wasmtime.Instance, error) {
	shim, err := s.wasi.engine.wasiShim()
	if err != nil {
		return nil, err
	}
	imports := make([]wasmtime.AsExtern, 0, 1+len(wasiShadows))
	imports = append(imports, mem)
	for _, sh := range wasiShadows {
		ext := shim.wasi.Get(c, WASIModule, sh.name)
		if ext == nil {
			return nil, fmt.Errorf("wasmtime defines no %s", sh.name)
		}
		imports = append(imports, ext)
	}
	return wasmtime.NewInstance(c, shim.mod, imports)
}

// wasiShimModule is the shim, compiled once per engine, and a linker
// holding only wasmtime's WASI, from which each run's store takes the
// functions the shim calls. A linker is only read once defined, from any
// number of stores at once (wasmtime_linker_get takes it const).
type wasiShimModule struct {
	once  sync.Once
	mod   *wasmtime.Module
	wasi  *wasmtime.Linker
	types []*wasmtime.FuncType // the shadows' types by index (shadowTypes)
	err   error
}

func (e *Engine) wasiShim() (*wasiShimModule, error) {
	s := &e.wasiShimMod
	s.once.Do(func() {
		wat, err := wasiShimWAT()
		if err == nil {
			var wasm []byte
			if wasm, err = wasmtime.Wat2Wasm(wat); err == nil {
				s.mod, err = wasmtime.NewModule(e.wt, wasm)
			}
		}
		if err == nil {
			s.wasi = wasmtime.NewLinker(e.wt)
			err = s.wasi.DefineWasi()
		}
		if err == nil {
			s.types, err = shadowTypes()
		}
		if err != nil {
			s.err = fmt.Errorf("WASI shim: %s", cleanMessage(err.Error()))
		}
	})
	return s, s.err
}

// wasiShimWAT is the shim's text: for each shadow, an export of that name
// calling wasmtime's function of that name with its own arguments.
func wasiShimWAT() (string, error) {
	var imports, funcs strings.Builder
	for _, s := range wasiShadows {
		sig, ok := wasiFuncs[s.name]
		if !ok {
			return "", fmt.Errorf("%s is not a preview1 function", s.name)
		}
		params, results := watSignature(sig)
		fmt.Fprintf(&imports, "  (import %q %q (func $%s %s %s))\n", WASIModule, s.name, s.name, params, results)
		fmt.Fprintf(&funcs, "  (func (export %q) %s %s (call $%s", s.name, params, results, s.name)
		for i := range strings.Count(params, "i") {
			fmt.Fprintf(&funcs, " (local.get %d)", i)
		}
		funcs.WriteString("))\n")
	}
	return "(module\n  (import \"sandboxd\" \"memory\" (memory 0))\n" + imports.String() +
		"  (export \"memory\" (memory 0))\n" + funcs.String() + ")", nil
}

// watSignature turns "(i32, i64) -> (i32)" into "(param i32 i64)" and
// "(result i32)".
func watSignature(sig string) (params, results string) {
	in, out, _ := strings.Cut(sig, " -> ")
	list := func(s, kw string) string {
		s = strings.ReplaceAll(strings.Trim(s, "()"), ",", "")
		if s == "" {
			return ""
		}
		return "(" + kw + " " + s + ")"
	}
	return list(in, "param"), list(out, "result")
}

// wasiFuncType is the wasmtime type of a preview1 function, safe to share
// among runs.
func wasiFuncType(name string) (*wasmtime.FuncType, error) {
	sig, ok := wasiFuncs[name]
	if !ok {
		return nil, fmt.Errorf("%s is not a preview1 function", name)
	}
	in, out, _ := strings.Cut(sig, " -> ")
	types := func(s string) []*wasmtime.ValType {
		var vt []*wasmtime.ValType
		for _, f := range strings.Fields(strings.ReplaceAll(strings.Trim(s, "()"), ",", " ")) {
			k := wasmtime.KindI32
			if f == "i64" {
				k = wasmtime.KindI64
			}
			vt = append(vt, wasmtime.NewValType(k))
		}
		return vt
	}
	return sharedFuncType(types(in), types(out)), nil
}

// randomGet is preview1's random_get, ours for every run: wasmtime's
// allocates a host buffer of the length the guest names before checking
// it against the guest's memory. A seeded run gets the bytes of its
// splitmix64 stream (the one host::random draws from), little-endian;
// others the operating system's. Paid before: randomFuelPerKiB per KiB
// begun.
func (s *store) randomGet(c *wasmtime.Caller, args []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
	buf, n := u32(args, 0), u32(args, 1)
	mem := s.wasi.memory(c)
	if !inBounds(mem, buf, n) {
		return nil, s.wasiTrap(fmt.Sprintf("random_get: bytes [%d, %d) lie outside the guest's memory of %d bytes", buf, buf+n, len(mem)))
	}
	if fuel := (n + 1023) / 1024 * randomFuelPerKiB; fuel > 0 && !consumeFuel(c, fuel) {
		return nil, fuelTrap()
	}
	fill := func(dst []byte) error { _, err := crand.Read(dst); return err }
	if s.wasi.seeded {
		fill = func(dst []byte) error { s.random.fill(dst); return nil }
	}
	// In slices, the fence checked between them (wasi_transfer.go): 1 GiB
	// took 12 s in one call.
	stop, err := fillSliced(mem[buf:buf+n], fill, s.fenceStop)
	if err != nil {
		return nil, wasmtime.NewTrap("sandboxd: random_get: " + err.Error())
	}
	if stop != stopNone {
		return nil, s.stopGuest(stop)
	}
	return errno(errnoSuccess)
}

// wasmtime's WASI reports a guest pointer it cannot use (outside the
// guest's memory, misaligned, overflowing) as an error naming the region,
// which would otherwise be classified as sandboxd's own (kind host).
// Compiled at first use, not at package init: every start of the program
// (a compile child's too) would pay for them.
var (
	wasiFaultRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`Pointer (out of bounds|not aligned to \d+): Region \{ start: (\d+), len: (\d+) \}`)
	})
	wasiFuncRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`In func ` + WASIModule + `::(\w+)`) })
)

// wasiErrorMessage is the message of a trap for the error wasmtime's
// function name returned when forwarded, naming the function as wasmtime
// does when the guest calls it directly (for wasiPointerFault).
func wasiErrorMessage(name, err string) string {
	msg := strings.TrimPrefix(cleanMessage(err), "error while executing: ")
	if !strings.Contains(msg, "In func "+WASIModule+"::") {
		msg = "In func " + WASIModule + "::" + name + ": " + msg
	}
	return msg
}

// wasiArgumentRE matches wasmtime's error for an argument of a preview1
// type it cannot convert (an enum or flags value out of range, an
// integer too wide): "In func wasi_snapshot_preview1::fd_seek at convert
// Whence: Invalid enum value Whence".
var wasiArgumentRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`In func ` + WASIModule + `::(\w+) at convert (\w+):`)
})

// wasiFault is the guest's trap a WASI error message describes, or nil
// when it describes none: the guest passed a WASI function a pointer it
// cannot use or an argument out of its type's range, the guest's fault
// like an out-of-bounds load (wasmtime reports them as errors, not as
// errnos, in a message of several lines).
func wasiFault(msg string) *Error {
	if m := wasiArgumentRE().FindStringSubmatch(msg); m != nil {
		return &Error{Kind: KindTrap, TrapCode: TrapCodeHost,
			Message: fmt.Sprintf("guest trapped: %s::%s: its %s argument is out of range", WASIModule, m[1], m[2])}
	}
	return wasiPointerFault(msg)
}

// wasiPointerFault is the guest's trap a WASI error message describes
// when the guest passed a WASI function a pointer it cannot use, or nil.
func wasiPointerFault(msg string) *Error {
	m := wasiFaultRE().FindStringSubmatch(msg)
	overflow := strings.Contains(msg, "Pointer overflow")
	if m == nil && !overflow {
		return nil
	}
	fn := "a WASI function"
	if f := wasiFuncRE().FindStringSubmatch(msg); f != nil {
		fn = WASIModule + "::" + f[1]
	}
	if m == nil {
		return &Error{Kind: KindTrap, TrapCode: "memory_out_of_bounds",
			Message: "guest trapped: " + fn + ": a pointer plus its length overflows"}
	}
	start, _ := strconv.ParseUint(m[2], 10, 64)
	n, _ := strconv.ParseUint(m[3], 10, 64)
	code, what := "memory_out_of_bounds", "lie outside the guest's memory"
	if strings.HasPrefix(m[1], "not aligned") {
		code, what = "heap_misaligned", "are "+m[1]+" bytes, as WASI requires"
	}
	return &Error{Kind: KindTrap, TrapCode: code,
		Message: fmt.Sprintf("guest trapped: %s: bytes [%d, %d) %s", fn, start, start+n, what)}
}

// preview1 values pollDescriptors reads and writes.
const (
	eventFdRead      = 1
	eventFdWrite     = 2
	eventHangup      = 1 // eventrwflags: fd_readwrite_hangup
	filetypeDir      = 3
	filetypeRegular  = 4
	rightFdRead      = 1 << 1
	rightFdWrite     = 1 << 6
	errnoBadf        = 8
	whenceSet        = 0
	whenceEnd        = 2
	fdstatRightsBase = 8 // the offset of fs_rights_base in an fdstat
)

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
