package metal

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/container"
	"github.com/talos-go/talos/internal/encryption"
	"github.com/talos-go/talos/internal/meta"
	"github.com/talos-go/talos/internal/partition"
	"github.com/talos-go/talos/internal/platform"
	"github.com/talos-go/talos/internal/slots"
	"github.com/talos-go/talos/internal/udev"
)

// Paths inside the initramfs, as `imager boot` lays it out.
const (
	InitramfsImage   = "/rootfs.sqsh"            // the node image
	InitramfsModules = "/lib/modules"            // <release>/ with the boot's modules and their index
	InitramfsKernel  = "/boot/vmlinuz"           // the kernel, installed to disk with the initramfs
	InitramfsGRUB    = "/boot/grub"              // GRUB's boot.img, core.img and GRUBEFIName, installed to disk
	InitramfsKeys    = "/boot/image-signing.pub" // the image keys an installed node trusts
	InitramfsStub    = "/boot/uki-stub.efi"      // systemd's EFI stub, for the UKI a node booted from one installs
	GRUBEFIName      = "bootx64.efi"             // GRUB for UEFI, in InitramfsGRUB
	diskDir          = "/disk"                   // a tmpfs standing for the node's disk until it installs
	downloadedConfig = "/config.yaml"            // talos.config's download, copied into the node's root
)

// InitramfsAdded are what the boot adds to the initramfs's folder (relative names): not the
// initramfs's own files, left out when a node writes its initramfs back (the downloaded config
// holds the machine's secrets, and BOOT is not encrypted). The stub's /.extra; the kernel's /root;
// the folders the boot mounts things on (an installed disk's partitions are mounted under /disk,
// which is a tmpfs otherwise).
var InitramfsAdded = []string{
	strings.TrimPrefix(downloadedConfig, "/"), strings.TrimPrefix(platform.File, "/"), strings.TrimPrefix(volumeDir, "/"), ".extra", "root", "image", "metal-iso",
	"disk/" + partition.Boot, "disk/" + partition.Meta, "disk/" + partition.State, "disk/" + partition.Ephemeral, "disk/rootfs",
}

// BootModules are loaded on every boot, before the devices' own: the node image's
// filesystems and loop devices, and the virtio transport the devices of QEMU are on.
var BootModules = []string{"loop", "squashfs", "overlay", "virtio_pci"}

// InitMain is the initramfs's /init: PID 1 on the kernel, before the node image runs. It
// logs to the kernel console; an error here leaves the machine with nothing to run, so
// Main (cmd/machined) reports it and the kernel panics, as upstream's does. The work is
// initSteps, run in order.
func InitMain([]string) error {
	runtime.LockOSThread()

	defer flushLog() // an error ends the boot: its lines before it must reach the console

	return runInitSteps(initSteps(&initBoot{}))
}

// initStep is one named step of the initramfs's boot.
type initStep struct {
	name string
	run  func() error
}

// initSteps is the initramfs's boot, in order: each step reads what the ones before it left
// in b. The last one execs machined and does not return when it succeeds.
func initSteps(b *initBoot) []initStep {
	return []initStep{
		{"mountKernelFilesystems", mountKernelFilesystems},
		{"openKernelLog", openKernelLog},
		{"readCmdline", b.readCmdline},
		{"loadModules", b.loadModules},
		{"measureInitrd", b.measureInitrd},
		{"platformNetwork", b.platformNetwork},
		{"setHostname", b.setHostname},
		{"leaveInitrd", b.leaveInitrd},
		{"mountDisk", b.mountDisk},
		{"startTheWorld", b.startTheWorld},
		{"chooseSlot", b.chooseSlot},
		{"machineConfig", b.machineConfig},
		{"writePlatform", b.writePlatform},
		{"buildMetalRoot", b.buildMetalRoot},
		{"execMachined", b.execMachined},
	}
}

// runInitSteps runs steps in order, logs each one's name and time, and stops at the first
// error, which names its step.
func runInitSteps(steps []initStep) error {
	for _, s := range steps {
		start := time.Now()

		if err := s.run(); err != nil {
			return fmt.Errorf("init step %s: %w", s.name, err)
		}

		log("init step %s: done in %s", s.name, time.Since(start).Round(time.Microsecond))
	}

	return nil
}

