package imager

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// fuzzKey signs the fuzz seeds; it is fixed so that the stored corpus stays signed.
var fuzzKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))

// FuzzExtract unpacks any bytes as an image signed for fuzzKey. Properties: a crafted or
// damaged image is refused with ErrRefused and leaves nothing behind (no destination, no
// temporary folder: nothing of it is installed); an image that is accepted is exactly what the
// key signed (its unpacked folder verifies).
func FuzzExtract(f *testing.F) {
	dir := f.TempDir()
	files := map[string]string{}

	for name, content := range map[string]string{MachinedName: "machined binary v2", EtcdName: "etcd binary"} {
		files[name] = filepath.Join(dir, name)
		if err := os.WriteFile(files[name], []byte(content), 0o755); err != nil {
			f.Fatal(err)
		}
	}

	for _, compress := range []bool{false, true} {
		var buf bytes.Buffer
		if _, err := Build(&buf, BuildOptions{Version: "v1.11.1", Key: fuzzKey, Files: files, Compress: compress}); err != nil {
			f.Fatal(err)
		}

		f.Add(buf.Bytes())
	}

	f.Add([]byte{0x1f, 0x8b})
	f.Add([]byte("manifest.json"))

	keys := []ed25519.PublicKey{fuzzKey.Public().(ed25519.PublicKey)}

	f.Fuzz(func(t *testing.T, data []byte) {
		work := memDir(t)
		img, dest := filepath.Join(work, "image"), filepath.Join(work, "dest")

		if err := os.WriteFile(img, data, 0o600); err != nil {
			t.Fatal(err)
		}

		_, err := Extract(img, keys, dest)
		if err != nil {
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("refusal is not ErrRefused: %v", err)
			}

			entries, _ := os.ReadDir(work)
			if len(entries) != 1 {
				t.Fatalf("a refused image left %d entries behind (%v): %v", len(entries)-1, entries, err)
			}

			return
		}

		if _, err = VerifyDir(dest, keys); err != nil {
			t.Fatalf("an accepted image does not verify once unpacked: %v", err)
		}
	})
}

// memDir is a new folder in memory (/dev/shm) when there is one: Extract syncs every file it
// writes, and on disk the syncs would be most of each execution.
func memDir(t *testing.T) string {
	dir, err := os.MkdirTemp("/dev/shm", "fuzz-extract-")
	if err != nil {
		return t.TempDir()
	}

	t.Cleanup(func() { os.RemoveAll(dir) })

	return dir
}
