package metal

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/container/netnstest"
	"github.com/talos-go/talos/internal/encryption"
	"github.com/talos-go/talos/internal/metal"
	"github.com/talos-go/talos/internal/partition"
	"github.com/talos-go/talos/internal/provision"
	"github.com/talos-go/talos/internal/schematic"
	"github.com/talos-go/talos/internal/slots"
	"github.com/talos-go/talos/internal/testenv"
	ukipkg "github.com/talos-go/talos/internal/uki"
)

// `talosctl cluster create --provisioner qemu` boots a node from the boot assets on a bridge of
// its own: it gets its address from the cluster's DHCP, its config from the cluster's config
// server, its time from the NTP server the test runs on the bridge's address; etcd is
// bootstrapped. `cluster destroy` leaves no process, link or folder behind.
//
// It names no time server and no resolver, and the test's network namespace has no route out:
// the node keeps time from the NTP the network process serves on the bridge, and resolves
// through its DNS there, as a cluster on a machine without the internet does.
func TestClusterCreateQEMU(t *testing.T) {
	cli, dir := qemuClusterCLI(t, "qemu-e2e")

	const cidr, gateway, node = "10.5.7.0/24", "10.5.7.1", "10.5.7.2"

	start := time.Now()
	cli.Must(t, "cluster", "create", "--provisioner", "qemu", "--name", "qemu-e2e", "--cidr", cidr,
		"--controlplanes", "1", "--workers", "0", "--memory", "2048", "--cpus", "1", "--disk", "3072",
		"--machined-path", filepath.Join(binDir, "machined"), "--vmlinuz-path", kernel, "--initrd-path", initramfs,
		"--wait=false", "--with-uefi=false")
	t.Logf("created, apid serving and etcd bootstrapped in %s", time.Since(start).Round(100*time.Millisecond))

	// The node installed itself to its disk (machine.install.disk /dev/vda) and booted from it
	// with the BIOS (--with-uefi=false): GRUB started slot A's kernel, STATE and EPHEMERAL (under /var's overlay and containerd's
	// folder) are the disk's XFS partitions.
	if out := cli.Must(t, "-n", node, "read", "/proc/cmdline"); !strings.Contains(out, "BOOT_IMAGE=/A/vmlinuz") || strings.Contains(out, "talos.config=") {
		t.Errorf("the node did not boot slot A from its disk: /proc/cmdline %s", out)
	}

	if out := cli.Must(t, "-n", node, "mounts"); !regexp.MustCompile(`(?m)/dev/vda5\s.*\s/system/state\s*$`).MatchString(out) || !regexp.MustCompile(`(?m)/dev/vda6\s.*\s/var/lib/containerd\s*$`).MatchString(out) {
		t.Errorf("mounts: STATE and EPHEMERAL are not the disk's:\n%s", out)
	}

	// The talosconfig's context was merged into the test's home.
	if out := cli.Must(t, "-n", node, "get", "addresses"); !regexp.MustCompile(`(?m)eth0/10\.5\.7\.2/24\s`).MatchString(out) {
		t.Errorf("get addresses: no DHCP address eth0/%s/24:\n%s", node, out)
	}

	// The virtio card's permanent address (ethtool's) is the MAC the provisioner gave it.
	if out := cli.Must(t, "-n", node, "get", "linkstatus", "eth0", "-o", "yaml"); !strings.Contains(out, `permanentAddr: "52:54:00:05:07:02"`) {
		t.Errorf("get linkstatus eth0: no permanent address 52:54:00:05:07:02:\n%s", out)
	}

	// The lease's default route has upstream's DHCP metric, set once (by the initramfs, kept by
	// machined), not also with another metric.
	if out := cli.Must(t, "-n", node, "get", "routestatus"); !strings.Contains(out, "inet4/10.5.7.1//1024") || regexp.MustCompile(`inet4/10\.5\.7\.1//0\s`).MatchString(out) {
		t.Errorf("get routestatus: the default route is not once with metric 1024:\n%s", out)
	}

	// machined keeps the boot's lease: it asked again and publishes it (renewed at 12 h).
	if out := cli.Must(t, "-n", node, "get", "addressspecs"); !strings.Contains(out, "operator/eth0/10.5.7.2/24") {
		t.Errorf("get addressspecs: no lease kept by machined:\n%s", out)
	}

	console, _ := os.ReadFile(filepath.Join(dir, "qemu-e2e-controlplane-1.log"))
	if !strings.Contains(string(console), "[talos] DHCP on eth0: 10.5.7.2/24, gateway 10.5.7.1, lease 24h0m0s") {
		t.Errorf("the console (in the cluster folder) shows no lease from the cluster's DHCP")
	}

	if network, _ := os.ReadFile(filepath.Join(dir, "network.log")); !strings.Contains(string(network), "serving qemu-e2e-controlplane-1's config") {
		t.Errorf("the network process served no config:\n%s", network)
	}

	waitTimeSynced(t, cli, node, "time synced from the network process's NTP on the bridge")

	network, _ := os.ReadFile(filepath.Join(dir, "network.log"))
	for _, line := range []string{"[network] NTP on 10.5.7.1:123", "[network] DNS on 10.5.7.1:53"} {
		if !strings.Contains(string(network), line) {
			t.Errorf("network.log has no %q:\n%s", line, network)
		}
	}

	if out := cli.Must(t, "-n", node, "get", "timeservers", "-o", "yaml"); !strings.Contains(out, "- 10.5.7.1") {
		t.Errorf("get timeservers: the node does not ask the gateway:\n%s", out)
	}

	if out := cli.Must(t, "-n", node, "get", "resolvers", "-o", "yaml"); !strings.Contains(out, "- 10.5.7.1") {
		t.Errorf("get resolvers: the node does not resolve through the gateway:\n%s", out)
	}

	if out := cli.Must(t, "-n", node, "get", "disks"); !regexp.MustCompile(`(?m)\svda\s+\d+\s+3\.2 GB\s`).MatchString(out) {
		t.Errorf("get disks: no 3.2 GB vda (the --disk file):\n%s", out)
	}

	// The bootstrapped etcd answers once it is up (slow under TCG).
	testenv.WaitFor(t, "etcd members", 2*time.Minute, func() error {
		out, errOut, code := cli.Run(t, "-n", node, "etcd", "members")
		if code != 0 || !strings.Contains(out, "qemu-e2e-controlplane-1") {
			return fmt.Errorf("exit %d: %s%s", code, out, errOut)
		}

		return nil
	})

	// machined's cgroups and kubelet's, as upstream's.
	assertCgroupLayout(t, cli, node)

	if out := cli.Must(t, "cluster", "show", "--name", "qemu-e2e"); !regexp.MustCompile(`qemu-e2e-controlplane-1\s+controlplane\s+10\.5\.7\.2\s+\d+\s+running`).MatchString(out) {
		t.Errorf("cluster show: the node is not running:\n%s", out)
	}

	cli.Must(t, "cluster", "destroy", "--name", "qemu-e2e")

	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the cluster folder is still there: %v", err)
	}

	if ifs, _ := net.Interfaces(); len(ifs) != 1 {
		t.Errorf("links left behind: %v", ifs)
	}

	if out, _ := exec.Command("pgrep", "-f", dir).Output(); len(out) > 0 {
		t.Errorf("processes left behind: %s", out)
	}
}

