package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRootInstallIsTrustedByOtherUsers: what root installed for everyone
// (0755 directories, 0644 files, as make install leaves the runtimes) is
// trusted by any user; a directory or file of root's that its group can
// write is not.
func TestRootInstallIsTrustedByOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making root's files needs root")
	}
	const user = 65534 // not root, and owns nothing here
	install := filepath.Join(t.TempDir(), "lib", "sandboxd", "runtimes")
	if err := os.MkdirAll(filepath.Join(install, "modules-0123456789abcdef"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(filepath.Dir(filepath.Dir(install))), filepath.Dir(filepath.Dir(install)), filepath.Dir(install), install} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(install, "modules-0123456789abcdef", "x.cwasm")
	if err := os.WriteFile(file, []byte("code"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkTrustedDir(filepath.Join(install, "modules-0123456789abcdef"), user); err != nil {
		t.Errorf("root's 0755 install refused for uid %d: %v", user, err)
	}
	f, _, err := openTrustedFile(file, user)
	if err != nil {
		t.Errorf("root's 0644 file refused for uid %d: %v", user, err)
	} else {
		f.Close()
	}
	if err := os.Chmod(file, 0o664); err != nil {
		t.Fatal(err)
	}
	if _, _, err := openTrustedFile(file, user); err == nil || !strings.Contains(err.Error(), "chmod go-w "+file) {
		t.Errorf("root's group-writable file: %v, want it refused with the fix", err)
	}
	if err := os.Chmod(install, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := checkTrustedDir(install, user); err == nil || !strings.Contains(err.Error(), "chmod go-w "+install) {
		t.Errorf("root's group-writable directory: %v, want it refused with the fix", err)
	}
}
