package metal

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/metal"
	"github.com/talos-go/talos/internal/platform"
	"github.com/talos-go/talos/internal/testenv"
)

// OpenStack's disk image (make boot BOOT_PLATFORMS=openstack: qcow2) booted as the machine's
// only disk, with a config drive: GRUB boots slot A with talos.platform=openstack and the
// platform's consoles, the node takes its config, hostname and address from the drive and runs
// from its disk without installing. The drive's network_data.json bonds the card (bond0, with
// the bond's own ethernet_mac_address, as Nova writes a bonded port): the address is on the
// bond, which has that MAC, as upstream sets it.
func TestOpenStackDiskImage(t *testing.T) {
	image := platformImage(t, platform.OpenStack)

	cli := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: t.TempDir(), Timeout: 30 * time.Second}
	config, talosconfig := nocloudConfig(t, cli)
	iso := openstackConfigDriveWith(t, config, openstackBondNetworkData())

	start := time.Now()
	m := bootWith(t, qemuOptions{disk: image, args: []string{"-drive", "file=" + iso + ",media=cdrom,if=ide,readonly=on"}})

	cli.TalosConfig = talosconfig
	ep := fmt.Sprintf("127.0.0.1:%d", m.port)

	took := waitAPID(t, m, cli, ep, start)
	t.Logf("openstack disk image with a config drive: apid answered with the user data's certificates %s after QEMU started (KVM %v)", took.Round(100*time.Millisecond), kvm)

	get := guestGet(t, cli, ep)
	assertPlatformMetadata(t, get, map[string]string{"platform": "openstack", "hostname": "openstack-1", "instanceId": "3f9e8d7c-6b5a-4e3d-9c2b-1a0f9e8d7c6b"})

	for _, c := range []struct{ args, want, what string }{
		{"hostnamestatus -o yaml", `(?m)^\s+hostname: openstack-1$`, "the hostname openstack-1"},
		{"addresses", `(?m)bond0/10\.0\.2\.15/24\s`, "the address on bond0"},
		{"routes", `(?m)10\.0\.97\.0/24\s+10\.0\.2\.2\s+bond0\s+1024`, "the route through bond0"},
		{"links bond0 -o yaml", `(?m)^\s+hardwareAddr: ` + openstackBondMAC + `$`, "the bond's ethernet_mac_address " + openstackBondMAC},
		{"machinetype", `controlplane`, "the user data as the machine config"},
	} {
		if out := get(strings.Fields(c.args)...); !regexp.MustCompile(c.want).MatchString(out) {
			t.Errorf("get %s: not %s:\n%s", c.args, c.what, out)
		}
	}

	// GRUB booted the disk's slot A with the image's arguments, not the metal defaults.
	cmdline := cli.Must(t, "-e", ep, "-n", "10.0.2.15", "read", "/proc/cmdline")
	if want := strings.Join(metal.PlatformKernelArgs(platform.OpenStack), " "); !strings.Contains(cmdline, "BOOT_IMAGE=/A/vmlinuz") || !strings.Contains(cmdline, want) {
		t.Errorf("/proc/cmdline %q: want slot A of the disk booted with %q", cmdline, want)
	}

	console := m.consoleText()
	for _, want := range []string{"booting the installed disk vda: BOOT, STATE and EPHEMERAL mounted", "talos.platform=openstack: the machine config is the platform's user data"} {
		if !strings.Contains(console, want) {
			t.Errorf("the console has no %q", want)
		}
	}

	if strings.Contains(console, "installing to") {
		t.Errorf("the node installed itself over its disk image")
	}
}

// platformImage is the disk image of the platform name in the boot assets (make boot
// BOOT_PLATFORMS=all), ready for QEMU: GCP's tarball is unpacked to its disk.raw.
func platformImage(t *testing.T, name string) string {
	t.Helper()

	image := filepath.Join(filepath.Dir(diskImage), imager.PlatformImageName(name))
	if _, err := os.Stat(image); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no %s: .ci/run builds it with make boot BOOT_PLATFORMS=all", image)
		}

		t.Skipf("no %s: build it with make boot BOOT_PLATFORMS=all", image)
	}

	if !strings.HasSuffix(image, ".tar.gz") {
		return image
	}

	dir := t.TempDir()
	if out, err := exec.Command("tar", "-xzf", image, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("unpacking %s: %v\n%s", image, err, out)
	}

	return filepath.Join(dir, "disk.raw")
}
