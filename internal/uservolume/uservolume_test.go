package uservolume

import (
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"

	"github.com/talos-go/talos/internal/partition"
)

func volumes(t *testing.T, docs string) []config.UserVolumeConfig {
	t.Helper()

	cfg, err := configloader.NewFromBytes([]byte(docs))
	if err != nil {
		t.Fatal(err)
	}

	return cfg.UserVolumeConfigs()
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

		if err = Check(cfg.UserVolumeConfigs()[0]); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "UserVolumeConfig data") {
			t.Errorf("%s: %v", want, err)
		}
	}

	if err := Check(volumes(t, data)[0]); err != nil {
		t.Errorf("a plain volume: %v", err)
	}
}

// A new partition goes after the last one, MiB-aligned, of maxSize; a disk too small is an
// error naming the sizes.
func TestPlace(t *testing.T) {
	v := volumes(t, data)[0]

	const disk = 300 << 20

	first, err := place(nil, "u-data", v.Provisioning(), disk, 512)
	if err != nil {
		t.Fatal(err)
	}

	if first.Number != 1 || first.Offset() != partition.MiB || first.Bytes() != 100<<20 {
		t.Fatalf("first partition %+v: offset %d, %d bytes", first, first.Offset(), first.Bytes())
	}

	second, err := place([]partition.Placed{first}, "u-logs", v.Provisioning(), disk, 512)
	if err != nil || second.Number != 2 || second.Offset() != first.Offset()+first.Bytes() || second.Name != "u-logs" {
		t.Fatalf("second partition %+v: %v", second, err)
	}

	// 98 MiB are left (the backup table takes the end).
	if _, err = place([]partition.Placed{first, second}, "u-x", v.Provisioning(), disk, 512); err == nil || !strings.Contains(err.Error(), "98 MiB free, provisioning.minSize asks 100 MiB") {
		t.Fatalf("a full disk: %v", err)
	}
}
