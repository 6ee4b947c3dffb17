package partition

import (
	"context"
	"fmt"
	"os"
	"os/exec"
)

// FormatXFS makes an XFS labelled label on dev (Debian's mkfs.xfs), with more mkfs.xfs
// arguments when given (-p prototype: the files to put in it).
func FormatXFS(ctx context.Context, dev, label string, args ...string) error {
	cmd := exec.CommandContext(ctx, "mkfs.xfs", append(append([]string{"-f", "-q", "-L", label}, args...), dev)...)
	// xfsprogs since 5.19 refuses filesystems under 300 MB outside its own test suite, whose
	// variables lift that: STATE is upstream's 100 MiB, user volumes may be smaller still.
	cmd.Env = append(os.Environ(), "TEST_DIR=1", "TEST_DEV=1", "QA_CHECK_FS=1")

	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.xfs %s: %w: %s", dev, err, out)
	}

	return nil
}