// With --iso-path the nodes boot `make boot`'s ISO (GRUB from a CD-ROM, the firmware trying the
// blank disk first) without a config, into maintenance mode, and create applies each one's
// through the maintenance API (--with-apply-config); they install themselves and boot their
// disks from then on. The firmware is UEFI (OVMF, upstream's default --with-uefi): GRUB for UEFI
// from the ISO, then from the disk's EFI partition, every boot of the upgrade and rollback too. The worker has its extra disks on the drivers
// asked for, and its clock, started two years behind (--bad-rtc), is set by NTP.
func TestClusterCreateQEMUApplyConfig(t *testing.T) {
	_, cli, dir := qemuCluster(t, "qemu-apply")

	const cidr, gateway, worker = "10.5.8.0/24", "10.5.8.1", "10.5.8.3"

	start := time.Now()
	out := cli.Must(t, "cluster", "create", "--provisioner", "qemu", "--name", "qemu-apply", "--cidr", cidr,
		"--controlplanes", "1", "--workers", "1", "--memory", "2048", "--memory-workers", "1536", "--cpus", "1", "--cpus-workers", "1", "--disk", "3072",
		"--machined-path", filepath.Join(binDir, "machined"), "--vmlinuz-path", kernel, "--initrd-path", initramfs,
		"--nameservers", gateway, "--config-patch", fmt.Sprintf(`{"machine": {"time": {"servers": [%q]}}}`, gateway),
		"--iso-path", iso, "--with-apply-config", "--bad-rtc", "--disable-dhcp-hostname", "--disk-preallocate=false",
		"--extra-disks", "2", "--extra-disks-drivers", "nvme,scsi", "--extra-disks-size", "512",
		"--wait=false")
	t.Logf("created with the configs applied in maintenance mode, etcd bootstrapped in %s", time.Since(start).Round(100*time.Millisecond))

	for _, node := range []string{"qemu-apply-controlplane-1", "qemu-apply-worker-1"} {
		if !strings.Contains(out, "maintenance mode on "+node+" to apply its config: OK") {
			t.Errorf("create did not apply %s's config:\n%s", node, out)
		}

		if console, _ := os.ReadFile(filepath.Join(dir, node+".log")); strings.Contains(string(console), "talos.config") ||
			!strings.Contains(string(console), "from the ISO "+iso) || !strings.Contains(string(console), "BOOT_IMAGE=/boot/vmlinuz") {
			t.Errorf("%s did not boot the ISO first, or booted with talos.config=", node)
		}
	}

	waitTimeSynced(t, cli, worker, "the worker's clock synced from two years behind")

	// Two years are about 17500 hours.
	if console, _ := os.ReadFile(filepath.Join(dir, "qemu-apply-worker-1.log")); !regexp.MustCompile(`time synced.*"offset": "17[45]\d\dh`).Match(console) {
		t.Errorf("the worker's console shows no time sync from two years behind")
	}

	disks := cli.Must(t, "-n", worker, "get", "disks")
	for _, re := range []string{`(?m)\snvme0n1\s+\d+\s+537 MB\s`, `(?m)\ssda\s+\d+\s+537 MB\s`, `(?m)\svda\s+\d+\s+3\.2 GB\s`} {
		if !regexp.MustCompile(re).MatchString(disks) {
			t.Errorf("get disks on the worker: no match for %s:\n%s", re, disks)
		}
	}

	if disks = cli.Must(t, "-n", "10.5.8.2", "get", "disks"); strings.Contains(disks, "nvme0n1") {
		t.Errorf("the control plane has the workers' extra disks:\n%s", disks)
	}

	// udevd: the worker's volumes, probed, and their /dev/disk links (the NVMe disk by id).
	vols := cli.Must(t, "-n", worker, "get", "discoveredvolumes")
	for _, re := range []string{`(?m)\svda\s+\d+\s+disk\s+3\.2 GB\s+gpt\s`, `(?m)\svda3\s+\d+\s+partition\s+1\.0 GB\s+xfs\s+BOOT\s+BOOT\s*$`,
		`(?m)\svda5\s+\d+\s+partition\s+105 MB\s+xfs\s+STATE\s+STATE\s*$`, `(?m)\svda4\s+\d+\s+partition\s+1\.0 MB\s+META\s*$`} {
		if !regexp.MustCompile(re).MatchString(vols) {
			t.Errorf("get discoveredvolumes on the worker: no match for %s:\n%s", re, vols)
		}
	}

	links := cli.Must(t, "-n", worker, "ls", "/dev/disk", "--recurse", "--depth", "2")
	for _, want := range []string{"by-partlabel/EPHEMERAL", "by-label/STATE", "by-id/nvme-"} {
		if !strings.Contains(links, want) {
			t.Errorf("ls /dev/disk on the worker: no %s:\n%s", want, links)
		}
	}

	checkWipeDisk(t, cli, worker, filepath.Join(dir, "qemu-apply-worker-1", "disk-1.raw"))

	// UEFI booted the kernel (the kernel sees its firmware), GRUB for UEFI from the EFI
	// partition the install formatted.
	if out := cli.Must(t, "-n", worker, "read", "/sys/firmware/efi/fw_platform_size"); strings.TrimSpace(out) != "64" {
		t.Errorf("the worker did not boot with 64-bit UEFI: fw_platform_size %q", out)
	}

	if !regexp.MustCompile(`(?m)\svda1\s+\d+\s+partition\s+105 MB\s+vfat\s+EFI\s+EFI\s*$`).MatchString(vols) {
		t.Errorf("get discoveredvolumes on the worker: the EFI partition is not FAT labelled EFI:\n%s", vols)
	}

	// A reboot comes back from the disk with the applied config (kept on STATE) and what was
	// written to META (its raw partition).
	cli.Must(t, "-n", worker, "meta", "write", "0x0a", "kept-on-meta")
	bootID := cli.Must(t, "-n", worker, "read", "/proc/sys/kernel/random/boot_id")
	cli.Must(t, "-n", worker, "reboot", "--wait=false")

	testenv.WaitFor(t, "the worker back from its disk", 4*time.Minute, func() error {
		out, errOut, code := cli.Run(t, "-n", worker, "read", "/proc/sys/kernel/random/boot_id")
		if code != 0 || out == bootID {
			return fmt.Errorf("exit %d: %s%s", code, out, errOut)
		}

		return nil
	})

	if out := cli.Must(t, "-n", worker, "get", "machinetype"); !strings.Contains(out, "worker") {
		t.Errorf("the worker lost its config over a reboot:\n%s", out)
	}

	if out := cli.Must(t, "-n", worker, "get", "metakeys", "0x0a"); !strings.Contains(out, "kept-on-meta") {
		t.Errorf("the worker lost its META key over a reboot:\n%s", out)
	}

	if err := partitionsListed(t, cli, worker, []string{"vda1", "vda6"}, []string{"vda2"}); err != nil {
		t.Errorf("the partition dropped before the reboot: %v", err)
	}

	if console, _ := os.ReadFile(filepath.Join(dir, "qemu-apply-worker-1.log")); strings.Count(string(console), "booting the installed disk vda") != 2 {
		t.Errorf("the worker did not boot its disk twice (after the install and after the reboot)")
	}

	upgradeAndRollBack(t, cli, filepath.Join(dir, "qemu-apply-worker-1.log"), worker, "10.5.8.1")

	// The preallocation was turned off: the disk files are sparse.
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "qemu-apply-worker-1", "disk-1.raw"), &st); err != nil || st.Blocks*512 >= 512<<20 {
		t.Errorf("the extra disk file: %v, %d bytes allocated (want sparse)", err, st.Blocks*512)
	}
}

