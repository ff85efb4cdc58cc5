package protocol

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"unicode/utf8"

	"github.com/sourcegraph/jsonrpc2"
)

// WASI preview1 on the wire (docs/wasi.md, docs/protocol.md).

// NotifyOutput is the method of the notification that carries a WASI
// guest's output while it runs.
const NotifyOutput = "output"

// WASI grants WASI preview1 to a run (sandbox.WASI is this type). Every
// field is optional; the zero value is a program with no arguments, an
// empty environment, empty stdin and no files. Check says what is wrong
// with one, as far as no file system is needed to tell.
type WASI struct {
	// Argv0 is argv[0]. Default: the module's id ("sha256:…").
	Argv0 string
	// Args are the arguments after argv[0].
	Args []string
	// Env is the whole environment: nothing is inherited from the host.
	Env map[string]string
	// Stdin is what the guest reads on fd 0, then end of file.
	Stdin []byte
	// Files are read-only files at absolute guest paths, held in a private
	// directory tree preopened read-only at "/" for the run. No other file
	// exists in that tree.
	Files map[string][]byte
	// Dirs are real directories preopened at guest paths. Each must be at
	// or under one of the directories the operator allowed
	// (sandbox.Config.WASIDirs).
	Dirs []Dir
}

// Dir is a host directory preopened for a WASI guest.
type Dir struct {
	Host     string // on the sidecar's machine; at or under an allowed directory
	Guest    string // the path the guest opens it by, e.g. "/data"
	Writable bool   // false: the guest may read and list, not change anything
}

// Output is what a WASI guest wrote.
type Output struct {
	Stdout, Stderr []byte
	Truncated      bool
}

// WASIFunctions lists the preview1 functions a granted guest may import
// (sandbox checks its own table against it).
func WASIFunctions() []string {
	return []string{
		"args_get", "args_sizes_get", "clock_res_get", "clock_time_get", "environ_get", "environ_sizes_get",
		"fd_advise", "fd_allocate", "fd_close", "fd_datasync", "fd_fdstat_get", "fd_fdstat_set_flags",
		"fd_fdstat_set_rights", "fd_filestat_get", "fd_filestat_set_size", "fd_filestat_set_times", "fd_pread",
		"fd_prestat_dir_name", "fd_prestat_get", "fd_pwrite", "fd_read", "fd_readdir", "fd_renumber", "fd_seek",
		"fd_sync", "fd_tell", "fd_write", "path_create_directory", "path_filestat_get", "path_filestat_set_times",
		"path_link", "path_open", "path_readlink", "path_remove_directory", "path_rename", "path_symlink",
		"path_unlink_file", "poll_oneoff", "proc_exit", "proc_raise", "random_get", "sched_yield", "sock_accept",
		"sock_recv", "sock_send", "sock_shutdown",
	}
}

// Bytes is a byte string on the wire. It is written as {"text": s} when
// the bytes are valid UTF-8 and that costs no more than base64, and as
// {"base64": s} otherwise (standard alphabet, padded); it is read from
// either, or from a plain JSON string (its UTF-8 bytes).
type Bytes []byte

// MarshalJSON writes {"text"} when the bytes are valid UTF-8 and their
// JSON string is no longer than their base64, else {"base64"}: a guest's
// NULs and control bytes (6 bytes each as \u0000) would otherwise make
// an output of outputBytes cost 6 × outputBytes on the wire and in the
// sidecar's memory. Either way the bytes cost at most 4/3 of their
// length, plus the wrapper.
func (b Bytes) MarshalJSON() ([]byte, error) {
	b64 := base64.StdEncoding.EncodedLen(len(b))
	if b.AsText() {
		return json.Marshal(struct {
			Text string `json:"text"`
		}{string(b)})
	}
	out := make([]byte, 0, len(`{"base64":""}`)+b64)
	out = append(out, `{"base64":"`...)
	out = base64.StdEncoding.AppendEncode(out, b)
	return append(out, `"}`...), nil
}

// AsText says whether MarshalJSON writes b as {"text"} rather than
// {"base64"}: b is valid UTF-8 and its JSON string is no longer than its
// base64. It reads b only until that is known (what escapes dearly, or
// is not UTF-8, decides early).
func (b Bytes) AsText() bool {
	b64 := base64.StdEncoding.EncodedLen(len(b))
	return jsonTextCost(b, b64) <= b64
}

// jsonTextCost is the length of b as the contents of a JSON string as
// encoding/json writes it (HTML characters and U+2028/9 escaped), or more
// than limit if b is not valid UTF-8 or costs more than limit; it stops
// counting past limit.
func jsonTextCost(b []byte, limit int) int {
	n := 0
	for i := 0; i < len(b) && n <= limit; {
		c := b[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
				n += 2
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				n += 6 // \u00XX
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return limit + 1
		}
		if r == '\u2028' || r == '\u2029' {
			n += 6
		} else {
			n += size
		}
		i += size
	}
	return n
}

// UnmarshalJSON reads a string, {"text"} or {"base64"}.
func (b *Bytes) UnmarshalJSON(raw []byte) error {
	v, problem := DecodeBytes(raw)
	if problem != "" {
		return errors.New(problem)
	}
	*b = v
	return nil
}

// DecodeBytes reads a bytes input: a JSON string, {"text": string} or
// {"base64": string}, exactly one key. problem is "" or what is wrong, for
// a message that names the field.
func DecodeBytes(raw []byte) (b []byte, problem string) {
	raw = bytes.TrimSpace(raw)
	const want = `must be a string, {"text": string} or {"base64": string}`
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, want
		}
		return []byte(s), ""
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, want
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil || len(obj) != 1 {
		return nil, want
	}
	for k, v := range obj {
		var s string
		if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil {
			return nil, want
		}
		switch k {
		case "text":
			return []byte(s), ""
		case "base64":
			out, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return nil, "base64: " + err.Error()
			}
			return out, ""
		}
	}
	return nil, want
}

// OutputParams are the params of the `output` notification: a piece of a
// WASI guest's stdout or stderr, in order (seq counts from 0 per run,
// shared by both streams), before the run's response.
type OutputParams struct {
	ID     jsonrpc2.ID `json:"id"`
	Seq    int         `json:"seq"`
	Stream string      `json:"stream"` // "stdout" or "stderr"
	Data   Bytes       `json:"data"`
}

// WASIResult is what a WASI run adds to its result.
type WASIResult struct {
	ExitCode        int   `json:"exitCode"`
	Stdout          Bytes `json:"stdout"`
	Stderr          Bytes `json:"stderr"`
	OutputTruncated bool  `json:"outputTruncated"`
}

// WASIOutput is what a failed WASI run adds to its error's data: the
// output until it stopped.
type WASIOutput struct {
	Stdout          Bytes `json:"stdout"`
	Stderr          Bytes `json:"stderr"`
	OutputTruncated bool  `json:"outputTruncated"`
}

// WASISpec is the wire form of capabilities.wasi as an object (clients
// build it; `true` grants the zero WASI).
type WASISpec struct {
	Args  []string          `json:"args,omitempty"`
	Env   map[string]string `json:"env,omitempty"`
	Stdin Bytes             `json:"stdin,omitempty"`
	Files map[string]Bytes  `json:"files,omitempty"`
	Dirs  []DirSpec         `json:"dirs,omitempty"`
}

// DirSpec is one entry of capabilities.wasi.dirs.
type DirSpec struct {
	Host     string `json:"host"`
	Guest    string `json:"guest"`
	Writable bool   `json:"writable,omitempty"`
}
