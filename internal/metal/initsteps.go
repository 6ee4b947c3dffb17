package metal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/container"
	"github.com/talos-go/talos/internal/partition"
	"github.com/talos-go/talos/internal/platform"
	"github.com/talos-go/talos/internal/slots"
	"github.com/talos-go/talos/internal/uki"
)

// initBoot is what the initramfs's steps (initSteps) learn and hand on to the later ones.
type initBoot struct {
	rawCmdline   string // /proc/cmdline as read: GRUB's BOOT_IMAGE names the slot
	cmdline      Cmdline
	platformName string
	ip           IPConfig // ip=, then with the node's address and the lease's hostname
	mods         *Modules
	phases       pcrPhases
	published    platform.Published
	hostname     string
	installed    bool     // the node's disk is mounted at diskDir, not a tmpfs
	env          []string // machined's, beyond the initramfs's
	spec         container.Spec
}

// mountKernelFilesystems mounts /dev, /proc and /sys (already mounted is fine).
func mountKernelFilesystems() error {
	for _, m := range []struct{ src, dir, fs string }{{"devtmpfs", "/dev", "devtmpfs"}, {"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}} {
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			return err
		}

		if err := unix.Mount(m.src, m.dir, m.fs, unix.MS_NOSUID, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mounting %s: %w", m.dir, err)
		}
	}

	return nil
}

// openKernelLog sends log's lines to the kernel's log; without it they go to stderr, the console.
func openKernelLog() error {
	initKmsg, _ = OpenKmsg()

	return nil
}

// readCmdline reads and checks the kernel's command line: the platform, KSPP's settings, ip=.
func (b *initBoot) readCmdline() error {
	raw, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return err
	}

	b.rawCmdline = string(raw)
	b.cmdline = ParseCmdline(b.rawCmdline)

	b.platformName = b.cmdline.Get("talos.platform")
	if err = platform.Check(b.platformName); err != nil {
		return err
	}

	if err = b.cmdline.CheckKSPP(); err != nil {
		return err
	}

	b.ip, err = ParseIP(b.cmdline.Get("ip"))

	return err
}

// loadModules loads BootModules and the modules of the devices the machine has.
func (b *initBoot) loadModules() error {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return err
	}

	release := unix.ByteSliceToString(uts.Release[:])

	mods, err := OpenModules(filepath.Join(InitramfsModules, release))
	if err != nil {
		return fmt.Errorf("the initramfs has no modules for kernel %s: %w (rebuild the boot assets with `make boot`)", release, err)
	}

	b.mods = mods

	for _, name := range BootModules {
		if err = mods.Load(name); err != nil {
			return err
		}
	}

	loaded, err := mods.LoadForDevices("/sys")
	if err != nil {
		return err
	}

	log("kernel %s: loaded %s and, for the devices, %s", release, strings.Join(BootModules, ", "), strings.Join(loaded, ", "))

	return nil
}

// measureInitrd extends PCR 11 with the initrd's phase when a UKI's stub measured the boot.
func (b *initBoot) measureInitrd() error {
	b.phases = startPhases()

	return nil
}

// platformNetwork brings the network up and reads the platform's data. A static ip= configures
// its link; otherwise DHCPv4 runs on every link not ignored, and the first lease's address is
// the node's. A platform other than metal says what the network is (nocloud's network-config)
// and brings the boot's own up only when it needs it.
func (b *initBoot) platformNetwork() error {
	boot := &bootNetwork{ip: b.ip, ignore: b.cmdline.List("talos.network.interface.ignore")}
	b.published = platform.Published{Data: platform.Data{Metadata: runtimeres.PlatformMetadataSpec{Platform: platform.Metal}}}

	var err error

	if p, ok := platforms[b.platformName]; ok {
		if b.published.Data, err = p.Data(context.Background(), platformEnv(b.cmdline, b.mods, boot)); err != nil {
			return err
		}
	}

	load := func(module string) error {
		if b.mods == nil {
			return nil // no modules folder: the kernel has its drivers built in
		}

		return b.mods.Load(module)
	}

	address, leased, err := applyPlatformNetwork(b.published.Network, boot, load)
	if err != nil {
		return err
	}

	b.ip, b.ip.Address = boot.ip, address
	if b.published.Network != nil && len(b.published.Network.Links) > 0 {
		b.published.DHCPLinks = leased
	}

	return nil
}

