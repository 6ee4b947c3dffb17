package userfiles

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// MergeCRIParts merges the *.part files of dir, in name order, into base (containerd's TOML
// config): a part's table deepens the base's, a part's key replaces the base's. Upstream
// concatenated parts as text at first; a merge lets a part set a key of a table the base
// already has (the pinned sandbox image, say) without a duplicate-table error.
func MergeCRIParts(base, dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return base, nil
	} else if err != nil {
		return "", err
	}

	var parts []string

	for _, e := range entries { // ReadDir sorts by name
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".part") {
			parts = append(parts, filepath.Join(dir, e.Name()))
		}
	}

	if len(parts) == 0 {
		return base, nil
	}

	var merged map[string]any
	if err = toml.Unmarshal([]byte(base), &merged); err != nil {
		return "", fmt.Errorf("containerd's base config: %w", err)
	}

	for _, p := range parts {
		data, err := os.ReadFile(p)
		if err != nil {
			return "", err
		}

		var part map[string]any
		if err = toml.Unmarshal(data, &part); err != nil {
			return "", fmt.Errorf("the CRI config part %s (machine.files path %s) is not valid TOML: %w; fix its content", p, CRIPart, err)
		}

		deepMerge(merged, part)
	}

	out, err := toml.Marshal(merged)
	if err != nil {
		return "", err
	}

	return string(out), nil
}

func deepMerge(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				deepMerge(dm, sm)

				continue
			}
		}

		dst[k] = v
	}
}
