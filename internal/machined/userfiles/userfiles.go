// Package userfiles makes machine.files and machine.env take effect, as upstream Talos does:
// files go under /var (create, append or overwrite, with their permissions), the one file
// outside it is the CRI config part /etc/cri/conf.d/20-customization.part, merged into
// containerd's config; the environment is every service's. Both are read at boot, before the
// services start, so a change needs a reboot.
package userfiles

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
)

// CRIPart is the path upstream takes as a CRI config part (constants.CRIConfdPath joined with
// 20-customization.part): its content is merged into containerd's CRI config.
const CRIPart = "/etc/cri/conf.d/20-customization.part"

// CRIPartName is CRIPart's name in the node's CRI parts folder.
const CRIPartName = "20-customization.part"

// The ops of machine.files[].op.
const (
	OpCreate    = "create"
	OpAppend    = "append"
	OpOverwrite = "overwrite"
)

// Check refuses machine.files entries the node cannot honour: a path that is neither under /var
// nor CRIPart, a path that is not absolute and clean, an unknown op. Each error names the field
// and the fix.
func Check(files []config.File) error {
	var errs []error

	for i, f := range files {
		p := f.Path()

		switch {
		case p == "":
			errs = append(errs, fmt.Errorf("machine.files[%d].path: empty; give the file's absolute path under /var", i))
		case !filepath.IsAbs(p) || filepath.Clean(p) != p:
			errs = append(errs, fmt.Errorf("machine.files[%d].path %q: not an absolute clean path; write it as /var/<path> without '..', '.' or a trailing '/'", i, p))
		case p == CRIPart:
			var part map[string]any
			if err := toml.Unmarshal([]byte(f.Content()), &part); err != nil {
				errs = append(errs, fmt.Errorf("machine.files[%d].content: the CRI config part %s is not valid TOML (%w); fix its content", i, CRIPart, err))
			}
		case strings.HasPrefix(p, "/var/"):
		default:
			errs = append(errs, fmt.Errorf("machine.files[%d].path %q: the root is read-only, files go under /var only (or the CRI config part %s); move the file under /var", i, p, CRIPart))
		}

		switch f.Op() {
		case OpCreate, OpAppend, OpOverwrite:
		default:
			errs = append(errs, fmt.Errorf("machine.files[%d].op %q: unknown op; use create (the file must not exist), append or overwrite (it must exist)", i, f.Op()))
		}
	}

	return errors.Join(errs...)
}

// CheckEnv refuses machine.env names that cannot be an environment variable's (upstream passes
// them as given, so any other name is taken).
func CheckEnv(env map[string]string) error {
	var errs []error

	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range env {
			if !yield(k) {
				return
			}
		}
	}) {
		if name == "" || strings.ContainsAny(name, "=\x00") || strings.ContainsRune(env[name], 0) {
			errs = append(errs, fmt.Errorf("machine.env[%q]: a variable's name must be non-empty without '=' or NUL, and its value without NUL; rename or drop it", name))
		}
	}

	return errors.Join(errs...)
}

// Env is machine.env as KEY=value, sorted (a stable order: a service's spec does not change
// between boots with the same config).
func Env(cfg config.Config) []string {
	if cfg == nil || cfg.Machine() == nil {
		return nil
	}

	env := cfg.Machine().Env()
	out := make([]string, 0, len(env))

	for k, v := range env {
		out = append(out, k+"="+v)
	}

	slices.Sort(out)

	return out
}

// Write carries out machine.files: a /var file is written to varDir (the node's /var) by its
// op, CRIPart to criDir as CRIPartName. The CRI part of an earlier boot is removed when the
// config has none. Every file is tried; the errors name their machine.files index.
func Write(files []config.File, varDir, criDir string) error {
	var (
		errs []error
		cri  bool
	)

	for i, f := range files {
		var err error

		if f.Path() == CRIPart {
			cri = true
			err = writeCRIPart(criDir, f.Content())
		} else {
			err = writeVar(varDir, f)
		}

		if err != nil {
			errs = append(errs, fmt.Errorf("machine.files[%d] (%s %s): %w", i, f.Op(), f.Path(), err))
		}
	}

	if !cri {
		if err := os.Remove(filepath.Join(criDir, CRIPartName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}

	return errors.Join(errs...)
}

func writeCRIPart(dir, content string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}

	return os.WriteFile(filepath.Join(dir, CRIPartName), []byte(content), 0o600)
}

// writeVar does one /var file's op. create refuses an existing file, unless it is this one
// written by an earlier boot (same content and mode): /var outlives reboots, and the same
// config must boot again.
func writeVar(varDir string, f config.File) error {
	rel, ok := strings.CutPrefix(f.Path(), "/var/")
	if !ok {
		return fmt.Errorf("not under /var: move the file under /var") // Check refuses this first
	}

	p := filepath.Join(varDir, rel)
	mode := f.Permissions().Perm()

	st, err := os.Lstat(p)

	switch {
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return err
	case err == nil && !st.Mode().IsRegular():
		return fmt.Errorf("exists and is not a regular file (%s): remove it or choose another path", st.Mode().Type())
	}

	exists := err == nil

	switch f.Op() {
	case OpCreate:
		if exists {
			if old, rerr := os.ReadFile(p); rerr == nil && string(old) == f.Content() && st.Mode().Perm() == mode {
				return nil
			}

			return errors.New("the file exists and op create makes a new file only: use op overwrite, or append")
		}

		if err = os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}

		return writeFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, f.Content(), mode)
	case OpOverwrite:
		if !exists {
			return errors.New("the file does not exist and op overwrite replaces an existing file: use op create")
		}

		return writeFile(p, os.O_TRUNC|os.O_WRONLY, f.Content(), mode)
	case OpAppend:
		if !exists {
			return errors.New("the file does not exist and op append adds to an existing file: use op create")
		}

		return writeFile(p, os.O_APPEND|os.O_WRONLY, f.Content(), mode)
	default:
		return fmt.Errorf("unknown op %q: use create, append or overwrite", f.Op())
	}
}

// writeFile writes content with flag and sets mode exactly (the umask does not apply).
func writeFile(p string, flag int, content string, mode fs.FileMode) error {
	fh, err := os.OpenFile(p, flag, mode)
	if err != nil {
		return err
	}

	_, err = fh.WriteString(content)

	return errors.Join(err, fh.Chmod(mode), fh.Sync(), fh.Close())
}
