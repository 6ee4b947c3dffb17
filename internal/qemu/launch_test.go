package qemu

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A preallocated disk has its blocks; a sparse one has none; one that is there is kept.
func TestMakeDisk(t *testing.T) {
	dir := t.TempDir()

	for _, tc := range []struct {
		name        string
		preallocate bool
	}{{"sparse.raw", false}, {"full.raw", true}} {
		path := filepath.Join(dir, tc.name)
		if err := makeDisk(path, 8, tc.preallocate); err != nil {
			t.Fatal(err)
		}

		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}

		allocated := fi.Sys().(*syscall.Stat_t).Blocks * 512
		if fi.Size() != 8<<20 || (allocated >= 8<<20) != tc.preallocate || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: size %d, %d bytes allocated, mode %v", tc.name, fi.Size(), allocated, fi.Mode())
		}
	}

	path := filepath.Join(dir, "sparse.raw")
	if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}

	if err := makeDisk(path, 8, false); err != nil {
		t.Fatal(err)
	}

	if b, _ := os.ReadFile(path); string(b) != "data" {
		t.Fatalf("an existing disk was replaced: %d bytes", len(b))
	}
}

// Each extra disk is on its driver's controller; a bad RTC starts in the past.
func TestArgs(t *testing.T) {
	s := NodeSpec{Name: "n", MemoryMB: 2048, CPUs: 2, Disk: "/d/disk.raw", MAC: "52:54:00:05:00:02", BadRTC: true,
		ExtraDisks: []Disk{{Path: "/d/disk-1.raw", Driver: "nvme"}, {Path: "/d/disk-2.raw", Driver: "scsi"}}}

	args := strings.Join(s.Args(), " ")

	for _, want := range []string{
		"-drive file=/d/disk.raw,format=raw,if=virtio",
		"file=/d/disk-1.raw,format=raw,if=none,id=disk1 -device nvme,drive=disk1",
		"-device virtio-scsi-pci,id=scsidisk2 -device scsi-hd,drive=disk2,bus=scsidisk2.0",
		"virtio-net-pci,netdev=net0,mac=52:54:00:05:00:02",
		"-rtc base=",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("no %q in %s", want, args)
		}
	}
}
