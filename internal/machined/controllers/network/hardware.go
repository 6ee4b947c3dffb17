package network

import (
	"os"
	"path"
	"path/filepath"
	"strings"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
)

// SysClassNet is where the kernel lists its network links.
const SysClassNet = "/sys/class/net"

// linkHardware is what sysfs tells of a link's device, as upstream's LinkStatus shows it (it
// asks ethtool): the driver, the bus path and the PCI vendor:device IDs of the card (a virtio
// card's, above its virtio device). A virtual link has no device: none of them.
type linkHardware struct {
	driver, busPath, pciID string
}

func readLinkHardware(sysfs, link string) linkHardware {
	dev := filepath.Join(sysfs, link, "device")

	target, err := filepath.EvalSymlinks(dev)
	if err != nil {
		return linkHardware{}
	}

	var h linkHardware

	if driver, err := filepath.EvalSymlinks(filepath.Join(dev, "driver")); err == nil {
		h.driver = filepath.Base(driver)
	}

	// A virtio card: the device is virtioN, the card (and its bus path) its parent.
	card := target
	if strings.HasPrefix(filepath.Base(card), "virtio") {
		card = filepath.Dir(card)
	}

	h.busPath = filepath.Base(card)

	vendor, errV := os.ReadFile(filepath.Join(card, "vendor"))
	device, errD := os.ReadFile(filepath.Join(card, "device"))

	if errV == nil && errD == nil {
		hex := func(b []byte) string { return strings.ToUpper(strings.TrimPrefix(strings.TrimSpace(string(b)), "0x")) }
		h.pciID = hex(vendor) + ":" + hex(device)
	}

	return h
}

// matchesSelector reports whether a link matches every field the selector gives (globs with *,
// as upstream's).
func matchesSelector(sel talosconfig.NetworkDeviceSelector, s *network.LinkStatusSpec) bool {
	if sel == nil {
		return false
	}

	for _, f := range []struct{ pattern, value string }{
		{sel.HardwareAddress(), s.HardwareAddr.String()},
		{sel.PermanentAddress(), s.PermanentAddr.String()},
		{sel.Bus(), s.BusPath},
		{sel.PCIID(), s.PCIID},
		{sel.KernelDriver(), s.Driver},
	} {
		if f.pattern == "" {
			continue
		}

		if ok, err := path.Match(strings.ToLower(f.pattern), strings.ToLower(f.value)); err != nil || !ok {
			return false
		}
	}

	if p := sel.Physical(); p != nil && *p != s.Physical() {
		return false
	}

	return true
}
