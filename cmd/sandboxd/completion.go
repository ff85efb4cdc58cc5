package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/sandboxd/sandboxd/protocol"
)

// completionMain is `sandboxd completion bash|zsh|fish`: a completion
// script for the shell, made from the FlagSets of the commands. Without a
// shell it prints its usage (the -h text) on stderr and exits 1: nothing
// that a shell would source reaches stdout.
func completionMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sandboxd completion", flag.ContinueOnError)
	positional, status, ok := parseCommandLine(fs, args, stdout, stderr)
	if !ok {
		return status
	}
	scripts := map[string]func([]shellCommand) string{"bash": bashCompletion, "zsh": zshCompletion, "fish": fishCompletion}
	switch {
	case len(positional) == 0:
		fs.Usage()
		return exitUsage
	case len(positional) > 1:
		sayf(stderr, "give one shell, not %d: bash, zsh or fish", len(positional))
		return exitUsage
	case scripts[positional[0]] == nil:
		sayf(stderr, "unknown shell %q: give bash, zsh or fish", positional[0])
		return exitUsage
	}
	fmt.Fprint(stdout, scripts[positional[0]](shellCommands()))
	return 0
}

// A shellCommand is a word that can follow sandboxd on a command line,
// with the flags it takes: "run" takes those of run and of run --wasi.
type shellCommand struct {
	name, summary string
	flags         []flagInfo
	files         bool     // its first argument is a .wasm or .wat file
	words         []string // the words its argument is one of (completion's shells)
}

// shellCommands lists the commands in the order of commands, with their
// flags in name order.
func shellCommands() []shellCommand {
	var out []shellCommand
	index := map[string]int{}
	for _, c := range commands {
		word, _, _ := strings.Cut(c.name, " ")
		i, seen := index[word]
		if !seen {
			i = len(out)
			index[word] = i
			out = append(out, shellCommand{name: word, summary: c.summary, files: word == "run" || word == "call"})
			if word == "completion" {
				out[i].words = []string{"bash", "zsh", "fish"}
			}
		}
		if fs := flagsOf(c); fs != nil {
			out[i].flags = mergeFlags(out[i].flags, flagInfos(fs))
		}
	}
	return out
}

// mergeFlags adds to a the flags of b it does not have, in name order.
func mergeFlags(a, b []flagInfo) []flagInfo {
	have := map[string]bool{}
	for _, f := range a {
		have[f.name] = true
	}
	for _, f := range b {
		if !have[f.name] {
			a = append(a, f)
		}
	}
	sort.Slice(a, func(i, j int) bool { return a[i].name < a[j].name })
	return a
}

// flagValueHints say what a flag's value is, where a shell can help: a
// file, a directory, or one of a few words. Every key is a flag of some
// command (TestFlagValueHintsNameFlags).
var flagValueHints = map[string][]string{
	"input-file":     {hintFile},
	"cpuprofile":     {hintFile},
	"trace":          {hintFile},
	"cache-dir":      {hintDir},
	"allow-path-dir": {hintDir},
	"allow-dir":      {hintDir},
	"runtimes":       {hintDir},
	"dir":            {hintDir},
	"framing":        {"content-length", "ndjson"},
	"log-level":      {"debug", "info", "warn", "error"},
	"lang":           languageNames(),
}

// languageNames are the snippet languages eval's --lang takes.
func languageNames() []string {
	var names []string
	for _, l := range protocol.Languages() {
		names = append(names, string(l))
	}
	return names
}

// flagWord is a flag as a user types it, and as the scripts offer it: a
// one-letter flag with one dash (-e), any other with two (--lang); the
// flag package takes either.
func flagWord(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

const (
	hintFile = "\x00file"
	hintDir  = "\x00dir"
)

func commandNames(cmds []shellCommand) []string {
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.name
	}
	return names
}

