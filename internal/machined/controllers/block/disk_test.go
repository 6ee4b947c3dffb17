package block_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/talos-go/talos/internal/machined/controllers/block"
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

func TestReadDisks(t *testing.T) {
	root := t.TempDir()
	dev := "sys/devices/pci0000:00/0000:00:02.0/virtio1/block/vda"

	writeTree(t, root, map[string]string{
		dev + "/size":                                      "2097152",
		dev + "/ro":                                        "0",
		dev + "/serial":                                    "disk-1",
		dev + "/queue/rotational":                          "1",
		dev + "/queue/logical_block_size":                  "512",
		dev + "/queue/minimum_io_size":                     "4096",
		dev + "/device/modalias":                           "virtio:d00000002v00001AF4",
		"sys/devices/virtual/block/loop0/size":             "0",
		"sys/devices/virtual/block/loop1/size":             "143360",
		"sys/devices/virtual/block/loop1/ro":               "1",
		"sys/devices/virtual/block/loop1/queue/rotational": "0",
	})

	for name, target := range map[string]string{
		"vda":   "../devices/pci0000:00/0000:00:02.0/virtio1/block/vda",
		"loop0": "../devices/virtual/block/loop0",
		"loop1": "../devices/virtual/block/loop1",
	} {
		if err := os.MkdirAll(filepath.Join(root, "sys", "block"), 0o755); err != nil {
			t.Fatal(err)
		}

		if err := os.Symlink(target, filepath.Join(root, "sys", "block", name)); err != nil {
			t.Fatal(err)
		}
	}

	disks, err := block.ReadDisks(root)
	if err != nil {
		t.Fatal(err)
	}

	if len(disks) != 2 {
		t.Fatalf("want vda and loop1 (loop0 has no size), got %v", disks)
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
