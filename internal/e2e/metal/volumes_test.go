package metal

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// volumeDocs are the volume documents TestClusterCreateQEMUVolumes gives its node: EPHEMERAL
// bounded to 2 GiB, which leaves the 4 GiB system disk room for a swap volume and a raw volume
// after it (both encrypted, the node's ID their key), and the node's EFI partition (FAT,
// holding GRUB's UEFI program) mounted read-only as an existing volume.
const volumeDocs = `apiVersion: v1alpha1
kind: VolumeConfig
name: EPHEMERAL
provisioning:
  minSize: 1GiB
  maxSize: 2GiB
  grow: false
---
apiVersion: v1alpha1
kind: SwapVolumeConfig
name: swap1
provisioning:
  diskSelector:
    match: system_disk
  minSize: 128MiB
  maxSize: 128MiB
encryption:
  provider: luks2
  keys:
    - slot: 0
      nodeID: {}
---
apiVersion: v1alpha1
kind: RawVolumeConfig
name: raw1
provisioning:
  diskSelector:
    match: system_disk
  minSize: 64MiB
  maxSize: 64MiB
encryption:
  provider: luks2
  keys:
    - slot: 0
      nodeID: {}
---
apiVersion: v1alpha1
kind: ExistingVolumeConfig
name: efi
discovery:
  volumeSelector:
    match: volume.partition_label == "EFI" && volume.name == "vfat"
mount:
  readOnly: true
`

// The volume documents on a metal node, as upstream's. VolumeConfig EPHEMERAL's maxSize bounds
// the EPHEMERAL the installer makes (2 GiB of a 4 GiB disk). SwapVolumeConfig makes partition
// s-swap1 (128 MiB) in the space left: a LUKS2 volume holding swap space the kernel swaps on
// (/proc/swaps). RawVolumeConfig makes r-raw1 (64 MiB): a LUKS2 volume with nothing on it.
// ExistingVolumeConfig mounts the EFI partition as it is at /var/mnt/efi, read-only, GRUB's
// UEFI program there. After a reboot (GRUB from the MBR: the partition table written again with
// the volumes' partitions keeps its boot code) the swap is on again, the same swap space (not
// made again), and the volumes are back.
func TestClusterCreateQEMUVolumes(t *testing.T) {
	_, cli, _ := qemuCluster(t, "qemu-vol")

	const cidr, gateway, node = "10.5.23.0/24", "10.5.23.1", "10.5.23.2"

	patch := filepath.Join(t.TempDir(), "volumes.yaml")
	if err := os.WriteFile(patch, []byte(volumeDocs), 0o600); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	cli.Must(t, oneNodeCluster("qemu-vol", cidr, gateway, "--disk", "4096", "--config-patch", "@"+patch, "--with-uefi=false", "--disk-preallocate=false")...)
	t.Logf("created with the volume documents, installed, etcd bootstrapped in %s", time.Since(start).Round(100*time.Millisecond))

	if out := cli.Must(t, "-n", node, "read", "/proc/cmdline"); !strings.Contains(out, "BOOT_IMAGE=/A/vmlinuz") {
		t.Fatalf("the node did not install and boot its disk: /proc/cmdline %s", out)
	}

	if out := cli.Must(t, "-n", node, "get", "discoveredvolumes", "vda6", "-o", "yaml"); !strings.Contains(out, "size: 2147483648") || !strings.Contains(out, "partition_label: EPHEMERAL") {
		t.Errorf("EPHEMERAL (vda6) is not 2 GiB:\n%s", out)
	}

	var swapUUID string

	check := func(when string) {
		status := func(id string, wants ...string) string {
			var out string

			testenv.WaitFor(t, "volumestatus "+id+" ready "+when, 2*time.Minute, func() error {
				var errOut string
				var code int

				out, errOut, code = cli.Run(t, "-n", node, "get", "volumestatus", id, "-o", "yaml")
				if code != 0 || !strings.Contains(out, "phase: ready") {
					return fmt.Errorf("exit %d: %s%s", code, out, errOut)
				}

				return nil
			})

			for _, want := range wants {
				if !strings.Contains(out, want) {
					t.Errorf("volumestatus %s %s: no %q in\n%s", id, when, want, out)
				}
			}

			return out
		}

		out := status("s-swap1", "location: /dev/vda7", "parentLocation: /dev/vda", "size: 134217728", "filesystem: swap",
			"encryptionProvider: luks2", "mountLocation: /dev/mapper/luks2-s-swap1")
		if m := regexp.MustCompile(`(?m)^\s*uuid: (\S+)`).FindStringSubmatch(out); m == nil {
			t.Errorf("volumestatus s-swap1 %s: no UUID in\n%s", when, out)
		} else if swapUUID == "" {
			swapUUID = m[1]
		} else if swapUUID != m[1] {
			t.Errorf("s-swap1 %s: swap space %s, was %s: made again", when, m[1], swapUUID)
		}

		// /proc/swaps: the opened LUKS2 volume (a device-mapper device), the node's only swap.
		if swaps := cli.Must(t, "-n", node, "read", "/proc/swaps"); !regexp.MustCompile(`(?m)^/dev/(dm-\d+|mapper/luks2-s-swap1)\s+partition\s+\d+\s`).MatchString(swaps) {
			t.Errorf("/proc/swaps %s: s-swap1 is not swapped on:\n%s", when, swaps)
		} else {
			t.Logf("/proc/swaps %s:\n%s", when, swaps)
		}

		out = status("r-raw1", "location: /dev/vda8", "size: 67108864", "encryptionProvider: luks2", "mountLocation: /dev/mapper/luks2-r-raw1")
		if strings.Contains(out, "filesystem: xfs") || strings.Contains(out, "targetPath") {
			t.Errorf("r-raw1 %s: formatted or mounted:\n%s", when, out)
		}

		status("e-efi", "location: /dev/vda1", "filesystem: vfat", "targetPath: /var/mnt/efi")

		if out := cli.Must(t, "-n", node, "mounts"); !regexp.MustCompile(`(?m)\s/dev/vda1\s.*\s/var/mnt/efi\s*$`).MatchString(out) {
			t.Errorf("mounts %s: EFI (/dev/vda1) not at /var/mnt/efi:\n%s", when, out)
		}

		if out := cli.Must(t, "-n", node, "read", "/proc/mounts"); !regexp.MustCompile(`(?m)^/dev/vda1 /var/mnt/efi vfat ro,`).MatchString(out) {
			t.Errorf("/proc/mounts %s: EFI not mounted read-only at /var/mnt/efi:\n%s", when, out)
		}

		if out := cli.Must(t, "-n", node, "ls", "/var/mnt/efi/EFI/BOOT"); !strings.Contains(strings.ToUpper(out), "BOOTX64.EFI") {
			t.Errorf("/var/mnt/efi/EFI/BOOT %s: no BOOTX64.EFI (the volume as the installer left it):\n%s", when, out)
		}
	}

	check("after the install")

	rebootControlPlane(t, cli, node, "the node back from its disk")

	check("after a reboot")
}
