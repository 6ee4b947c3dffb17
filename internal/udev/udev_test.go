package udev

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/talos-go/talos/internal/partition"
)

func TestParseEvent(t *testing.T) {
	ev, ok := ParseEvent([]byte("add@/devices/pci0000:00/0000:00:04.0/virtio1/block/vda/vda3\x00ACTION=add\x00DEVPATH=/devices/pci0000:00/0000:00:04.0/virtio1/block/vda/vda3\x00SUBSYSTEM=block\x00DEVNAME=vda3\x00DEVTYPE=partition\x00PARTN=3\x00PARTNAME=BOOT\x00SEQNUM=1202\x00"))
	if !ok || ev.Action != "add" || ev.DevPath != "/devices/pci0000:00/0000:00:04.0/virtio1/block/vda/vda3" ||
		ev.Env["SUBSYSTEM"] != "block" || ev.Env["PARTNAME"] != "BOOT" || ev.Env["PARTN"] != "3" {
		t.Errorf("parsed %+v", ev)
	}

	if _, ok := ParseEvent([]byte("libudev\x00\xfe\xed")); ok {
		t.Error("udevd's own message format was taken for the kernel's")
	}
}

// blkid reads a file's TYPE, LABEL and UUID: util-linux's probes, an independent reader.
func blkid(t *testing.T, path string) map[string]string {
	t.Helper()

	out, err := exec.Command("blkid", "-p", "-o", "export", path).Output()
	if err != nil {
		t.Fatalf("blkid %s: %v", path, err)
	}

	m := map[string]string{}

	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}

	return m
}

// The probes read what util-linux's blkid reads from filesystems made by their own tools.
func TestProbeMatchesBlkid(t *testing.T) {
	if _, err := exec.LookPath("blkid"); err != nil {
		t.Skip("no blkid")
	}

	dir := t.TempDir()

	cases := []struct {
		fs, label string
		mkfs      func(path string) *exec.Cmd
	}{
		{"xfs", "STATE", func(p string) *exec.Cmd { return exec.Command("mkfs.xfs", "-q", "-f", "-L", "STATE", p) }},
		{"ext4", "data", func(p string) *exec.Cmd { return exec.Command("mkfs.ext4", "-q", "-F", "-L", "data", p) }},
		{"vfat", "EFI", func(p string) *exec.Cmd { return exec.Command("mkfs.vfat", "-n", "EFI", p) }},
		{"luks", "EPHEMERAL", func(p string) *exec.Cmd {
			return exec.Command("sh", "-c", `echo -n pw | cryptsetup luksFormat --batch-mode --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 --label EPHEMERAL --key-file - "$1"`, "sh", p)
		}},
		{"iso9660", "metal-iso", func(p string) *exec.Cmd {
			return exec.Command("sh", "-c", `rm "$1" && xorriso -as mkisofs -quiet -V metal-iso -o "$1" /etc/hostname`, "sh", p)
		}},
	}

	for _, c := range cases {
		t.Run(c.fs, func(t *testing.T) {
			path := filepath.Join(dir, c.fs+".img")
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}

			if err := os.Truncate(path, 400<<20); err != nil {
				t.Fatal(err)
			}

			cmd := c.mkfs(path)
			if _, err := exec.LookPath(cmd.Path); err != nil {
				t.Skipf("no %s", cmd.Path)
			}

			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, out)
			}

			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()

			var v Volume
			probe(f, &v)

			want := blkid(t, path)
			if blkidType := map[string]string{"luks": "crypto_LUKS"}[v.Filesystem]; blkidType != "" {
				v.Filesystem = blkidType
			}

			if v.Filesystem != want["TYPE"] || v.Label != want["LABEL"] || !strings.EqualFold(v.UUID, want["UUID"]) || v.Label != c.label {
				t.Errorf("probed %s %q %s, blkid reads %v", v.Filesystem, v.Label, v.UUID, want)
			}

			if c.fs != "vfat" && c.fs != "luks" && (v.FilesystemBlockSize == 0 || v.ProbedSize == 0 || v.ProbedSize > 400<<20) {
				t.Errorf("block size %d, probed size %d", v.FilesystemBlockSize, v.ProbedSize)
			}
		})
	}

	t.Run("gpt", func(t *testing.T) {
		path := filepath.Join(dir, "disk.img")

		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()

		if err = f.Truncate(3 << 30); err != nil {
			t.Fatal(err)
		}

		parts, err := partition.Plan(partition.Layout, 3<<30)
		if err != nil {
			t.Fatal(err)
		}

		if err = partition.Write(f, 3<<30, parts); err != nil {
			t.Fatal(err)
		}

		var v Volume
		probe(f, &v)

		if want := blkid(t, path); v.Filesystem != "gpt" || want["PTTYPE"] != "gpt" || !strings.EqualFold(v.UUID, want["PTUUID"]) {
			t.Errorf("probed %s %s, blkid reads %v", v.Filesystem, v.UUID, want)
		}
	})
}