// MetalISO is upstream's talos.config=metal-iso: the config is config.yaml at the root of an
// ISO 9660 filesystem labelled metal-iso (a CD-ROM or a disk the machine has).
const MetalISO = "metal-iso"

// configFromISO copies config.yaml from the metal-iso volume to dst and names the device.
func configFromISO(mods *Modules, dst string) (string, error) {
	devs, err := partition.Devices("/sys")
	if err != nil {
		return "", err
	}

	for _, d := range devs {
		dev := filepath.Join("/dev", d.Name)
		if v, err := udev.Probe(dev); err != nil || v.Filesystem != "iso9660" || v.Label != MetalISO {
			continue
		}

		if err = mods.Load("isofs"); err != nil {
			return "", err
		}

		const dir = "/metal-iso" // in InitramfsAdded
		if err = os.MkdirAll(dir, 0o700); err != nil {
			return "", err
		}

		if err = unix.Mount(dev, dir, "iso9660", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return "", fmt.Errorf("talos.config=%s: mounting %s: %w", MetalISO, dev, err)
		}

		b, err := os.ReadFile(filepath.Join(dir, "config.yaml"))
		unix.Unmount(dir, 0) //nolint:errcheck // read-only: nothing to lose

		if err != nil {
			return "", fmt.Errorf("talos.config=%s: the volume %s has no config.yaml at its root: %w", MetalISO, dev, err)
		}

		return dev, os.WriteFile(dst, b, 0o600)
	}

	return "", fmt.Errorf("talos.config=%s: no ISO 9660 volume labelled %s (attach one with config.yaml at its root, or give a URL)", MetalISO, MetalISO)
}

// chooseSlot is the boot stage's part in the initramfs of an installed node: META and GRUB's
// default are updated for the booted slot (slots.ChooseBooted), and EPHEMERAL or STATE
// are emptied when an upgrade or a reset asked for it. It returns the slot machined runs from.
func chooseSlot(booted string) (string, error) {
	if booted == "" {
		log("the kernel's command line names no slot (BOOT_IMAGE=/A/vmlinuz): upgrades and rollbacks are off for this boot")

		return "", nil
	}

	store, err := meta.Open(filepath.Join(diskDir, partition.Meta))
	if err != nil {
		return "", err
	}

	b, err := slots.ChooseBooted(filepath.Join(diskDir, partition.Boot), store, booted)
	if err != nil {
		// GRUB has booted this slot already: run it, and say why META could not be kept.
		log("boot slot %s: %v", booted, err)

		return booted, nil
	}

	log("boot slot %s: %s", b.Slot, b.Reason)

	if b.WipeEphemeral {
		if err = emptyDir(filepath.Join(diskDir, partition.Ephemeral)); err != nil {
			return "", fmt.Errorf("wiping EPHEMERAL for the upgrade: %w", err)
		}

		log("EPHEMERAL wiped for the upgrade (it was not asked to --preserve)")
	}

	if len(b.ResetWipe) > 0 {
		for _, label := range b.ResetWipe {
			// STATE's salt stays: EPHEMERAL's keys locked to STATE need it, and the partition is
			// the same one (a replaced STATE is what locking guards against).
			if err = emptyDir(filepath.Join(diskDir, label), encryption.SaltFile); err != nil {
				return "", fmt.Errorf("finishing the reset: wiping %s: %w", label, err)
			}
		}

		if err = store.Set(meta.ResetWipe, ""); err != nil {
			return "", err
		}

		log("reset: wiped %s", strings.Join(b.ResetWipe, ", "))
	}

	return b.Slot, nil
}

// emptyDir removes everything in a mounted partition but the files named keep, keeping the mount.
func emptyDir(dir string, keep ...string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}

	for _, e := range entries {
		if slices.Contains(keep, e.Name()) {
			continue
		}

		if err = os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}

	unix.Sync()

	return nil
}

