package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README's MCP client configurations spawn a working server: each is
// read from README.md as a user copies it, its command becomes the
// binary under test and its placeholder directories temporary ones, and
// the server it starts serves a module from the directory it allows.
// A flag renamed, a tool renamed or a JSON typo fails here.

// readmeMCPConfig is the command and args of the server "sandboxd" in
// the README's block after <!-- mcp-config: name -->, whose servers are
// under key (Claude Desktop's mcpServers, VS Code's servers).
func readmeMCPConfig(t *testing.T, name, key string) (command string, args []string) {
	t.Helper()
	readme := string(mustRead(t, filepath.Join("..", "..", "README.md")))
	m := regexp.MustCompile(`<!-- mcp-config: ` + regexp.QuoteMeta(name) + `\b[^>]*-->\s*` + "```json\n([\\s\\S]*?)```").FindStringSubmatch(readme)
	if m == nil {
		t.Fatalf("README.md has no json block after <!-- mcp-config: %s -->", name)
	}
	var cfg map[string]map[string]struct {
		Type    string   `json:"type"`
		Command string   `json:"command"`
		Args    []string `json:"args"`
	}
	dec := json.NewDecoder(strings.NewReader(m[1]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf("the %s configuration is not what its client reads: %v\n%s", name, err, m[1])
	}
	s, ok := cfg[key]["sandboxd"]
	if !ok || len(cfg) != 1 {
		t.Fatalf("the %s configuration has no %s.sandboxd:\n%s", name, key, m[1])
	}
	if s.Type != "" && s.Type != "stdio" {
		t.Errorf("%s: type %q, want stdio", name, s.Type)
	}
	if filepath.Base(s.Command) != "sandboxd" || len(s.Args) == 0 || s.Args[0] != "mcp" {
		t.Fatalf("%s: runs %q %v, not sandboxd mcp", name, s.Command, s.Args)
	}
	return s.Command, s.Args
}

func TestMCPReadmeConfigurations(t *testing.T) {
	guest := mustRead(t, filepath.Join(wasiDir, "guest_c.wasm"))
	for _, tc := range []struct {
		name, key string
		dirs      map[string]string // placeholder in the args → what it becomes
	}{
		{"claude-desktop", "mcpServers", map[string]string{"/home/me/wasm": "wasm"}},
		{"vscode", "servers", map[string]string{"${workspaceFolder}": "."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, args := readmeMCPConfig(t, tc.name, tc.key)
			root := t.TempDir()
			for i := range args {
				for placeholder, dir := range tc.dirs {
					args[i] = strings.ReplaceAll(args[i], placeholder, filepath.Join(root, dir))
				}
			}
			// the directories the configuration allows, with a program in
			// the one for modules and a file in the one for WASI, if any
			var moduleDir, dataDir string
			for i := 1; i+1 < len(args); i++ {
				switch args[i] {
				case "--allow-path-dir":
					moduleDir = args[i+1]
				case "--allow-dir":
					dataDir = args[i+1]
				}
			}
			if moduleDir == "" {
				t.Fatalf("%v allows no module directory", args)
			}
			for _, d := range []string{moduleDir, dataDir} {
				if d != "" {
					if err := os.MkdirAll(d, 0o755); err != nil {
						t.Fatal(err)
					}
				}
			}
			program := filepath.Join(moduleDir, "guest.wasm")
			if err := os.WriteFile(program, guest, 0o644); err != nil {
				t.Fatal(err)
			}
			c := startMCPCommand(t, "", exec.Command(binPath, args...))
			call := map[string]any{"module": map[string]any{"path": program}, "args": []string{"args", "from", "the README"}}
			want := "from\nthe README\n"
			if dataDir != "" {
				if err := os.WriteFile(filepath.Join(dataDir, "in.txt"), []byte("data\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				call["args"] = []string{"cat", "/data/in.txt"}
				call["dirs"] = []any{map[string]any{"host": dataDir, "guest": "/data"}}
				want = "data\n"
			}
			res, out := c.call(t, "run_wasi", call)
			if kindOf(t, res, out) != "" || fmt.Sprint(out["stdout"]) != "map[text:"+want+"]" {
				t.Errorf("run_wasi through the %s configuration: %v", tc.name, out)
			}
		})
	}
}