// setHostname names the node: the platform's hostname, ip='s or the lease's, or "talos".
func (b *initBoot) setHostname() error {
	b.hostname = b.ip.Hostname
	if host, _ := b.published.Network.HostnameParts(); host != "" {
		b.hostname = host
	}

	if b.hostname == "" {
		b.hostname = "talos"
	}

	return unix.Sethostname([]byte(b.hostname))
}

// leaveInitrd moves PCR 11 to the phase a UKI's PCR signature approves: the disks are opened
// in it (mountDisk), and the boot moves past it once they are (startTheWorld), so nothing
// after the boot stage unseals their keys.
func (b *initBoot) leaveInitrd() error {
	b.phases.extend(uki.LeaveInitrd, uki.EnterMachined)

	return nil
}

// mountDisk mounts the installed disk's partitions, or a tmpfs standing for them.
func (b *initBoot) mountDisk() error {
	var err error

	b.installed, err = mountDisk(b.mods)

	return err
}

// startTheWorld moves PCR 11 past the phase the disks' keys are sealed to.
func (b *initBoot) startTheWorld() error {
	b.phases.extend(uki.StartTheWorld)

	return nil
}

// chooseSlot, on an installed node, picks the slot GRUB booted; META says whether it is being
// tried, and what to wipe first.
func (b *initBoot) chooseSlot() error {
	if !b.installed {
		return nil
	}

	slot, err := chooseSlot(slots.Booted(b.rawCmdline))
	if err != nil {
		return err
	}

	b.env = append(b.env, slots.EnvSlot+"="+slot)

	return nil
}

// machineConfig lays out the node's spec and finds its machine config. talos.config= is the
// first boot's config, downloaded now that the network is up, or read from a metal-iso volume;
// a platform's is its user data; an installed node has its config on STATE. A disk image's
// first boot is an installed node without one there: it takes the first boot's.
func (b *initBoot) machineConfig() error {
	b.spec = container.Spec{Image: InitramfsImage, Disk: diskDir, Hostname: b.hostname, Address: b.ip.Address, Modules: InitramfsModules, Initramfs: "/", Init: "/init"}

	configured := b.installed
	if _, err := os.Stat(filepath.Join(diskDir, partition.State, "config.yaml")); b.installed && errors.Is(err, os.ErrNotExist) {
		configured = false
	}

	if arg := b.cmdline.Get("talos.config"); b.platformName != platform.Metal {
		if arg != "" {
			log("talos.config=%s is metal's: on talos.platform=%s the machine config is the platform's user data", arg, b.platformName)
		}

		if b.published.Config != nil && !configured {
			b.spec.Config = downloadedConfig
			if err := os.WriteFile(b.spec.Config, b.published.Config, 0o600); err != nil {
				return err
			}

			log("talos.platform=%s: the machine config is the platform's user data", b.platformName)
		}
	} else if arg == MetalISO && !configured {
		b.spec.Config = downloadedConfig

		dev, err := configFromISO(b.mods, b.spec.Config)
		if err != nil {
			return err
		}

		log("talos.config: read the machine config from the %s volume %s", MetalISO, dev)
	} else if arg != "" && !configured {
		url, err := ConfigURL(arg, ConfigVars(b.ip.Address.Addr(), b.hostname))
		if err != nil {
			return err
		}

		b.spec.Config = downloadedConfig
		if err = FetchConfig(context.Background(), url, b.spec.Config); err != nil {
			return err
		}

		log("talos.config: downloaded the machine config from %s", url)
	}

	return nil
}

// writePlatform writes what the platform published for machined (platform.File).
func (b *initBoot) writePlatform() error {
	return platform.Write(platform.File, b.published)
}

// buildMetalRoot lays out the node's root from the node image.
func (b *initBoot) buildMetalRoot() error {
	return container.BuildMetalRoot(b.spec)
}

// execMachined becomes machined in the node's root; it returns only on an error.
func (b *initBoot) execMachined() error {
	log("switched to the node image; starting machined at %s", b.ip.Address)
	flushLog()

	return container.ExecInit("metal", b.ip.Address.Addr(), b.spec.Config != "", b.env...)
}