// mountDisk mounts the node's partitions at diskDir when a disk has them (the node is installed:
// BOOT, STATE and EPHEMERAL are XFS, META a raw partition); otherwise a tmpfs stands for the
// disk until the node installs.
func mountDisk(mods *Modules) (bool, error) {
	devs, err := partition.Devices("/sys")
	if err != nil {
		return false, err
	}

	parts := partition.Named(devs, partition.Boot, partition.Meta, partition.State, partition.Ephemeral)
	if parts == nil {
		if err = unix.Mount("tmpfs", diskDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=755"); err != nil {
			return false, fmt.Errorf("mounting %s: %w", diskDir, err)
		}

		for _, p := range []string{partition.State, partition.Meta, partition.Boot, partition.Ephemeral} {
			if err = os.MkdirAll(filepath.Join(diskDir, p), 0o700); err != nil {
				return false, err
			}
		}

		log("no installed disk: the node runs from memory until it installs")

		return false, nil
	}

	if err = mods.Load("xfs"); err != nil {
		return false, err
	}

	for _, name := range []string{partition.Boot, partition.State, partition.Ephemeral} {
		dir := filepath.Join(diskDir, name)
		if err = os.MkdirAll(dir, 0o700); err != nil {
			return false, err
		}

		if name == partition.Ephemeral { // STATE, with the config, is mounted by now
			growEphemeral(filepath.Join(diskDir, partition.State), parts[name])
		}

		dev := parts[name].Path()
		if name != partition.Boot {
			if dev, err = openEncrypted(mods, name, dev, parts[partition.Meta].Path()); err != nil {
				return false, fmt.Errorf("opening %s: %w", name, err)
			}
		}

		if err = unix.Mount(dev, dir, "xfs", unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			return false, fmt.Errorf("mounting %s (%s): %w", name, dev, err)
		}

		if name == partition.Ephemeral {
			if grown, err := growXFS(dir, dev); err != nil {
				log("EPHEMERAL keeps its size: %v", err)
			} else if grown {
				log("EPHEMERAL grown to its whole partition")
			}
		}
	}

	// META is its raw partition: the device node stands where the other partitions' folders
	// are, and the node's META store (internal/meta) opens it as a partition.
	meta := filepath.Join(diskDir, partition.Meta)
	if err = os.WriteFile(meta, nil, 0o600); err != nil {
		return false, err
	}

	if err = unix.Mount(parts[partition.Meta].Path(), meta, "", unix.MS_BIND, ""); err != nil {
		return false, fmt.Errorf("binding META (%s): %w", parts[partition.Meta].Path(), err)
	}

	log("booting the installed disk %s: BOOT, STATE and EPHEMERAL mounted", parts[partition.Boot].Disk)

	return true, nil
}

func loUp() error {
	c, err := rtnetlink.Dial(nil)
	if err != nil {
		return fmt.Errorf("opening rtnetlink: %w", err)
	}
	defer c.Close()

	idx, err := container.LinkIndex(c, "lo")
	if err != nil {
		return err
	}

	return container.SetLinkUp(c, idx)
}

// configureNetwork brings up lo and the `ip=` link with its address and default route.
func configureNetwork(ip IPConfig) error {
	c, err := rtnetlink.Dial(nil)
	if err != nil {
		return fmt.Errorf("opening rtnetlink: %w", err)
	}
	defer c.Close()

	links, err := c.Link.List()
	if err != nil {
		return err
	}

	device := ip.Device

	for _, l := range links {
		if l.Attributes == nil {
			continue
		}

		if l.Attributes.Name == "lo" {
			if err = container.SetLinkUp(c, l.Index); err != nil {
				return err
			}

			continue
		}

		if device == "" && l.Type != unix.ARPHRD_LOOPBACK {
			device = l.Attributes.Name
		}
	}

	if device == "" {
		return errors.New("ip=: the machine has no network link (is its driver in the initramfs?)")
	}

	var gw netip.Addr
	if ip.Gateway.IsValid() {
		gw = ip.Gateway
	}

	if err = container.ConfigureStatic(c, device, ip.Address, gw, network.DefaultRouteMetric); err != nil {
		return fmt.Errorf("ip=: %w", err)
	}

	log("%s: %s, gateway %s", device, ip.Address, gw)

	return nil
}

// initKmsg is the kernel's log, once /dev is mounted.
var initKmsg *Kmsg

// flushLog waits for the queued lines to reach the kernel's log.
func flushLog() {
	if initKmsg != nil {
		initKmsg.Flush(time.Second)
	}
}

// log writes to the kernel's log (the console shows it with the kernel's timestamps), or to
// stderr before /dev is mounted.
func log(format string, args ...any) {
	if initKmsg != nil {
		initKmsg.Write(fmt.Appendf(nil, format, args...)) //nolint:errcheck // it reports no error

		return
	}

	fmt.Fprintf(os.Stderr, "[talos] "+format+"\n", args...)
}
