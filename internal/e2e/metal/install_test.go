package metal

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/partition"
	"github.com/talos-go/talos/internal/testenv"
)

// A node with two disks, vda of 2 GiB and vdb of 3 GiB, each with a marker in its middle,
// boots with a config (from talos.config=) whose machine.install.disk is empty and whose
// machine.install.diskSelector asks for a disk of 3 GB or more, with machine.install.wipe: the
// node chooses vdb, zeroes all of it, installs there and reboots (QEMU, under -no-reboot,
// ends). On the host's disk files: vdb has the install's partitions and no marker (the install
// alone would keep it: it writes the partitions' first MiB, and QEMU ignores mkfs.xfs's
// discards); vda has no partition table and its marker.
func TestInstallDiskSelectorWipe(t *testing.T) {
	dir := t.TempDir()
	small, big := filepath.Join(dir, "small.raw"), filepath.Join(dir, "big.raw")
	marker := []byte("a marker written before the install")

	const at = 1500 << 20 // in both disks; within EPHEMERAL on the big one, away from its XFS headers

	for path, size := range map[string]int64{small: 2048 << 20, big: 3072 << 20} {
		f, err := os.Create(path)
		if err == nil {
			if err = f.Truncate(size); err == nil {
				_, err = f.WriteAt(marker, at)
			}

			f.Close()
		}

		if err != nil {
			t.Fatal(err)
		}
	}

	cli := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: t.TempDir(), Timeout: 30 * time.Second}
	src := serveConfig(t, cli, `[{"op":"replace","path":"/machine/install/disk","value":""},`+
		`{"op":"add","path":"/machine/install/diskSelector","value":{"size":">= 3GB"}},{"op":"add","path":"/machine/install/wipe","value":true}]`)

	m := bootWith(t, qemuOptions{open: true, args: []string{
		"-drive", "file=" + small + ",format=raw,if=virtio", "-drive", "file=" + big + ",format=raw,if=virtio",
	}}, "ip=10.0.2.15::10.0.2.2:255.255.255.0:metal-1:eth0:off", "talos.config="+src.arg)

	start := time.Now()

	// A failed install leaves the node running from memory: the console says so.
	for m.running() == nil {
		if console := m.consoleText(); strings.Contains(console, "install failed") {
			t.Fatalf("the install failed:\n%s", grepLines([]byte(console), "install"))
		}

		if time.Since(start) > 12*time.Minute {
			t.Fatalf("the node did not install and reboot in 12 minutes:\n%s", tail(m.consoleText()))
		}

		time.Sleep(2 * time.Second)
	}

	t.Logf("booted, installed and rebooted in %s", time.Since(start).Round(time.Second))

	console := m.consoleText()
	for _, want := range []string{"machine.install.diskSelector chose /dev/vdb", "wiping /dev/vdb (machine.install.wipe)", "installing to /dev/vdb", "installed: rebooting from the disk"} {
		if !strings.Contains(console, want) {
			t.Errorf("the console does not say %q:\n%s", want, tail(console))
		}
	}

	for _, not := range []string{"wiping /dev/vda", "installing to /dev/vda"} {
		if strings.Contains(console, not) {
			t.Errorf("the console says %q: the install touched the disk not chosen", not)
		}
	}

	if wiped := grepLines([]byte(console), "wiped /dev/vdb"); wiped != "" {
		t.Logf("%s", wiped)
	}

	// The partitions are on the chosen disk.
	bigF, err := os.Open(big)
	if err != nil {
		t.Fatal(err)
	}
	defer bigF.Close()

	parts, err := partition.Read(bigF)
	if err != nil {
		t.Fatalf("the chosen disk has no partition table: %v", err)
	}

	var names []string
	for _, p := range parts {
		names = append(names, p.Name)
	}

	if want := []string{partition.EFI, partition.BIOS, partition.Boot, partition.Meta, partition.State, partition.Ephemeral}; !slices.Equal(names, want) {
		t.Errorf("the chosen disk's partitions: %v, want %v", names, want)
	}

	if b := readAt(t, bigF, at, len(marker)); bytes.Equal(b, marker) {
		t.Errorf("machine.install.wipe: the marker is still on the chosen disk")
	}

	// The other disk is as it was.
	smallF, err := os.Open(small)
	if err != nil {
		t.Fatal(err)
	}
	defer smallF.Close()

	if parts, err := partition.Read(smallF); err == nil {
		t.Errorf("the disk not chosen has a partition table: %v", parts)
	}

	if b := readAt(t, smallF, at, len(marker)); !bytes.Equal(b, marker) {
		t.Errorf("the disk not chosen lost its marker: %q", b)
	}
}

func tail(s string) string { return s[max(0, len(s)-4000):] }