// hinted lists the flags whose value hint is hint (hintFile, hintDir), or
// that have word hints when hint is "".
func hinted(hint string) []string {
	var names []string
	for name, h := range flagValueHints {
		if (hint == "" && h[0] != hintFile && h[0] != hintDir) || (hint != "" && h[0] == hint) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

func dashed(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = flagWord(n)
	}
	return out
}

func bashCompletion(cmds []shellCommand) string {
	var b strings.Builder
	b.WriteString(`# bash completion for sandboxd, made by "sandboxd completion bash" from the
# flags that "sandboxd COMMAND -h" lists. make install installs it; to try
# it in this shell: source <(sandboxd completion bash)
_sandboxd() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} i
    if ((COMP_CWORD == 1)); then
`)
	fmt.Fprintf(&b, "        COMPREPLY=($(compgen -W %q -- \"$cur\"))\n", strings.Join(commandNames(cmds), " "))
	b.WriteString(`        return
    fi
    for ((i = 2; i < COMP_CWORD; i++)); do
        if [[ ${COMP_WORDS[i]} == -- ]]; then # a WASI program's arguments
            compopt -o default 2>/dev/null
            COMPREPLY=()
            return
        fi
    done
    local flags="" takes=""
    case ${COMP_WORDS[1]} in
`)
	for _, c := range cmds {
		if len(c.flags) == 0 && len(c.words) == 0 {
			continue // nothing to complete after it
		}
		fmt.Fprintf(&b, "    %s)\n", c.name)
		if len(c.words) > 0 {
			fmt.Fprintf(&b, "        COMPREPLY=($(compgen -W %q -- \"$cur\"))\n        return\n        ;;\n", strings.Join(c.words, " "))
			continue
		}
		var names, takes []string
		for _, f := range c.flags {
			names = append(names, flagWord(f.name))
			if f.arg != "" {
				takes = append(takes, flagWord(f.name))
			}
		}
		fmt.Fprintf(&b, "        flags=%q\n        takes=%q\n        ;;\n", strings.Join(names, " "), strings.Join(takes, " "))
	}
	b.WriteString("    *) return ;;\n    esac\n    case $prev in\n")
	for _, name := range hinted("") {
		fmt.Fprintf(&b, "    %s)\n        COMPREPLY=($(compgen -W %q -- \"$cur\"))\n        return\n        ;;\n", flagWord(name), strings.Join(flagValueHints[name], " "))
	}
	for _, h := range []struct{ hint, compgen string }{{hintFile, "-f"}, {hintDir, "-d"}} {
		fmt.Fprintf(&b, "    %s)\n        compopt -o filenames 2>/dev/null\n        local IFS=$'\\n'\n        COMPREPLY=($(compgen %s -- \"$cur\"))\n        return\n        ;;\n",
			strings.Join(dashed(hinted(h.hint)), "|"), h.compgen)
	}
	b.WriteString(`    esac
    if [[ " $takes " == *" $prev "* ]]; then # the value of a flag: typed, not completed
        COMPREPLY=()
    elif [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    elif [[ ${COMP_WORDS[1]} == run || ${COMP_WORDS[1]} == call ]]; then
        compopt -o filenames 2>/dev/null
        local IFS=$'\n'
        COMPREPLY=($(compgen -d -- "$cur"; compgen -f -X '!*.wasm' -- "$cur"; compgen -f -X '!*.wat' -- "$cur"))
    fi
}
complete -F _sandboxd sandboxd
`)
	return b.String()
}

// zshQuote is s inside single quotes for zsh, each quote in it closed,
// escaped and reopened.
func zshQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func zshCompletion(cmds []shellCommand) string {
	var b strings.Builder
	b.WriteString(`#compdef sandboxd
# zsh completion for sandboxd, made by "sandboxd completion zsh" from the
# flags that "sandboxd COMMAND -h" lists. make install installs it as
# _sandboxd in site-functions; to try it in this shell:
# source <(sandboxd completion zsh)
compdef _sandboxd sandboxd

_sandboxd() {
    local state line
    local -a commands
    commands=(
`)
	for _, c := range cmds {
		fmt.Fprintf(&b, "        %s\n", zshQuote(c.name+":"+c.summary))
	}
	b.WriteString(`    )
    _arguments -C '1:command:->command' '*::argument:->argument'
    case $state in
    command)
        _describe -t commands 'sandboxd command' commands
        ;;
    argument)
        case $words[1] in
`)
	for _, c := range cmds {
		fmt.Fprintf(&b, "        %s)\n            _arguments -S", c.name)
		for _, f := range c.flags {
			desc := strings.NewReplacer(`\`, `\\`, "[", `\[`, "]", `\]`).Replace(f.usage)
			spec := flagWord(f.name)
			if f.arg != "" {
				action := ""
				switch h := flagValueHints[f.name]; {
				case len(h) == 0:
				case h[0] == hintFile:
					action = "_files"
				case h[0] == hintDir:
					action = "_files -/"
				default:
					action = "(" + strings.Join(h, " ") + ")"
				}
				spec += "=[" + desc + "]:" + f.arg + ":" + action
			} else {
				spec += "[" + desc + "]"
			}
			fmt.Fprintf(&b, " \\\n                %s", zshQuote(spec))
		}
		switch {
		case c.files:
			fmt.Fprintf(&b, " \\\n                %s", zshQuote(`1:module file:_files -g "*.(wasm|wat)"`))
			fmt.Fprintf(&b, " \\\n                %s", zshQuote(`*:argument:_files`))
		case len(c.words) > 0:
			fmt.Fprintf(&b, " \\\n                %s", zshQuote("1:shell:("+strings.Join(c.words, " ")+")"))
		}
		b.WriteString("\n            ;;\n")
	}
	b.WriteString(`        esac
        ;;
    esac
}

if [[ $funcstack[1] == _sandboxd ]]; then # autoloaded from site-functions
    _sandboxd "$@"
fi
`)
	return b.String()
}

// fishQuote is s inside single quotes for fish (\\ and \').
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}

func fishCompletion(cmds []shellCommand) string {
	var b strings.Builder
	b.WriteString(`# fish completion for sandboxd, made by "sandboxd completion fish" from the
# flags that "sandboxd COMMAND -h" lists. make install installs it; to try
# it in this shell: sandboxd completion fish | source
complete -c sandboxd -f
`)
	for _, c := range cmds {
		fmt.Fprintf(&b, "complete -c sandboxd -n __fish_use_subcommand -a %s -d %s\n", c.name, fishQuote(c.summary))
	}
	for _, c := range cmds {
		cond := fishQuote("__fish_seen_subcommand_from " + c.name)
		for _, f := range c.flags {
			option := "-l" // fish: -l name completes --name, -s n completes -n
			if len(f.name) == 1 {
				option = "-s"
			}
			fmt.Fprintf(&b, "complete -c sandboxd -n %s %s %s", cond, option, f.name)
			if f.arg != "" {
				switch h := flagValueHints[f.name]; {
				case len(h) == 0:
					b.WriteString(" -x")
				case h[0] == hintFile:
					b.WriteString(" -r -F")
				case h[0] == hintDir:
					b.WriteString(" -x -a '(__fish_complete_directories)'")
				default:
					fmt.Fprintf(&b, " -x -a %s", fishQuote(strings.Join(h, " ")))
				}
			}
			fmt.Fprintf(&b, " -d %s\n", fishQuote(f.usage))
		}
		switch {
		case c.files:
			fmt.Fprintf(&b, "complete -c sandboxd -n %s -k -a '(__fish_complete_suffix .wasm; __fish_complete_suffix .wat)'\n", cond)
		case len(c.words) > 0:
			fmt.Fprintf(&b, "complete -c sandboxd -n %s -x -a %s\n", cond, fishQuote(strings.Join(c.words, " ")))
		}
	}
	return b.String()
}
