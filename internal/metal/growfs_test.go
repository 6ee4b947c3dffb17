package metal

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// An XFS made smaller than its device (a disk image's EPHEMERAL, its disk grown) grows to the
// device; one that fills it is left alone.
func TestGrowXFS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a loop device needs root")
	}

	for _, tool := range []string{"mkfs.xfs", "losetup"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}

	dir := t.TempDir()
	img := filepath.Join(dir, "ephemeral.img")

	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	if err := os.Truncate(img, 320<<20); err != nil {
		t.Fatal(err)
	}

	if out, err := exec.Command("mkfs.xfs", "-q", "-f", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.xfs: %v: %s", err, out)
	}

	if err := os.Truncate(img, 640<<20); err != nil {
		t.Fatal(err)
	}

	out, err := exec.Command("losetup", "--find", "--show", img).Output()
	if err != nil {
		t.Skipf("no loop device: %v", err)
	}

	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })

	mnt := filepath.Join(dir, "mnt")
	if err = os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}

	if err = unix.Mount(dev, mnt, "xfs", 0, ""); err != nil {
		t.Skipf("mounting XFS: %v", err)
	}

	t.Cleanup(func() { unix.Unmount(mnt, 0) })

	size := func() int64 {
		var st unix.Statfs_t
		if err := unix.Statfs(mnt, &st); err != nil {
			t.Fatal(err)
		}

		return int64(st.Blocks) * st.Bsize
	}

	before := size()

	grown, err := growXFS(mnt, dev)
	if err != nil || !grown {
		t.Fatalf("grow: %v %v", grown, err)
	}

	if after := size(); after < before+300<<20 {
		t.Fatalf("%d MiB before, %d MiB after growing to a 640 MiB device", before>>20, after>>20)
	}

	if grown, err = growXFS(mnt, dev); err != nil || grown {
		t.Fatalf("growing again: %v %v, want nothing to do", grown, err)
	}
}
