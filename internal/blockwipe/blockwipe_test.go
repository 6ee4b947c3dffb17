package blockwipe

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/partition"
)

const mib = 1 << 20

// Two loop devices: a disk with a GPT, and a filesystem that is mounted (squashfs: the
// kernels here all have it). A request naming the
// mounted one, or a bad name, is refused and writes nothing; a fast wipe takes the table and
// keeps the middle; a zeroes wipe takes everything. (This host's kernel parses no partition
// tables: partitions are wiped in the metal suite.)
func TestWipeLoopDevices(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: loop devices")
	}

	for _, tool := range []string{"losetup", "mksquashfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}

	dir := t.TempDir()
	img := filepath.Join(dir, "disk.img")
	size := int64(64 * mib)

	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}

	parts, err := partition.Plan([]partition.Partition{{Name: "ONE", Type: partition.TypeLinux, Size: 8 * mib}}, size)
	if err != nil {
		t.Fatal(err)
	}

	mark := []byte("data in the middle")
	if err = f.Truncate(size); err == nil {
		err = partition.Write(f, size, parts)
	}

	if err == nil {
		_, err = f.WriteAt(mark, 32*mib)
	}

	f.Close()

	if err != nil {
		t.Fatal(err)
	}

	disk := attach(t, img)

	fsImg := filepath.Join(dir, "fs.img")
	if out, err := exec.Command("mksquashfs", t.TempDir(), fsImg, "-quiet").CombinedOutput(); err != nil {
		t.Fatalf("mksquashfs: %v\n%s", err, out)
	}

	fs := attach(t, fsImg)

	mnt := t.TempDir()
	if err = unix.Mount("/dev/"+fs, mnt, "squashfs", unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { unix.Unmount(mnt, 0) })

	before := read(t, img)

	for _, tc := range []struct {
		dev  Device
		want error
	}{
		{Device{Name: fs}, ErrInUse},
		{Device{Name: "../" + disk}, ErrName},
		{Device{Name: "nosuchdevice0"}, ErrNotFound},
	} {
		// The disk first: it is not wiped either.
		if err = Wipe("/sys", "/dev", []Device{{Name: disk}, tc.dev}); !errors.Is(err, tc.want) {
			t.Fatalf("wipe %q: %v, want %v", tc.dev.Name, err, tc.want)
		}
	}

	if !bytes.Equal(read(t, img), before) {
		t.Fatal("a refused wipe changed the disk")
	}

	if _, err = partition.Read(bytes.NewReader(before)); err != nil {
		t.Fatalf("the test's table: %v", err)
	}

	if err = Wipe("/sys", "/dev", []Device{{Name: disk, Method: Fast}}); err != nil {
		t.Fatal(err)
	}

	after := read(t, img)
	if _, err = partition.Read(bytes.NewReader(after)); err == nil {
		t.Fatal("the partition table survived a fast wipe")
	}

	zeros := make([]byte, mib)
	if !bytes.Equal(after[:mib], zeros) || !bytes.Equal(after[len(after)-mib:], zeros) {
		t.Fatal("a fast wipe left data in the first or last MiB")
	}

	if !bytes.Contains(after, mark) {
		t.Fatal("a fast wipe took the middle of the disk")
	}

	if err = Wipe("/sys", "/dev", []Device{{Name: disk, Method: Zeroes}}); err != nil {
		t.Fatal(err)
	}

	if !bytes.Equal(read(t, img), make([]byte, size)) {
		t.Fatal("a zeroes wipe left data")
	}
}

// attach makes a loop device of img, detached at the end, and returns its name.
func attach(t *testing.T, img string) string {
	t.Helper()

	out, err := exec.Command("losetup", "--find", "--show", img).Output()
	if err != nil {
		t.Fatal(err)
	}

	name := filepath.Base(strings.TrimSpace(string(out)))
	t.Cleanup(func() { exec.Command("losetup", "-d", "/dev/"+name).Run() })

	return name
}

func read(t *testing.T, path string) []byte {
	t.Helper()

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	return b
}