// With --usb-path the node boots the hybrid ISO as a USB stick (on xHCI, after its blank disk),
// gets its config through the maintenance API, installs itself and boots its disk.
func TestClusterCreateQEMUFromUSB(t *testing.T) {
	_, cli, dir := qemuCluster(t, "qemu-usb")

	const cidr, gateway, node = "10.5.9.0/24", "10.5.9.1", "10.5.9.2"

	start := time.Now()
	out := cli.Must(t, oneNodeCluster("qemu-usb", cidr, gateway, "--usb-path", iso, "--disk-preallocate=false")...)
	t.Logf("created from the USB stick, the config applied in maintenance mode, etcd bootstrapped in %s", time.Since(start).Round(100*time.Millisecond))

	if !strings.Contains(out, "maintenance mode on qemu-usb-controlplane-1 to apply its config: OK") {
		t.Errorf("create did not apply the node's config:\n%s", out)
	}

	if console, _ := os.ReadFile(filepath.Join(dir, "qemu-usb-controlplane-1.log")); !strings.Contains(string(console), "from the USB stick "+iso) ||
		!strings.Contains(string(console), "BOOT_IMAGE=/boot/vmlinuz") {
		t.Errorf("the node did not boot the USB stick first")
	}

	if out := cli.Must(t, "-n", node, "read", "/proc/cmdline"); !strings.Contains(out, "BOOT_IMAGE=/A/vmlinuz") {
		t.Errorf("the node did not boot slot A from its disk after the install: /proc/cmdline %s", out)
	}
}

// With --disk-image-path the node's disk starts as a copy of make boot's disk image, grown to
// --disk: it boots the disk's GRUB into maintenance mode (no config on STATE), gets its config
// through the maintenance API and runs from the disk without installing, its EPHEMERAL grown to
// the disk's end.
func TestClusterCreateQEMUFromDiskImage(t *testing.T) {
	_, cli, dir := qemuCluster(t, "qemu-raw")

	const cidr, gateway, node = "10.5.16.0/24", "10.5.16.1", "10.5.16.2"

	start := time.Now()
	out := cli.Must(t, oneNodeCluster("qemu-raw", cidr, gateway, "--disk-image-path", diskImage, "--with-uefi=false", "--disk-preallocate=false")...)
	t.Logf("created from the disk image, the config applied in maintenance mode, etcd bootstrapped in %s", time.Since(start).Round(100*time.Millisecond))

	if !strings.Contains(out, "maintenance mode on qemu-raw-controlplane-1 to apply its config: OK") {
		t.Errorf("create did not apply the node's config:\n%s", out)
	}

	console, _ := os.ReadFile(filepath.Join(dir, "qemu-raw-controlplane-1.log"))
	for _, want := range []string{"from its disk", "EPHEMERAL grown to its whole partition"} {
		if !strings.Contains(string(console), want) {
			t.Errorf("the console does not say %q", want)
		}
	}

	if strings.Contains(string(console), "installing to /dev/vda") {
		t.Error("the node installed itself over the disk image")
	}

	if out := cli.Must(t, "-n", node, "read", "/proc/cmdline"); !strings.Contains(out, "BOOT_IMAGE=/A/vmlinuz") {
		t.Errorf("the node did not boot slot A of its disk: /proc/cmdline %s", out)
	}

	// EPHEMERAL fills the 3 GiB disk, not the image's 1 GiB.
	mounts := cli.Must(t, "-n", node, "mounts")
	if m := regexp.MustCompile(`(?m)/dev/vda6\s+(\d+\.\d+)\s`).FindStringSubmatch(mounts); m == nil || m[1] < "1.5" {
		t.Errorf("mounts: EPHEMERAL (vda6) is not grown to the disk:\n%s", mounts)
	}
}

