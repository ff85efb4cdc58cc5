package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sandboxd/sandboxd/protocol"
)

// manMain is `sandboxd man`: the manual page, in roff, made from the
// commands table and the FlagSets of the commands (what -h prints).
func manMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sandboxd man", flag.ContinueOnError)
	positional, status, ok := parseCommandLine(fs, args, stdout, stderr)
	if !ok {
		return status
	}
	if len(positional) != 0 {
		sayf(stderr, "unexpected argument %q", positional[0])
		return exitUsage
	}
	fmt.Fprint(stdout, manPage())
	return 0
}

// roff escapes text for a roff line: backslashes, hyphens (a plain "-"
// may print as a hyphen, not the minus of a flag) and what is not ASCII
// (as \[uXXXX], which every troff reads).
func roff(text string) string {
	var b strings.Builder
	for _, r := range text {
		switch {
		case r == '\\':
			b.WriteString(`\e`)
		case r == '-':
			b.WriteString(`\-`)
		case r > 0x7e:
			fmt.Fprintf(&b, `\[u%04X]`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// roffText is text as roff source lines: a line that would start with a
// control character is guarded, and a blank line starts a paragraph.
func roffText(text string) string {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.TrimSpace(line) == "":
			b.WriteString(".PP\n")
			continue
		case strings.HasPrefix(line, ".") || strings.HasPrefix(line, "'"):
			b.WriteString(`\&`)
		}
		b.WriteString(roff(line) + "\n")
	}
	return b.String()
}

func manPage() string {
	var b strings.Builder
	fmt.Fprintf(&b, `.\" sandboxd(1), made by "sandboxd man" from the flags that
.\" "sandboxd COMMAND -h" lists.
.TH SANDBOXD 1 "" "sandboxd %s" "User Commands"
.nh
.ad l
.SH NAME
sandboxd \- run untrusted WebAssembly under fuel, deadline and memory fences
.SH SYNOPSIS
.nf
`, version)
	for _, c := range commands {
		fmt.Fprintf(&b, "\\fBsandboxd %s\\fR %s\n", roff(c.name), roff(c.synopsis))
	}
	b.WriteString(`.fi
.SH DESCRIPTION
sandboxd runs WebAssembly modules under three independent fences: a fuel
budget, a wall\-clock deadline and a memory cap, with nothing importable
unless granted. As a sidecar (\fBserve\fR) a parent process spawns it and
talks JSON\-RPC 2.0 to it over stdin and stdout; \fBmcp\fR serves the
same engine as Model Context Protocol tools to AI agents and editors;
\fBrun\fR and \fBcall\fR give it to the shell. Every limit has a flag in every command.
.SH COMMANDS
`)
	for _, c := range commands {
		fmt.Fprintf(&b, ".SS \"sandboxd %s\"\n", roff(c.name))
		if c.about != "" {
			b.WriteString(roffText(c.about))
		} else {
			b.WriteString(roffText(strings.ToUpper(c.summary[:1]) + c.summary[1:] + "."))
		}
		fs := flagsOf(c)
		if fs == nil {
			continue
		}
		for _, f := range flagInfos(fs) {
			b.WriteString(".TP\n")
			fmt.Fprintf(&b, "\\fB%s\\fR", roff(flagWord(f.name)))
			if f.arg != "" {
				fmt.Fprintf(&b, " \\fI%s\\fR", roff(f.arg))
			}
			b.WriteString("\n" + roffText(f.usage))
			if f.def != "" {
				fmt.Fprintf(&b, "(default: %s)\n", roff(f.def))
			}
		}
	}
	b.WriteString(`.SH EXIT STATUS
\fBrun\fR, \fBrun \-\-wasi\fR and \fBcall\fR exit with the code of the kind
of error that ended the run (the sidecar sends the same kinds), or 0:
.TP
.B 0
the run succeeded (\fBrun \-\-wasi\fR: the guest's own exit code, which may be any)
`)
	for _, k := range protocol.Kinds() {
		fmt.Fprintf(&b, ".TP\n.B %d\n%s: %s\n", k.ExitCode, roff(string(k.Kind)), roff(k.Summary))
	}
	b.WriteString(`.PP
\fBserve\fR and \fBmcp\fR exit as their descriptions say. \fBsandboxd\fR with no command,
or a command it does not know, prints the usage and exits 2.
.SH SEE ALSO
README.md, docs/protocol.md (the wire protocol), docs/mcp.md (the MCP
tools), docs/wasi.md (WASI programs) and docs/threat\-model.md in the
sandboxd repository.
`)
	return b.String()
}
