package uservolume

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"

	"github.com/talos-go/talos/internal/partition"
	"github.com/talos-go/talos/internal/udev"
)

func volumes(t *testing.T, docs string) []Volume {
	t.Helper()

	return Volumes(loaded(t, docs))
}

func loaded(t *testing.T, docs string) config.Config {
	t.Helper()

	c, err := configloader.NewFromBytes([]byte(docs))
	if err != nil {
		t.Fatal(err)
	}

	return c
}

const data = `apiVersion: v1alpha1
kind: UserVolumeConfig
name: data
provisioning:
  diskSelector:
    match: "'/dev/disk/by-id/virtio-uservol-1' in disk.symlinks && !system_disk"
  minSize: 100MiB
  maxSize: 100MiB
`

// The disk selector is CEL over the Disk resource, as upstream's: symlinks, system_disk.
func TestSelectorMatchesDisks(t *testing.T) {
	v := volumes(t, data)[0]

	for _, c := range []struct {
		disk Disk
		want bool
	}{
		{Disk{Name: "vdb", Spec: block.DiskSpec{Symlinks: []string{"/dev/disk/by-id/virtio-uservol-1"}}}, true},
		{Disk{Name: "vdb", Spec: block.DiskSpec{Symlinks: []string{"/dev/disk/by-id/virtio-uservol-1"}}, System: true}, false},
		{Disk{Name: "vdc", Spec: block.DiskSpec{Symlinks: []string{"/dev/disk/by-id/virtio-uservol-2"}}}, false},
	} {
		got, err := Matches(v, c.disk)
		if err != nil || got != c.want {
			t.Errorf("%+v: %v %v, want %v", c.disk, got, err, c.want)
		}
	}

	sized := volumes(t, strings.Replace(data, `"'/dev/disk/by-id/virtio-uservol-1' in disk.symlinks && !system_disk"`, `disk.size >= 2u * GiB && disk.transport == "virtio"`, 1))[0]

	big := Disk{Spec: block.DiskSpec{Size: 3 << 30, Transport: "virtio"}}
	if got, err := Matches(sized, big); err != nil || !got {
		t.Errorf("a 3 GiB virtio disk: %v %v", got, err)
	}

	big.Spec.Size = 1 << 30
	if got, _ := Matches(sized, big); got {
		t.Error("a 1 GiB disk matched disk.size >= 2u * GiB")
	}
}

func TestCheckNamesTheField(t *testing.T) {
	for doc, want := range map[string]string{
		data + "filesystem:\n  type: ext4\n": "filesystem.type ext4",
		strings.Replace(data, "  diskSelector:\n    match: \"'/dev/disk/by-id/virtio-uservol-1' in disk.symlinks && !system_disk\"\n", "", 1): "diskSelector.match is required",
		data + "encryption:\n  provider: luks2\n  options: [fast]\n  keys:\n    - slot: 0\n      tpm: {}\n":                                   "encryption.options: \"fast\" is not one of",
	} {
		cfg, err := configloader.NewFromBytes([]byte(doc))
		if err != nil {
			// The machinery refuses some of these itself, naming the field.
			if !strings.Contains(err.Error(), "diskSelector") {
				t.Errorf("%s: %v", want, err)
			}

			continue
		}

		if err = Check(User(cfg.UserVolumeConfigs()[0])); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "UserVolumeConfig data") {
			t.Errorf("%s: %v", want, err)
		}
	}

	if err := Check(volumes(t, data)[0]); err != nil {
		t.Errorf("a plain volume: %v", err)
	}
}

// A new partition goes after the last one, MiB-aligned, of maxSize (grow or not); a disk too
// small is an error naming the sizes.
func TestPlace(t *testing.T) {
	v := volumes(t, data)[0]

	const disk = 300 << 20

	first, err := place(nil, "u-data", v.Provisioning, disk, 512)
	if err != nil {
		t.Fatal(err)
	}

	if first.Number != 1 || first.Offset() != partition.MiB || first.Bytes() != 100<<20 {
		t.Fatalf("first partition %+v: offset %d, %d bytes", first, first.Offset(), first.Bytes())
	}

	second, err := place([]partition.Placed{first}, "u-logs", v.Provisioning, disk, 512)
	if err != nil || second.Number != 2 || second.Offset() != first.Offset()+first.Bytes() || second.Name != "u-logs" {
		t.Fatalf("second partition %+v: %v", second, err)
	}

	// grow: true does not lift maxSize, as upstream's; without maxSize the volume takes the rest.
	growing := volumes(t, strings.Replace(data, "provisioning:\n", "provisioning:\n  grow: true\n", 1))[0]
	if p, err := place(nil, "u-data", growing.Provisioning, disk, 512); err != nil || p.Bytes() != 100<<20 {
		t.Fatalf("grow: true with maxSize 100 MiB: %d bytes, %v", p.Bytes(), err)
	}

	unbounded := volumes(t, strings.Replace(data, "  maxSize: 100MiB\n", "", 1))[0]
	if p, err := place(nil, "u-data", unbounded.Provisioning, disk, 512); err != nil || p.Bytes() != 298<<20 {
		t.Fatalf("no maxSize: %d bytes, %v; want the rest of the disk, 298 MiB", p.Bytes(), err)
	}

	// 98 MiB are left (the backup table takes the end).
	if _, err = place([]partition.Placed{first, second}, "u-x", v.Provisioning, disk, 512); err == nil || !strings.Contains(err.Error(), "98 MiB free, provisioning.minSize asks 100 MiB") {
		t.Fatalf("a full disk: %v", err)
	}
}

