package install

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	blockctrl "github.com/talos-go/talos/internal/machined/controllers/block"
)

// machineSys is a /sys as a QEMU machine's kernel shows it: two virtio disks (2 GiB rotational,
// 3 GiB not), a read-only 10 GiB virtio disk, an NVMe disk (its device is its controller, of
// class nvme), a 4 GiB CD-ROM and a 10 GiB loop device. Disks are read from it as the Disk
// resources are.
func machineSys(t *testing.T) string {
	t.Helper()

	root := t.TempDir()
	files := map[string]string{}
	links := map[string]string{}

	virtio := func(name, slot, size, rotational, ro, serial string) {
		dir := "sys/devices/pci0000:00/0000:00:0" + slot + ".0/virtio" + slot + "/block/" + name
		for rel, v := range map[string]string{"size": size, "ro": ro, "serial": serial, "queue/rotational": rotational,
			"queue/logical_block_size": "512", "queue/minimum_io_size": "512", "device/modalias": "virtio:d00000002v00001AF4"} {
			files[dir+"/"+rel] = v
		}

		links["sys/block/"+name] = "../" + strings.TrimPrefix(dir, "sys/")
	}

	virtio("vda", "2", "4194304", "1", "0", "small")
	virtio("vdb", "3", "6291456", "0", "0", "big")
	virtio("vdc", "5", "20971520", "0", "1", "readonly")

	nvme := "sys/devices/pci0000:00/0000:00:04.0/nvme/nvme0"
	for rel, v := range map[string]string{"nvme0n1/size": "2097152", "nvme0n1/ro": "0", "nvme0n1/queue/rotational": "0",
		"nvme0n1/queue/logical_block_size": "512", "nvme0n1/wwid": "nvme.1b36-6465616462656566-51454d55204e564d65204374726c-00000001",
		"model": "QEMU NVMe Ctrl", "serial": "deadbeef"} {
		files[nvme+"/"+rel] = v
	}

	files["sys/class/nvme/.keep"] = ""
	links[nvme+"/nvme0n1/device"] = ".."
	links[nvme+"/subsystem"] = "../../../../../class/nvme"
	links["sys/block/nvme0n1"] = "../devices/pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1"

	cd := "sys/devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sr0"
	for rel, v := range map[string]string{"size": "8388608", "ro": "0", "queue/rotational": "1", "device/model": "QEMU DVD-ROM", "device/modalias": "scsi:t-0x05"} {
		files[cd+"/"+rel] = v
	}

	links["sys/block/sr0"] = "../devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sr0"
	files["sys/devices/virtual/block/loop1/size"] = "20971520"
	files["sys/devices/virtual/block/loop1/ro"] = "0"
	links["sys/block/loop1"] = "../devices/virtual/block/loop1"

	for rel, content := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, rel)), 0o755); err != nil {
			t.Fatal(err)
		}

		if err := os.WriteFile(filepath.Join(root, rel), []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	for rel, target := range links {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, rel)), 0o755); err != nil {
			t.Fatal(err)
		}

		if err := os.Symlink(target, filepath.Join(root, rel)); err != nil {
			t.Fatal(err)
		}
	}

	return root
}

// machine.install.diskSelector picks, as upstream's, the first disk by name that every given
// criterion matches; read-only disks, CD-ROMs and loop devices never match; with no selector
// machine.install.disk is the disk.
func TestChooseDisk(t *testing.T) {
	disks, err := blockctrl.ReadDisks(machineSys(t))
	if err != nil {
		t.Fatal(err)
	}

	if got := disks["nvme0n1"].Transport; got != "nvme" {
		t.Fatalf("nvme0n1's transport is %q, want nvme (the selector's type: nvme reads it)", got)
	}

	for _, tc := range []struct{ install, want string }{
		{`disk: /dev/sda`, "/dev/sda"},
		{`disk: ""`, ""},
		// vdc (10 GiB, read-only), sr0 (4 GiB CD-ROM) and loop1 (10 GiB, no transport) are bigger.
		{`diskSelector: {size: ">= 3GB"}`, "/dev/vdb"},
		{`diskSelector: {size: ">= 3GB"}` + "\n    disk: /dev/vda", "/dev/vdb"}, // the selector wins, as upstream's
		{`diskSelector: {size: "<= 3GB"}`, "/dev/nvme0n1"},                      // nvme0n1 and vda match: the first by name
		{`diskSelector: {size: "> 1GiB"}`, "/dev/vda"},
		{`diskSelector: {size: 3221225472}`, "/dev/vdb"},
		{`diskSelector: {size: 2GiB}`, "/dev/vda"},
		{`diskSelector: {type: nvme}`, "/dev/nvme0n1"},
		{`diskSelector: {type: hdd}`, "/dev/vda"},
		{`diskSelector: {type: ssd, size: ">= 2GB"}`, "/dev/vdb"},
		{`diskSelector: {serial: big}`, "/dev/vdb"},
		{`diskSelector: {model: "QEMU NVMe*"}`, "/dev/nvme0n1"},
		{`diskSelector: {wwid: "nvme.1b36-*"}`, "/dev/nvme0n1"},
		{`diskSelector: {modalias: "virtio:*"}`, "/dev/vda"},
		{`diskSelector: {busPath: "/pci0000:00/0000:00:03.0/*"}`, "/dev/vdb"},
		{`diskSelector: {modalias: "virtio:*", size: ">= 3GB", type: ssd}`, "/dev/vdb"},
	} {
		cfg, err := configloader.NewFromBytes([]byte("version: v1alpha1\nmachine:\n  type: worker\n  install:\n    " + tc.install + "\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.install, err)
		}

		got, err := ChooseDisk(cfg.Machine().Install(), disks)
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.install, got, err, tc.want)
		}
	}

	for _, tc := range []struct{ install, want string }{
		// Every criterion must match: the big disk is not the small one's serial.
		{`diskSelector: {size: ">= 3GB", serial: small}`, "matches none of this machine's disks"},
		{`diskSelector: {size: ">= 3GB", type: nvme}`, "matches none of this machine's disks"},
		{`diskSelector: {model: "QEMU DVD-ROM"}`, "matches none of this machine's disks"},
		{`diskSelector: {type: sd}`, "matches none of this machine's disks"},
		{`diskSelector: {name: vda}`, "selector on name is not supported"},
		{`diskSelector: {type: tape}`, `unsupported disk type "tape"`},
	} {
		cfg, err := configloader.NewFromBytes([]byte("version: v1alpha1\nmachine:\n  type: worker\n  install:\n    " + tc.install + "\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.install, err)
		}

		got, err := ChooseDisk(cfg.Machine().Install(), disks)
		if err == nil || !strings.Contains(err.Error(), "machine.install.diskSelector") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %q, %v; want an error naming machine.install.diskSelector and %q", tc.install, got, err, tc.want)

			continue
		}

		// No match lists the disks as `talosctl get disks` does.
		if strings.Contains(tc.want, "matches none") {
			for _, row := range []string{`(?m)^ID\s+SIZE\s+READ ONLY\s+TRANSPORT\s`, `(?m)^vdb\s+3\.2 GB\s+false\s+virtio\s+false\s+big$`,
				`(?m)^nvme0n1\s+1\.1 GB\s+false\s+nvme\s+false\s+nvme\.1b36-\S+\s+QEMU NVMe Ctrl\s+deadbeef$`, `(?m)^sr0\s+4\.3 GB\s`} {
				if !regexp.MustCompile(row).MatchString(err.Error()) {
					t.Errorf("%s: the error lists no %q:\n%v", tc.install, row, err)
				}
			}
		}
	}
}
