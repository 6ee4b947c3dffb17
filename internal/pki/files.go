package pki

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/talos-go/talos/internal/atomicfile"
)

// WriteFiles writes a service's secrets folder: dir is made private (0700), and each file named
// in order is written 0600 and replaced atomically and durably (atomicfile.WriteFile), so a
// service never reads half a file and a power loss leaves the old file or the new one. Files
// already holding the same bytes (and mode 0600) are left alone, so a folder watcher sees only
// real changes. Writers list keys before the certificates and CAs that name them.
func WriteFiles(dir string, order []string, files map[string][]byte) error {
	for _, name := range order {
		if _, ok := files[name]; !ok {
			return fmt.Errorf("writing %s: missing %s", dir, name)
		}
	}

	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}

	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("securing %s: %w", dir, err)
	}

	for _, name := range order {
		if err := writeFile(filepath.Join(dir, name), files[name]); err != nil {
			return err
		}
	}

	return nil
}

func writeFile(path string, data []byte) error {
	if st, err := os.Stat(path); err == nil && st.Mode().Perm() == 0o600 {
		if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data) {
			return nil
		}
	}

	return atomicfile.WriteFile(path, data, 0o600)
}

// Bundle joins PEM certificates into one CA file: each trimmed and ending in a newline, empty
// ones and repeats left out, in the order given (the issuing CA first).
func Bundle(pems ...[]byte) []byte {
	var (
		out  []byte
		seen [][]byte
	)

	for _, p := range pems {
		p = bytes.TrimSpace(p)
		if len(p) == 0 || slices.ContainsFunc(seen, func(s []byte) bool { return bytes.Equal(s, p) }) {
			continue
		}

		seen = append(seen, p)
		out = append(append(out, p...), '\n')
	}

	return out
}