// With --uki-path the node boots the unified kernel image with UEFI (OVMF starts its stub,
// which measures the UKI into PCR 11 and boots the kernel and initramfs in it with the arguments
// in it), gets its config through the maintenance API and installs itself: the UKI carries a
// PCR signature, so the node installs a UKI of its own kernel and initramfs with it, which GRUB
// chainloads, and its TPM disk keys are sealed to PCR 7 and the PCR 11 values the signature
// approves. The installed UKI measures as the built one, and opens the disks at each boot. An
// upgrade needs an image carrying the PCR signature of its kernel and initramfs; the node boots
// the UKI built from it. The disk has 4096-byte sectors (--disk-block-size).
func TestClusterCreateQEMUFromUKI(t *testing.T) {
	_, cli, dir := qemuCluster(t, "qemu-uki")

	const cidr, gateway, node = "10.5.12.0/24", "10.5.12.1", "10.5.12.2"

	start := time.Now()
	out := cli.Must(t, oneNodeCluster("qemu-uki", cidr, gateway, "--uki-path", uki, "--disk-block-size", "4096", "--disk-preallocate=false", "--with-tpm2",
		"--encrypt-state", "--encrypt-ephemeral", "--disk-encryption-key-types", "tpm")...)
	t.Logf("created from the UKI, the config applied in maintenance mode, installed, etcd bootstrapped in %s", time.Since(start).Round(100*time.Millisecond))

	if !strings.Contains(out, "maintenance mode on qemu-uki-controlplane-1 to apply its config: OK") {
		t.Errorf("create did not apply the node's config:\n%s", out)
	}

	consolePath := filepath.Join(dir, "qemu-uki-controlplane-1.log")
	console, _ := os.ReadFile(consolePath)

	if !strings.Contains(string(console), "from the unified kernel image "+uki) ||
		!strings.Contains(string(console), "Kernel command line: "+strings.Join(metal.DefaultKernelArgs, " ")) {
		t.Errorf("the node did not boot the UKI (its own kernel arguments) first")
	}

	waitBootedSlot(t, cli, node, "A", slots.SlotUKI)

	sections, err := ukipkg.FileSections(uki)
	if err != nil {
		t.Fatal(err)
	}

	// The stub measured the built UKI and then the installed one into PCR 11 as predicted: the
	// node rebuilt its UKI to the same measured bytes.
	measured := "TPM PCR 11 at boot: " + hex.EncodeToString(ukipkg.PredictPCR11(sections)) + " "
	console, _ = os.ReadFile(consolePath)

	if n := strings.Count(string(console), measured); n < 2 {
		t.Errorf("the console shows %q %d times, want 2 (the built UKI, the installed one):\n%s", measured, n, grepLines(console, "PCR 11"))
	}

	for _, want := range []string{"sealed to PCR 7 and the PCR 11 values the UKI's PCR signing key signs", "STATE: LUKS2 volume opened with key slot 0 (tpm)", "EPHEMERAL: LUKS2 volume opened with key slot 0 (tpm)"} {
		if !strings.Contains(string(console), want) {
			t.Errorf("the console shows no %q", want)
		}
	}

	if out := cli.Must(t, "-n", node, "read", "/sys/block/vda/queue/logical_block_size"); strings.TrimSpace(out) != "4096" {
		t.Errorf("the disk's sectors: %q, want 4096", out)
	}

	if out := cli.Must(t, "-n", node, "mounts"); !regexp.MustCompile(`(?m)/dev/mapper/luks2-STATE\s.*\s/system/state\s*$`).MatchString(out) {
		t.Errorf("mounts: STATE is not the encrypted volume:\n%s", out)
	}

	// An image without the PCR signature is refused before anything changes.
	unsigned := serveMetalImage(t, gateway)
	if _, errOut, code := cli.Run(t, "-n", node, "upgrade", "--image", unsigned, "--wait=false"); code == 0 || !strings.Contains(errOut, "carries no PCR signature") {
		t.Errorf("upgrade to an image without the PCR signature: exit %d: %s", code, errOut)
	}

	pcrKey, err := filepath.Abs("../../../_out/pcr-signing-key.pem")
	if err != nil {
		t.Fatal(err)
	}

	// --force: under emulation the API server may not answer the drain yet.
	start = time.Now()
	cli.Must(t, "-n", node, "upgrade", "--image", serveMetalImage(t, gateway, "--pcr-key", pcrKey), "--preserve", "--force", "--wait=false")
	waitBootedSlot(t, cli, node, "B", slots.SlotUKI)
	t.Logf("upgrade: the node runs slot B's UKI %s after the request", time.Since(start).Round(100*time.Millisecond))

	console, _ = os.ReadFile(consolePath)
	if n := strings.Count(string(console), "STATE: LUKS2 volume opened with key slot 0 (tpm)"); n < 2 {
		t.Errorf("STATE opened %d times with its TPM key, want 2 (slot A, slot B)", n)
	}
}

// grepLines are the lines of b holding s.
func grepLines(b []byte, s string) string {
	var out []string

	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}

	return strings.Join(out, "\n")
}

// --wireguard-cidr links the nodes with WireGuard: each has wg0 with its address in the network
// and the other as a peer (the control plane listening); the worker's keepalives reach the
// control plane through the tunnel, and the answers come back.
func TestClusterCreateQEMUWireguard(t *testing.T) {
	_, cli, _ := qemuCluster(t, "qemu-wg")

	const cidr, gateway, cp, worker = "10.5.14.0/24", "10.5.14.1", "10.5.14.2", "10.5.14.3"

	cli.Must(t, oneNodeCluster("qemu-wg", cidr, gateway, "--workers", "1", "--wireguard-cidr", "172.20.1.0/24", "--with-uefi=false", "--with-bootloader=false", "--disk-preallocate=false")...)

	for node, addr := range map[string]string{cp: "wg0/172.20.1.2/24", worker: "wg0/172.20.1.3/24"} {
		testenv.WaitFor(t, node+"'s WireGuard link", 3*time.Minute, func() error {
			out, errOut, code := cli.Run(t, "-n", node, "get", "addresses")
			if code != 0 || !strings.Contains(out, addr) {
				return fmt.Errorf("exit %d: %s%s", code, out, errOut)
			}

			return nil
		})

		// Packets received on wg0: the other node's, decrypted (keepalives every 5 s).
		testenv.WaitFor(t, node+" receiving through the tunnel", time.Minute, func() error {
			out, errOut, code := cli.Run(t, "-n", node, "read", "/proc/net/dev")
			if code != 0 {
				return fmt.Errorf("exit %d: %s", code, errOut)
			}

			m := regexp.MustCompile(`(?m)^\s*wg0:\s*(\d+)\s+(\d+)`).FindStringSubmatch(out)
			if m == nil || m[2] == "0" {
				return fmt.Errorf("wg0 has received nothing:\n%s", out)
			}

			return nil
		})
	}
}

// With --ipxe-boot-script the node boots from its network card (iPXE, after its blank disk,
// with the BIOS): the cluster's DHCP gives iPXE the script's URL, served by the test on the
// bridge with the kernel and initramfs it boots; the config goes through the maintenance API,
// the node installs itself and boots its disk.
func TestClusterCreateQEMUFromIPXE(t *testing.T) {
	_, cli, dir := qemuCluster(t, "qemu-pxe")

	const cidr, gateway, node = "10.5.13.0/24", "10.5.13.1", "10.5.13.2"

	// Listening on every address: the bridge's comes with the cluster.
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}

	base := fmt.Sprintf("http://%s:%d", gateway, l.Addr().(*net.TCPAddr).Port)
	script := fmt.Sprintf("#!ipxe\nkernel %s/vmlinuz %s\ninitrd %s/initramfs.img\nboot\n", base, strings.Join(metal.DefaultKernelArgs, " "), base)

	var mu sync.Mutex

	asked := map[string]bool{}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked[r.URL.Path] = true
		mu.Unlock()

		switch r.URL.Path {
		case "/boot.ipxe":
			w.Write([]byte(script))
		case "/vmlinuz":
			http.ServeFile(w, r, kernel)
		case "/initramfs.img":
			http.ServeFile(w, r, initramfs)
		default:
			http.NotFound(w, r)
		}
	})}

	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	start := time.Now()
	out := cli.Must(t, oneNodeCluster("qemu-pxe", cidr, gateway, "--ipxe-boot-script", base+"/boot.ipxe", "--with-uefi=false", "--disk-preallocate=false")...)
	t.Logf("created from the network (iPXE), the config applied in maintenance mode, etcd bootstrapped in %s", time.Since(start).Round(100*time.Millisecond))

	if !strings.Contains(out, "maintenance mode on qemu-pxe-controlplane-1 to apply its config: OK") {
		t.Errorf("create did not apply the node's config:\n%s", out)
	}

	mu.Lock()
	if !asked["/boot.ipxe"] || !asked["/vmlinuz"] || !asked["/initramfs.img"] {
		t.Errorf("iPXE did not fetch the script, the kernel and the initramfs: %v", asked)
	}
	mu.Unlock()

	if console, _ := os.ReadFile(filepath.Join(dir, "qemu-pxe-controlplane-1.log")); !strings.Contains(string(console), "from the network (iPXE)") {
		t.Errorf("the launcher did not boot the node from the network")
	}

	if out := cli.Must(t, "-n", node, "read", "/proc/cmdline"); !strings.Contains(out, "BOOT_IMAGE=/A/vmlinuz") {
		t.Errorf("the node did not boot slot A from its disk after the install: /proc/cmdline %s", out)
	}
}

