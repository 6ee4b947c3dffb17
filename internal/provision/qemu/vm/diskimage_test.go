package vm

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/talos-go/talos/internal/partition"
)

// A node's disk from a disk image: the image's bytes, grown to the disk's size, EPHEMERAL to
// the disk's end and the backup table there; a disk already made is kept as it is.
func TestDiskFromImage(t *testing.T) {
	dir := t.TempDir()
	image := filepath.Join(dir, "metal-amd64.raw")
	size := partition.MinSize(partition.Layout)

	f, err := os.Create(image)
	if err != nil {
		t.Fatal(err)
	}

	parts, err := partition.Plan(partition.Layout, size)
	if err != nil {
		t.Fatal(err)
	}

	if err = f.Truncate(size); err == nil {
		err = partition.Write(f, size, parts)
	}

	if err != nil {
		t.Fatal(err)
	}

	// GRUB's boot code, before the protective MBR's partition entry.
	if _, err = f.WriteAt([]byte("boot code"), 0); err != nil {
		t.Fatal(err)
	}

	marker := []byte("BOOT's first bytes")
	if _, err = f.WriteAt(marker, parts[2].Offset()); err != nil {
		t.Fatal(err)
	}

	f.Close()

	disk := filepath.Join(dir, "disk.raw")
	if err = diskFromImage(disk, image, 4096); err != nil {
		t.Fatal(err)
	}

	d, err := os.Open(disk)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	fi, _ := d.Stat()
	if fi.Size() != 4096<<20 {
		t.Fatalf("disk of %d bytes, want 4096 MiB", fi.Size())
	}

	got := make([]byte, len(marker))
	if _, err = d.ReadAt(got, parts[2].Offset()); err != nil || !bytes.Equal(got, marker) {
		t.Fatalf("BOOT's bytes: %q %v", got, err)
	}

	code := make([]byte, 9)
	if _, err = d.ReadAt(code, 0); err != nil || string(code) != "boot code" {
		t.Errorf("the boot code in the first sector: %q %v", code, err)
	}

	grown, err := partition.Read(d)
	if err != nil {
		t.Fatal(err)
	}

	eph := grown[len(grown)-1]
	if eph.Name != partition.Ephemeral || eph.First != parts[5].First || eph.Bytes() < 4096<<20-size || (eph.Last+1)%2048 != 0 {
		t.Fatalf("EPHEMERAL %+v: %d MiB", eph, eph.Bytes()>>20)
	}

	for i := range 5 {
		if grown[i].First != parts[i].First || grown[i].Last != parts[i].Last || grown[i].GUID != parts[i].GUID {
			t.Errorf("partition %s moved: %+v, was %+v", parts[i].Name, grown[i], parts[i])
		}
	}

	// The backup header is in the disk's last sector.
	last := make([]byte, 8)
	if _, err = d.ReadAt(last, fi.Size()-512); err != nil || string(last) != "EFI PART" {
		t.Errorf("no backup GPT header at the disk's end: %q", last)
	}

	// Made once: a second start keeps the node's disk.
	if err = os.WriteFile(image, []byte("another image"), 0o600); err != nil {
		t.Fatal(err)
	}

	if err = diskFromImage(disk, image, 4096); err != nil {
		t.Fatal(err)
	}

	if fi2, _ := os.Stat(disk); fi2.Size() != fi.Size() {
		t.Error("the disk was made again")
	}
}
