package block_test

import (
	"os"
	"path/filepath"
	"testing"

	blockres "github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/block"
	"github.com/talos-go/talos/internal/machined/controllers/ctest"
)

// writeTree writes files (relative path -> content) under root.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()

	for rel, content := range files {
		path := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}

		if err := os.WriteFile(path, []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// sysTree is a /sys with a virtio disk, an empty loop device and a read-only loop device.
func sysTree(t *testing.T) string {
	t.Helper()

	root := t.TempDir()
	dev := "sys/devices/pci0000:00/0000:00:02.0/virtio1/block/vda"
	cd := "sys/devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sr0"

	writeTree(t, root, map[string]string{
		dev + "/size":                                      "2097152",
		dev + "/ro":                                        "0",
		dev + "/serial":                                    "disk-1",
		dev + "/queue/rotational":                          "1",
		dev + "/queue/logical_block_size":                  "512",
		dev + "/queue/minimum_io_size":                     "4096",
		dev + "/device/modalias":                           "virtio:d00000002v00001AF4",
		cd + "/size":                                       "2048",
		cd + "/ro":                                         "1",
		cd + "/device/model":                               "QEMU DVD-ROM",
		"sys/devices/virtual/block/loop0/size":             "0",
		"sys/devices/virtual/block/loop1/size":             "143360",
		"sys/devices/virtual/block/loop1/ro":               "1",
		"sys/devices/virtual/block/loop1/queue/rotational": "0",
	})

	for name, target := range map[string]string{
		"vda":   "../devices/pci0000:00/0000:00:02.0/virtio1/block/vda",
		"loop0": "../devices/virtual/block/loop0",
		"loop1": "../devices/virtual/block/loop1",
		"sr0":   "../devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sr0",
	} {
		if err := os.MkdirAll(filepath.Join(root, "sys", "block"), 0o755); err != nil {
			t.Fatal(err)
		}

		if err := os.Symlink(target, filepath.Join(root, "sys", "block", name)); err != nil {
			t.Fatal(err)
		}
	}

	return root
}

func TestReadDisks(t *testing.T) {
	root := sysTree(t)

	disks, err := block.ReadDisks(root)
	if err != nil {
		t.Fatal(err)
	}

	if len(disks) != 3 {
		t.Fatalf("want vda, sr0 and loop1 (loop0 has no size), got %v", disks)
	}

	if sr := disks["sr0"]; !sr.CDROM || !sr.Readonly || sr.Model != "QEMU DVD-ROM" || sr.BusPath != "/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0" {
		t.Fatalf("sr0: %+v", sr)
	}

	if disks["vda"].CDROM {
		t.Fatal("vda is no CD-ROM")
	}

	vda := disks["vda"]
	if vda.DevPath != "/dev/vda" || vda.Size != 1<<30 || vda.PrettySize != "1.1 GB" || vda.SectorSize != 512 || vda.IOSize != 4096 ||
		vda.Readonly || !vda.Rotational || vda.Serial != "disk-1" || vda.Transport != "virtio" || vda.BusPath != "/pci0000:00/0000:00:02.0/virtio1" {
		t.Fatalf("vda: %+v", vda)
	}

	if loop := disks["loop1"]; !loop.Readonly || loop.Rotational || loop.BusPath != "" || loop.Size != 143360*512 {
		t.Fatalf("loop1: %+v", loop)
	}

	if _, err := block.ReadDisks(filepath.Join(root, "missing")); err == nil {
		t.Fatal("a missing /sys/block must be an error")
	}
}

func TestDisk(t *testing.T) {
	env := ctest.Start(t, &block.DiskController{Root: sysTree(t)})

	// One Disk per device with a size, by device name.
	ctest.AssertResource(env, "vda", func(r *blockres.Disk, a *assert.Assertions) {
		a.Equal("/dev/vda", r.TypedSpec().DevPath)
		a.Equal(uint64(1<<30), r.TypedSpec().Size)
		a.Equal("virtio", r.TypedSpec().Transport)
		a.Equal("disk-1", r.TypedSpec().Serial)
	})
	ctest.AssertResource(env, "loop1", func(r *blockres.Disk, a *assert.Assertions) {
		a.True(r.TypedSpec().Readonly)
	})
	ctest.AssertResource(env, "sr0", func(r *blockres.Disk, a *assert.Assertions) {
		a.True(r.TypedSpec().CDROM)
		a.Equal("QEMU DVD-ROM", r.TypedSpec().Model)
	})
	ctest.AssertIDs[*blockres.Disk](env, "loop1", "sr0", "vda")
}
