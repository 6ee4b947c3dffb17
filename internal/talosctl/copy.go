package talosctl

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

func copyCmd(g *Global) *cobra.Command {
	return &cobra.Command{
		Use:     "copy <src-path> -|<local-path>",
		Aliases: []string{"cp"},
		Short:   "Copy data out from the node",
		Long: `Creates a .tar.gz archive of a file or folder of the node and streams it back: with "-" as
the local path the archive goes to stdout, otherwise it is extracted into the local folder
(created when missing).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, dest := args[0], args[1]

			return g.run(cmd, func(ctx context.Context, s *session) error {
				ctx, err := s.single(ctx, "copy")
				if err != nil {
					return err
				}

				r, err := s.c.Copy(ctx, src)
				if err != nil {
					return fmt.Errorf("copying %s: %w%s", src, err, hint(err))
				}

				defer r.Close()

				if dest == "-" {
					_, err = io.Copy(cmd.OutOrStdout(), r)
				} else {
					err = extractTarGz(r, dest)
				}

				if err != nil {
					return fmt.Errorf("copying %s: %w%s", src, err, hint(err))
				}

				return nil
			})
		},
	}
}

// extractTarGz unpacks an archive into dest. Entries that would land outside dest, directly
// or through a symlink the archive made, are refused.
func extractTarGz(r io.Reader, dest string) error {
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return err
	}

	root, err := filepath.EvalSymlinks(dest)
	if err != nil {
		return err
	}

	gz, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("reading the archive: %w", err)
	}

	tr := tar.NewReader(gz)

	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}

		if err != nil {
			return fmt.Errorf("reading the archive: %w", err)
		}

		target, err := inside(root, hdr.Name)
		if err != nil {
			return err
		}

		mode := os.FileMode(hdr.Mode).Perm()

		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, mode|0o700)
		case tar.TypeReg:
			err = writeEntry(tr, target, mode)
		case tar.TypeSymlink:
			err = os.Symlink(hdr.Linkname, target)
		default:
			continue // nothing else is sent
		}

		if err != nil {
			return err
		}
	}
}

// inside resolves an archive entry below root, refusing one that escapes it.
func inside(root, name string) (string, error) {
	clean := filepath.Clean(filepath.FromSlash(name))
	if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("archive entry %q points outside the destination", name)
	}

	target := filepath.Join(root, clean)

	// The nearest existing ancestor must resolve inside root: a symlink the archive made earlier
	// must not redirect writes (what is missing below it is created as real folders).
	for dir := filepath.Dir(target); ; dir = filepath.Dir(dir) {
		resolved, err := filepath.EvalSymlinks(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}

		if err != nil {
			return "", err
		}

		if resolved != root && !strings.HasPrefix(resolved, root+string(filepath.Separator)) {
			return "", fmt.Errorf("archive entry %q points outside the destination", name)
		}

		return target, nil
	}
}

func writeEntry(r io.Reader, target string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}

	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return err
	}

	if _, err = io.Copy(f, r); err != nil {
		f.Close()

		return err
	}

	return f.Close()
}