// With --config-injection-method metal-iso each node's config is on an ISO of its own (a
// read-only disk after its install disk) that the initramfs reads (talos.config=metal-iso),
// not served over HTTP. The firmware is UEFI, booting the kernel directly the first time. The
// node sends its logs to the network process (--with-json-logs).
func TestClusterCreateQEMUConfigISO(t *testing.T) {
	_, cli, dir := qemuCluster(t, "qemu-iso")

	const cidr, gateway, node = "10.5.10.0/24", "10.5.10.1", "10.5.10.2"

	start := time.Now()
	cli.Must(t, oneNodeCluster("qemu-iso", cidr, gateway, "--config-injection-method", "metal-iso", "--disk-preallocate=false", "--with-json-logs")...)
	t.Logf("created with the config on a metal-iso volume, etcd bootstrapped in %s", time.Since(start).Round(100*time.Millisecond))

	// --with-json-logs: the node sends its logs (machine.logging) to the network process, which
	// writes them to the cluster's folder.
	testenv.WaitFor(t, "the node's JSON logs in the cluster folder", 2*time.Minute, func() error {
		b, _ := os.ReadFile(filepath.Join(dir, "json-logs.log"))
		if !strings.Contains(string(b), `"talos-service":"apid"`) || !strings.Contains(string(b), `"talos-service":"machined"`) {
			return errors.New("no lines from apid and machined yet")
		}

		return nil
	})

	if console, _ := os.ReadFile(filepath.Join(dir, "qemu-iso-controlplane-1.log")); !strings.Contains(string(console), "talos.config: read the machine config from the metal-iso volume /dev/vdb") {
		t.Errorf("the console shows no config read from the metal-iso volume")
	}

	if network, _ := os.ReadFile(filepath.Join(dir, "network.log")); strings.Contains(string(network), "serving qemu-iso-controlplane-1's config") {
		t.Errorf("the network process served the config:\n%s", network)
	}

	if out := cli.Must(t, "-n", node, "read", "/proc/cmdline"); !strings.Contains(out, "BOOT_IMAGE=/A/vmlinuz") || strings.Contains(out, "talos.config=") {
		t.Errorf("the node did not boot slot A from its disk after the install: /proc/cmdline %s", out)
	}
}

// upgradeAndRollBack upgrades an installed node to a second image of the boot assets, served
// over HTTP on the cluster's bridge (gateway): the node downloads and verifies it, writes slot
// B, GRUB boots B once, B reports a successful boot and becomes the active slot; then
// `talosctl rollback` makes A active again and GRUB boots it. The image carries a schematic
// (imager build --schematic): slot B boots with its extra kernel argument, its META value is
// written, and the node lists it as upstream lists a factory image's schematic; slot A has none.
func upgradeAndRollBack(t *testing.T, cli testenv.CLI, console, node, gateway string) {
	t.Helper()

	const schematicYAML = "customization:\n  extraKernelArgs: [e2e.schematic=1]\n  meta:\n    - key: 0xa0\n      value: from-the-schematic\n"

	sch, err := schematic.Unmarshal([]byte(schematicYAML))
	if err != nil {
		t.Fatal(err)
	}

	schematicID, _ := sch.ID()
	schematicFile := filepath.Join(t.TempDir(), "schematic.yaml")

	if err = os.WriteFile(schematicFile, []byte(schematicYAML), 0o644); err != nil {
		t.Fatal(err)
	}

	url := serveMetalImage(t, gateway, "--schematic", schematicFile)

	if out := cli.Must(t, "-n", node, "get", "extensions", "-o", "yaml"); strings.Contains(out, "schematic") {
		t.Errorf("the node lists a schematic before its upgrade to an image with one:\n%s", out)
	}

	// An image that is not there is refused before anything changes.
	if _, errOut, code := cli.Run(t, "-n", node, "upgrade", "--image", url+".missing", "--wait=false"); code == 0 || !strings.Contains(errOut, "404") {
		t.Errorf("upgrade from a missing image: exit %d: %s", code, errOut)
	}

	bootedSlot := func(slot string) { waitBootedSlot(t, cli, node, slot, "vmlinuz") }

	start := time.Now()
	cli.Must(t, "-n", node, "upgrade", "--image", url, "--wait=false")
	t.Logf("upgrade: image downloaded, verified and acknowledged in %s", time.Since(start).Round(100*time.Millisecond))

	bootedSlot("B")
	t.Logf("upgrade: the node runs slot B %s after the request", time.Since(start).Round(100*time.Millisecond))

	testenv.WaitFor(t, "slot B reported a successful boot", 3*time.Minute, func() error {
		if b, _ := os.ReadFile(console); !strings.Contains(string(b), "upgrade complete: slot is now permanent") {
			return errors.New("not yet")
		}

		return nil
	})

	if out := cli.Must(t, "-n", node, "read", "/proc/cmdline"); !strings.Contains(out, " e2e.schematic=1") {
		t.Errorf("slot B booted without its schematic's kernel argument: /proc/cmdline %s", out)
	}

	if out := cli.Must(t, "-n", node, "get", "metakeys", "0xa0"); !strings.Contains(out, "from-the-schematic") {
		t.Errorf("the schematic's META value was not written:\n%s", out)
	}

	if out := cli.Must(t, "-n", node, "get", "extensions", "-o", "yaml"); !strings.Contains(out, "name: schematic") || !strings.Contains(out, "version: "+schematicID) {
		t.Errorf("the node does not list schematic %s:\n%s", schematicID, out)
	}

	start = time.Now()
	cli.Must(t, "-n", node, "rollback")
	bootedSlot("A")
	t.Logf("rollback: the node runs slot A again %s after the request", time.Since(start).Round(100*time.Millisecond))

	if out := cli.Must(t, "-n", node, "read", "/proc/cmdline"); strings.Contains(out, "e2e.schematic") {
		t.Errorf("slot A booted with slot B's schematic argument: /proc/cmdline %s", out)
	}

	if out := cli.Must(t, "-n", node, "get", "extensions", "-o", "yaml"); strings.Contains(out, "schematic") {
		t.Errorf("slot A, built without a schematic, lists one:\n%s", out)
	}

	b, _ := os.ReadFile(console)
	for _, want := range []string{"boot slot B: trying slot B once", "rollback: slot is active again", "boot slot A: active slot"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the console shows no %q", want)
		}
	}

	if out := cli.Must(t, "-n", node, "get", "machinetype"); !strings.Contains(out, "worker") {
		t.Errorf("the node lost its config over the upgrade and rollback:\n%s", out)
	}

	// A reset wipes STATE and EPHEMERAL (recorded in META, emptied by the next boot before they
	// are mounted anywhere): the node comes back from its disk, without a config, in
	// maintenance mode.
	cli.Must(t, "-n", node, "reset", "--graceful=false", "--reboot", "--wait=false")
	testenv.WaitFor(t, "the reset node in maintenance mode", 5*time.Minute, func() error {
		// Only the maintenance API answers a client without a certificate.
		if out, errOut, code := cli.Run(t, "-e", node, "-n", node, "version", "--insecure"); code != 0 {
			return fmt.Errorf("exit %d: %s%s", code, out, errOut)
		}

		return nil
	})

	if b, _ := os.ReadFile(console); !strings.Contains(string(b), "reset: wiped STATE, EPHEMERAL") || strings.Count(string(b), "booting the installed disk vda") < 5 {
		t.Errorf("the console shows no reset wipe from the installed disk")
	}
}

