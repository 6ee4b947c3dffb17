package metal

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/talos-go/talos/internal/encryption"
)

// A reset's wipe of STATE empties it but for its salt: EPHEMERAL's keys locked to STATE still
// open it after the reset.
func TestResetWipeKeepsSalt(t *testing.T) {
	dir := t.TempDir()

	for _, f := range []string{"config.yaml", encryption.SaltFile, "node-id", "sub/x"} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o700)

		if err := os.WriteFile(filepath.Join(dir, f), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	if err := emptyDir(dir, encryption.SaltFile); err != nil {
		t.Fatal(err)
	}

	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != encryption.SaltFile {
		t.Fatalf("left after the wipe: %v", entries)
	}

	if b, _ := os.ReadFile(filepath.Join(dir, encryption.SaltFile)); string(b) != encryption.SaltFile {
		t.Fatalf("salt changed: %q", b)
	}
}
