package network

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
)

// A sysfs tree as the kernel lays out a virtio card's link: the driver and the card's bus path
// and PCI IDs are read above the virtio device; a virtual link has no device.
func TestReadLinkHardware(t *testing.T) {
	sys := t.TempDir()
	card := filepath.Join(sys, "devices/pci0000:00/0000:00:03.0")
	virtio := filepath.Join(card, "virtio0")
	driver := filepath.Join(sys, "bus/virtio/drivers/virtio_net")

	for _, d := range []string{virtio, driver, filepath.Join(sys, "class/net/eth0"), filepath.Join(sys, "class/net/lo")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	for name, content := range map[string]string{"vendor": "0x1af4\n", "device": "0x1000\n"} {
		if err := os.WriteFile(filepath.Join(card, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	for link, target := range map[string]string{filepath.Join(sys, "class/net/eth0/device"): virtio, filepath.Join(virtio, "driver"): driver} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}

	if got, want := readLinkHardware(filepath.Join(sys, "class/net"), "eth0"), (linkHardware{driver: "virtio_net", busPath: "0000:00:03.0", pciID: "1AF4:1000"}); got != want {
		t.Errorf("eth0: %+v, want %+v", got, want)
	}

	if got := readLinkHardware(filepath.Join(sys, "class/net"), "lo"); got != (linkHardware{}) {
		t.Errorf("lo: %+v, want nothing", got)
	}
}

func TestMatchesSelector(t *testing.T) {
	mac, _ := net.ParseMAC("52:54:00:12:34:57")
	card := &network.LinkStatusSpec{Type: nethelpers.LinkEther, HardwareAddr: nethelpers.HardwareAddr(mac), Driver: "virtio_net", BusPath: "0000:00:04.0", PCIID: "1AF4:1000"}
	bond := &network.LinkStatusSpec{Type: nethelpers.LinkEther, Kind: "bond", HardwareAddr: nethelpers.HardwareAddr(mac)}
	yes, no := true, false

	for _, tc := range []struct {
		name string
		sel  *v1alpha1.NetworkDeviceSelector
		link *network.LinkStatusSpec
		want bool
	}{
		{"address", &v1alpha1.NetworkDeviceSelector{NetworkDeviceHardwareAddress: "52:54:00:12:34:57"}, card, true},
		{"address glob, any case", &v1alpha1.NetworkDeviceSelector{NetworkDeviceHardwareAddress: "52:54:00:12:34:*"}, card, true},
		{"other address", &v1alpha1.NetworkDeviceSelector{NetworkDeviceHardwareAddress: "52:54:00:12:34:56"}, card, false},
		{"driver and bus", &v1alpha1.NetworkDeviceSelector{NetworkDeviceKernelDriver: "virtio*", NetworkDeviceBus: "0000:00:04.*"}, card, true},
		{"driver but not bus", &v1alpha1.NetworkDeviceSelector{NetworkDeviceKernelDriver: "virtio_net", NetworkDeviceBus: "0000:00:03.0"}, card, false},
		{"PCI ID", &v1alpha1.NetworkDeviceSelector{NetworkDevicePCIID: "1af4:1000"}, card, true},
		{"physical card", &v1alpha1.NetworkDeviceSelector{NetworkDeviceHardwareAddress: "52:54:00:12:34:57", NetworkDevicePhysical: &yes}, card, true},
		{"a bond with the card's address is not physical", &v1alpha1.NetworkDeviceSelector{NetworkDeviceHardwareAddress: "52:54:00:12:34:57", NetworkDevicePhysical: &yes}, bond, false},
		{"virtual only", &v1alpha1.NetworkDeviceSelector{NetworkDevicePhysical: &no}, bond, true},
	} {
		if got := matchesSelector(tc.sel, tc.link); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