// serveMetalImage builds a metal upgrade image (v1.99.0) of the boot assets under test with
// imager build's flags added, and serves it over HTTP on the cluster's bridge (gateway): it
// returns its URL.
func serveMetalImage(t *testing.T, gateway string, flags ...string) string {
	t.Helper()

	key, err := filepath.Abs("../../../_out/image-signing.key")
	if err != nil {
		t.Fatal(err)
	}

	if _, err = os.Stat(key); err != nil {
		t.Fatalf("no image signing key beside the boot assets (the key their nodes trust): rebuild them with `make boot`: %v", err)
	}

	img := filepath.Join(t.TempDir(), "talos-metal-v1.99.0.img")
	args := append([]string{"build", "--key", key, "--version", "v1.99.0", "--gzip=false", "--vmlinuz", kernel, "--initramfs", initramfs, "--out", img}, flags...)

	if out, err := exec.Command(filepath.Join(binDir, "imager"), args...).CombinedOutput(); err != nil {
		t.Fatalf("building the metal image: %v\n%s", err, out)
	}

	l, err := net.Listen("tcp", gateway+":0")
	if err != nil {
		t.Fatal(err)
	}

	srv := &http.Server{Handler: http.FileServer(http.Dir(filepath.Dir(img))), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	return "http://" + l.Addr().String() + "/" + filepath.Base(img)
}

// waitBootedSlot waits for the node to run from slot's file (vmlinuz, or uki.efi) on its disk.
func waitBootedSlot(t *testing.T, cli testenv.CLI, node, slot, file string) {
	t.Helper()

	testenv.WaitFor(t, "the node booted from slot "+slot, 5*time.Minute, func() error {
		out, errOut, code := cli.Run(t, "-n", node, "read", "/proc/cmdline")
		if code != 0 || !strings.Contains(out, "BOOT_IMAGE=/"+slot+"/"+file) {
			return fmt.Errorf("exit %d: %s%s", code, out, errOut)
		}

		return nil
	})
}

// waitTimeSynced waits for the node's time status to say synced.
func waitTimeSynced(t *testing.T, cli testenv.CLI, node, what string) {
	t.Helper()

	testenv.WaitFor(t, what, 3*time.Minute, func() error {
		out, errOut, code := cli.Run(t, "-n", node, "get", "timestatus", "-o", "yaml")
		if code != 0 || !strings.Contains(out, "synced: true") {
			return fmt.Errorf("exit %d: %s%s", code, out, errOut)
		}

		return nil
	})
}

// oneNodeCluster is `cluster create` of one control plane on the boot assets under test, its
// time from the test's NTP server on the bridge (gateway), with the flags a test adds. One vCPU:
// a TCG guest with two once locked up in the kernel's slab allocator (an RCU stall for minutes)
// while the container suite loaded the 2-core host; one vCPU is one QEMU thread, with no
// cross-vCPU atomics to emulate.
func oneNodeCluster(name, cidr, gateway string, flags ...string) []string {
	return append([]string{"cluster", "create", "--provisioner", "qemu", "--name", name, "--cidr", cidr,
		"--controlplanes", "1", "--workers", "0", "--memory", "2048", "--cpus", "1", "--disk", "3072",
		"--machined-path", filepath.Join(binDir, "machined"), "--vmlinuz-path", kernel, "--initrd-path", initramfs,
		"--nameservers", gateway, "--config-patch", fmt.Sprintf(`{"machine": {"time": {"servers": [%q]}}}`, gateway),
		"--wait=false"}, flags...)
}

// qemuCluster prepares a qemu cluster named name: an NTP server on every address of the test's
// network namespace (the cluster's bridge included), a talosctl with a home of its own, and,
// when the test ends, the nodes' and the network process's logs if it failed, and a destroy.
// It returns the NTP server, the talosctl and the cluster's folder.
func qemuCluster(t *testing.T, name string) (*testenv.NTPServer, testenv.CLI, string) {
	t.Helper()

	if !netnstest.Own() {
		t.Skip("the qemu provisioner makes a bridge: it needs a network namespace of its own (run as root)")
	}

	ntp := testenv.StartNTPServer(t, "[::]:123", 0) // both families: IPv6-only clusters ask it too
	cli, dir := qemuClusterCLI(t, name)

	return ntp, cli, dir
}

// qemuClusterCLI is qemuCluster without the test's NTP server: the cluster's network process
// serves time on the bridge.
func qemuClusterCLI(t *testing.T, name string) (testenv.CLI, string) {
	t.Helper()

	if !netnstest.Own() {
		t.Skip("the qemu provisioner makes a bridge: it needs a network namespace of its own (run as root)")
	}

	home := t.TempDir()
	root := filepath.Join(home, "clusters")
	cli := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: home, ClusterRoot: root, Timeout: 10 * time.Minute}
	dir := filepath.Join(root, name)

	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
			for _, log := range logs {
				b, _ := os.ReadFile(log)
				t.Logf("%s:\n%s", filepath.Base(log), b[max(0, len(b)-6000):])

				// The errors of the whole log: the tail may be long past them.
				var errs []string
				for _, line := range strings.Split(string(b), "\n") {
					if strings.Contains(line, "ERROR") {
						errs = append(errs, line)
					}
				}

				t.Logf("%s, its errors:\n%s", filepath.Base(log), strings.Join(errs[max(0, len(errs)-20):], "\n"))
			}
		}

		cli.Run(t, "cluster", "destroy", "--name", name, "--force")
	})

	return cli, dir
}