const swapAndRaw = `apiVersion: v1alpha1
kind: SwapVolumeConfig
name: swap1
provisioning:
  diskSelector:
    match: system_disk
  maxSize: 64MiB
---
apiVersion: v1alpha1
kind: RawVolumeConfig
name: raw1
provisioning:
  diskSelector:
    match: system_disk
  maxSize: 32MiB
`

// Swap and raw volumes are partitions named as upstream's (s-, r-), placed as user volumes.
func TestSwapAndRawVolumes(t *testing.T) {
	vs := volumes(t, data+"---\n"+swapAndRaw)
	if len(vs) != 3 {
		t.Fatalf("%d volumes, want 3: %+v", len(vs), vs)
	}

	for i, want := range []struct {
		part string
		use  Use
	}{{"u-data", UseXFS}, {"s-swap1", UseSwap}, {"r-raw1", UseRaw}} {
		if vs[i].PartitionName() != want.part || vs[i].Use != want.use {
			t.Errorf("volume %d: %s use %d, want %s use %d", i, vs[i].PartitionName(), vs[i].Use, want.part, want.use)
		}

		if err := Check(vs[i]); err != nil {
			t.Errorf("%s: %v", want.part, err)
		}
	}

	if ok, err := Matches(vs[1], Disk{Name: "vda", System: true}); err != nil || !ok {
		t.Errorf("system_disk on the system disk: %v %v", ok, err)
	}

	placed, err := place(nil, vs[1].PartitionName(), vs[1].Provisioning, 300<<20, 512)
	if err != nil || placed.Name != "s-swap1" || placed.Bytes() != 64<<20 {
		t.Errorf("swap partition %+v (%d bytes): %v", placed, placed.Bytes(), err)
	}

	noSelector := volumes(t, strings.Replace(swapAndRaw, "  diskSelector:\n    match: system_disk\n  maxSize: 64MiB\n", "  maxSize: 64MiB\n", 1))[0]
	if err = Check(noSelector); err == nil || !strings.Contains(err.Error(), "SwapVolumeConfig swap1: provisioning.diskSelector.match is required") {
		t.Errorf("a swap volume without a disk selector: %v", err)
	}
}

// The swap header is the kernel's version 1 (what mkswap writes): probed back as swap with
// its UUID and label; the device is its pages, the last numbered.
func TestFormatSwap(t *testing.T) {
	dev := filepath.Join(t.TempDir(), "swap")
	if err := os.WriteFile(dev, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}

	id := uuid.New()
	if err := formatSwap(dev, "s-swap1", id); err != nil {
		t.Fatal(err)
	}

	v, err := udev.Probe(dev)
	if err != nil || v.Filesystem != "swap" || v.UUID != id.String() || v.Label != "s-swap1" {
		t.Fatalf("probed %+v: %v", v, err)
	}

	b, _ := os.ReadFile(dev)
	page := os.Getpagesize()

	if version, last := binary.LittleEndian.Uint32(b[1024:]), binary.LittleEndian.Uint32(b[1028:]); version != 1 || int(last) != 1<<20/page-1 {
		t.Errorf("version %d, last page %d", version, last)
	}

	if err = formatSwap(filepath.Join(t.TempDir(), "none"), "x", id); err == nil {
		t.Error("formatting a missing device: no error")
	}
}

// An existing volume is the first discovered one with a filesystem its selector picks, over
// the volume and its disk as upstream's VolumeLocator.
func TestMatchExisting(t *testing.T) {
	docs := func(match string) config.ExistingVolumeConfig {
		return loaded(t, "apiVersion: v1alpha1\nkind: ExistingVolumeConfig\nname: boot\ndiscovery:\n  volumeSelector:\n    match: "+match+"\nmount:\n  readOnly: true\n").ExistingVolumeConfigs()[0]
	}

	vols := []Found{
		{Volume: block.DiscoveredVolumeSpec{DevPath: "/dev/vda", Name: "gpt"}, Disk: block.DiskSpec{Transport: "virtio"}},
		{Volume: block.DiscoveredVolumeSpec{DevPath: "/dev/vda1", Name: "vfat", PartitionLabel: "EFI"}, Disk: block.DiskSpec{Transport: "virtio"}},
		{Volume: block.DiscoveredVolumeSpec{DevPath: "/dev/vda3", Name: "xfs", PartitionLabel: "BOOT"}, Disk: block.DiskSpec{Transport: "virtio"}},
		{Volume: block.DiscoveredVolumeSpec{DevPath: "/dev/vdb1", PartitionLabel: "BOOT"}, Disk: block.DiskSpec{Transport: "nvme"}}, // no filesystem
	}

	v := docs(`volume.partition_label == "BOOT"`)
	if !v.Mount().ReadOnly() {
		t.Fatal("mount.readOnly not read")
	}

	if f, err := MatchExisting(v, vols); err != nil || f.Volume.DevPath != "/dev/vda3" {
		t.Errorf("BOOT: %+v %v", f.Volume, err)
	}

	if f, err := MatchExisting(docs(`volume.name == "vfat" && disk.transport == "virtio"`), vols); err != nil || f.Volume.DevPath != "/dev/vda1" {
		t.Errorf("vfat on virtio: %+v %v", f.Volume, err)
	}

	if _, err := MatchExisting(docs(`disk.transport == "nvme"`), vols); err == nil || !strings.Contains(err.Error(), "ExistingVolumeConfig boot: discovery.volumeSelector.match: no volume") {
		t.Errorf("a volume without a filesystem matched: %v", err)
	}
}