func TestLinks(t *testing.T) {
	v := Volume{Name: "vda5", Parent: "vda", PartitionIndex: 5, PartitionLabel: "STATE", PartitionUUID: "6c5bdc1c-f950-4683-ae23-e250d2f632e6",
		Filesystem: "xfs", Label: "STATE", UUID: "0b1e4c2a-1111-2222-3333-444455556666"}

	got := Links(v, t.TempDir())
	want := []string{"disk/by-label/STATE", "disk/by-partlabel/STATE", "disk/by-partuuid/6c5bdc1c-f950-4683-ae23-e250d2f632e6", "disk/by-uuid/0b1e4c2a-1111-2222-3333-444455556666"}

	if !slices.Equal(got, want) {
		t.Errorf("links %v, want %v", got, want)
	}

	// A virtio disk with a serial has a by-id name, its partitions too.
	sysfs := t.TempDir()
	if err := os.MkdirAll(filepath.Join(sysfs, "class/block/vda"), 0o755); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(filepath.Join(sysfs, "class/block/vda/serial"), []byte("disk0\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	if got = Links(v, sysfs); !slices.Contains(got, "disk/by-id/virtio-disk0-part5") {
		t.Errorf("no by-id link in %v", got)
	}
}

func TestSyncLinks(t *testing.T) {
	dev := t.TempDir()

	if err := SyncLinks(dev, map[string]string{"disk/by-partlabel/STATE": "vda5", "disk/by-label/BOOT": "vda3"}); err != nil {
		t.Fatal(err)
	}

	if target, err := os.Readlink(filepath.Join(dev, "disk/by-partlabel/STATE")); err != nil || target != "../../vda5" {
		t.Errorf("by-partlabel/STATE → %q, %v", target, err)
	}

	// A device that went away loses its links; one that changed is pointed again.
	if err := SyncLinks(dev, map[string]string{"disk/by-partlabel/STATE": "vdb5"}); err != nil {
		t.Fatal(err)
	}

	if _, err := os.Lstat(filepath.Join(dev, "disk/by-label/BOOT")); !os.IsNotExist(err) {
		t.Errorf("a stale link stays: %v", err)
	}

	if target, _ := os.Readlink(filepath.Join(dev, "disk/by-partlabel/STATE")); target != "../../vdb5" {
		t.Errorf("by-partlabel/STATE → %q after the change", target)
	}
}

// The host's own block devices are listed with their sizes.
func TestVolumesOfThisMachine(t *testing.T) {
	vols, err := Volumes("/sys", "/dev")
	if err != nil {
		t.Fatal(err)
	}

	if len(vols) == 0 {
		t.Skip("no block devices")
	}

	for _, v := range vols {
		if v.Size == 0 || (v.Type != "disk" && v.Type != "partition") || v.SectorSize == 0 {
			t.Errorf("%+v", v)
		}
	}
}