// --with-uuid-hostnames names the node machine-<its SMBIOS UUID> (the node reads the UUID QEMU
// gives it), --with-tpm2 gives it a TPM 2.0 (swtpm, its state in the node's folder) and
// --with-iommu an Intel IOMMU (the q35 machine); the node installs and boots its disk with them,
// STATE and EPHEMERAL encrypted with a key sealed to that TPM (--disk-encryption-key-types tpm),
// which the boot stage unseals to open them.
// --use-vip makes the Kubernetes endpoint the network's 50th address, which the control plane
// holds once etcd elects it. --with-firewall block: apid answers from anywhere, trustd only to
// the cluster network, not to its gateway (the host).
func TestClusterCreateQEMUMachineDevices(t *testing.T) {
	_, cli, dir := qemuCluster(t, "qemu-dev")

	const cidr, gateway, node = "10.5.11.0/24", "10.5.11.1", "10.5.11.2"

	cli.Must(t, oneNodeCluster("qemu-dev", cidr, gateway, "--with-uuid-hostnames", "--with-tpm2", "--with-iommu", "--use-vip", "--with-firewall", "block", "--with-uefi=false", "--disk-preallocate=false",
		"--encrypt-state", "--encrypt-ephemeral", "--disk-encryption-key-types", "tpm")...)

	m := regexp.MustCompile(`(?m)^machine-([0-9a-f-]{36})\s+controlplane\s+10\.5\.11\.2\s`).FindStringSubmatch(cli.Must(t, "cluster", "show", "--name", "qemu-dev"))
	if m == nil {
		t.Fatalf("cluster show: the node is not named machine-<UUID>:\n%s", cli.Must(t, "cluster", "show", "--name", "qemu-dev"))
	}

	id := m[1]

	if out := cli.Must(t, "-n", node, "get", "systeminformation", "-o", "yaml"); !strings.Contains(out, "uuid: "+id) {
		t.Errorf("the node's SMBIOS UUID is not its name's %s:\n%s", id, out)
	}

	if out := cli.Must(t, "-n", node, "get", "hostname"); !strings.Contains(out, "machine-"+id) {
		t.Errorf("hostname:\n%s", out)
	}

	if out := cli.Must(t, "-n", node, "read", "/sys/class/tpm/tpm0/tpm_version_major"); strings.TrimSpace(out) != "2" {
		t.Errorf("the node's TPM version: %q, want 2", out)
	}

	if _, err := os.Stat(filepath.Join(dir, "machine-"+id, "tpm", "tpm2-00.permall")); err != nil {
		t.Errorf("the TPM's state is not in the node's folder: %v", err)
	}

	console, _ := os.ReadFile(filepath.Join(dir, "machine-"+id+".log"))
	for _, label := range []string{"STATE", "EPHEMERAL"} {
		if !strings.Contains(string(console), label+": LUKS2 volume opened with key slot 0 (tpm)") {
			t.Errorf("%s not opened with the key sealed to the TPM:\n%s", label, console)
		}
	}

	if out := cli.Must(t, "-n", node, "ls", "/sys/class/iommu"); !strings.Contains(out, "dmar") {
		t.Errorf("the node has no Intel IOMMU (/sys/class/iommu):\n%s", out)
	}

	if out := cli.Must(t, "-n", node, "read", "/proc/cmdline"); !strings.Contains(out, "BOOT_IMAGE=/A/vmlinuz") {
		t.Errorf("the node did not boot its disk on the q35 machine: /proc/cmdline %s", out)
	}

	if out := cli.Must(t, "-n", node, "get", "machineconfig", "-o", "yaml"); !strings.Contains(out, "endpoint: https://10.5.11.50:6443") {
		t.Errorf("the cluster endpoint is not the VIP:\n%s", out)
	}

	if out := cli.Must(t, "-n", node, "get", "nftableschains"); !regexp.MustCompile(`ingress\s+\d+\s+filter\s+input\s+filter\s+drop`).MatchString(out) {
		t.Errorf("no ingress chain dropping by default:\n%s", out)
	}

	if conn, err := net.DialTimeout("tcp", node+":50001", 3*time.Second); err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Errorf("trustd from the host through the firewall: %v, want its packets dropped (a timeout)", err)

		if conn != nil {
			conn.Close()
		}
	}

	// Once etcd runs (slow under TCG), the control plane is elected and holds the VIP: the
	// host reaches apid there.
	testenv.WaitFor(t, "the VIP on the control plane", 4*time.Minute, func() error {
		if out, errOut, code := cli.Run(t, "-n", node, "get", "addresses"); code != 0 || !strings.Contains(out, "eth0/10.5.11.50/32") {
			return fmt.Errorf("exit %d: %s%s", code, out, errOut)
		}

		conn, err := net.DialTimeout("tcp", "10.5.11.50:50000", 5*time.Second)
		if err != nil {
			return err
		}

		return conn.Close()
	})
}

// --encrypt-state and --encrypt-ephemeral with --disk-encryption-key-types kms,uuid: the node
// installs STATE and EPHEMERAL as LUKS2 volumes (on the disk the header is there, no XFS),
// each with a KMS-sealed key (the network process's KMS on the gateway) in slot 0 and a key of
// its UUID in slot 1; the boot stage opens them with the KMS key, and again after a reboot,
// with the config still on the encrypted STATE. --user-volumes gives the node a disk with two
// volumes (UserVolumeConfig), --encrypt-user-volumes encrypts them: each is a partition u-<name>
// of its size, opened and mounted at /var/mnt/<name>, formatted once only.
func TestClusterCreateQEMUEncrypted(t *testing.T) {
	_, cli, dir := qemuCluster(t, "qemu-enc")

	const cidr, gateway, node = "10.5.15.0/24", "10.5.15.1", "10.5.15.2"

	start := time.Now()
	cli.Must(t, oneNodeCluster("qemu-enc", cidr, gateway, "--encrypt-state", "--encrypt-ephemeral", "--disk-encryption-key-types", "kms,uuid",
		"--user-volumes", "data:200MiB:logs:100MiB", "--encrypt-user-volumes", "--with-uefi=false", "--disk-preallocate=false")...)
	t.Logf("created with encrypted STATE, EPHEMERAL and user volumes, installed, etcd bootstrapped in %s", time.Since(start).Round(100*time.Millisecond))

	if out := cli.Must(t, "-n", node, "read", "/proc/cmdline"); !strings.Contains(out, "BOOT_IMAGE=/A/vmlinuz") {
		t.Fatalf("the node did not install and boot its disk: /proc/cmdline %s", out)
	}

	uuids := map[string]string{} // each volume's filesystem UUID: formatted once only

	checkMounts := func(when string) {
		for _, want := range []string{`/dev/mapper/luks2-STATE\s.*\s/system/state`, `/dev/mapper/luks2-EPHEMERAL\s.*\s/var/lib/containerd`,
			`/dev/mapper/luks2-u-data\s.*\s/var/mnt/data`, `/dev/mapper/luks2-u-logs\s.*\s/var/mnt/logs`} {
			testenv.WaitFor(t, want+" "+when, 2*time.Minute, func() error {
				out, errOut, code := cli.Run(t, "-n", node, "mounts")
				if code != 0 || !regexp.MustCompile(`(?m)`+want+`\s*$`).MatchString(out) {
					return fmt.Errorf("exit %d: no %s in\n%s%s", code, want, out, errOut)
				}

				return nil
			})
		}

		for v, size := range map[string]string{"data": "209715200", "logs": "104857600"} {
			out := cli.Must(t, "-n", node, "get", "volumestatus", "u-"+v, "-o", "yaml")
			for _, want := range []string{"phase: ready", "location: /dev/vdb", "size: " + size, "targetPath: /var/mnt/" + v, "encryptionProvider: luks2"} {
				if !strings.Contains(out, want) {
					t.Errorf("volumestatus u-%s %s: no %q in\n%s", v, when, want, out)
				}
			}

			m := regexp.MustCompile(`(?m)^\s*uuid: (\S+)`).FindStringSubmatch(out)
			switch {
			case m == nil:
				t.Errorf("volumestatus u-%s %s: no filesystem UUID in\n%s", v, when, out)
			case uuids[v] == "":
				uuids[v] = m[1]
			case uuids[v] != m[1]:
				t.Errorf("u-%s %s: filesystem %s, was %s: formatted again", v, when, m[1], uuids[v])
			}
		}
	}

	checkMounts("after the install")

	f, err := os.Open(filepath.Join(dir, "qemu-enc-controlplane-1", "disk.raw"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	parts, err := partition.Read(f)
	if err != nil {
		t.Fatal(err)
	}

	for _, p := range parts {
		head := make([]byte, 6)
		if _, err = f.ReadAt(head, p.Offset()); err != nil {
			t.Fatal(err)
		}

		if luks := bytes.Equal(head, encryption.Magic); luks != (p.Name == partition.State || p.Name == partition.Ephemeral) {
			t.Errorf("partition %s on the disk: LUKS header %v", p.Name, luks)
		}
	}

	if _, err = os.Stat(filepath.Join(dir, provision.KMSKeyFile)); err != nil {
		t.Errorf("the cluster's KMS key: %v", err)
	}

	rebootControlPlane(t, cli, node, "the node back from its encrypted disk")

	checkMounts("after a reboot")

	console, _ := os.ReadFile(filepath.Join(dir, "qemu-enc-controlplane-1.log"))
	for _, label := range []string{"STATE", "EPHEMERAL"} {
		if n := strings.Count(string(console), label+": LUKS2 volume opened with key slot 0 (kms)"); n != 2 {
			t.Errorf("%s opened with the KMS key on %d boots from the disk, want 2", label, n)
		}
	}

}

// checkWipeDisk: `wipe disk` refuses the system disk and its mounted STATE and a device that is
// not there, changing nothing, and wipes the idle NVMe disk (nvme0n1, whose file is nvme): a
// fast wipe zeroes its first MiB (written here, on the host's file) and keeps its middle.
func checkWipeDisk(t *testing.T, cli testenv.CLI, node, nvme string) {
	t.Helper()

	f, err := os.OpenFile(nvme, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	head, middle := []byte("a signature at the start"), []byte("data in the middle")
	if _, err = f.WriteAt(head, 0); err == nil {
		_, err = f.WriteAt(middle, 100<<20)
	}

	if err != nil {
		t.Fatal(err)
	}

	for dev, want := range map[string]string{"vda": "in use", "vda5": "in use", "nosuchdisk": "no such block device"} {
		if _, errOut, code := cli.Run(t, "-n", node, "wipe", "disk", "nvme0n1", dev); code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("wipe disk nvme0n1 %s: exit %d, want %q:\n%s", dev, code, want, errOut)
		}
	}

	if b := readAt(t, f, 0, len(head)); !bytes.Equal(b, head) {
		t.Fatalf("a refused wipe wrote nvme0n1: its start is %q", b)
	}

	cli.Must(t, "-n", node, "wipe", "disk", "nvme0n1")

	if b := readAt(t, f, 0, 1<<20); !bytes.Equal(b, make([]byte, 1<<20)) {
		t.Errorf("wipe disk nvme0n1 left data in its first MiB: %q...", b[:len(head)])
	}

	if b := readAt(t, f, 100<<20, len(middle)); !bytes.Equal(b, middle) {
		t.Errorf("a fast wipe took the middle of nvme0n1: %q", b)
	}

	// The BIOS boot partition (vda2) of this UEFI node, wiped and dropped from the table: the
	// kernel forgets it at once, the disk for good (checked after the reboot).
	cli.Must(t, "-n", node, "wipe", "disk", "vda2", "--drop-partition")

	testenv.WaitFor(t, "vda2 gone from the discovered volumes", time.Minute, func() error {
		return partitionsListed(t, cli, node, []string{"vda5", "vda6"}, []string{"vda2"})
	})
}

// partitionsListed checks a node's discovered volumes: want listed, gone not.
func partitionsListed(t *testing.T, cli testenv.CLI, node string, want, gone []string) error {
	t.Helper()

	out, errOut, code := cli.Run(t, "-n", node, "get", "discoveredvolumes")
	if code != 0 {
		return fmt.Errorf("exit %d: %s", code, errOut)
	}

	for _, p := range want {
		if !regexp.MustCompile(`\s` + p + `\s`).MatchString(out) {
			return fmt.Errorf("no %s:\n%s", p, out)
		}
	}

	for _, p := range gone {
		if regexp.MustCompile(`\s` + p + `\s`).MatchString(out) {
			return fmt.Errorf("%s still listed:\n%s", p, out)
		}
	}

	return nil
}

func readAt(t *testing.T, f *os.File, off int64, n int) []byte {
	t.Helper()

	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}

	return b
}

// rebootControlPlane reboots a one-node cluster's control plane and waits, as what, until it is
// back: a new boot ID, and its machine type answered.
func rebootControlPlane(t *testing.T, cli testenv.CLI, node, what string) {
	t.Helper()

	bootID := cli.Must(t, "-n", node, "read", "/proc/sys/kernel/random/boot_id")
	cli.Must(t, "-n", node, "reboot", "--wait=false")

	testenv.WaitFor(t, what, 5*time.Minute, func() error {
		out, errOut, code := cli.Run(t, "-n", node, "get", "machinetype")
		if code != 0 || !strings.Contains(out, "controlplane") {
			return fmt.Errorf("exit %d: %s%s", code, out, errOut)
		}

		if id, _, _ := cli.Run(t, "-n", node, "read", "/proc/sys/kernel/random/boot_id"); id == bootID {
			return errors.New("not rebooted yet")
		}

		return nil
	})
}
