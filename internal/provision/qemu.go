package provision

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"

	"github.com/talos-go/talos/internal/container"
	"github.com/talos-go/talos/internal/metal"
	"github.com/talos-go/talos/internal/partition"
	"github.com/talos-go/talos/internal/qemu"
)

// ProvisionerQEMU runs each node as a QEMU guest booting the metal boot assets (`make boot`).
const ProvisionerQEMU = "qemu"

// qemuProvisioner runs each node as a QEMU guest booting the metal boot assets, on a bridge
// (root).
type qemuProvisioner struct{}

var _ Provisioner = qemuProvisioner{}

func init() { Register(qemuProvisioner{}) }

func (qemuProvisioner) Name() string { return ProvisionerQEMU }

func (qemuProvisioner) Capabilities() Capabilities {
	return Capabilities{Bridge: true, OwnKernel: true, ImageKubernetes: true, GatewayDNS: true}
}

func (qemuProvisioner) DefaultCIDR() string { return DefaultContainerCIDR }

func (qemuProvisioner) Check(r *Request) error { return r.checkQEMU() }

// Configure installs to the guests' disk, sends their logs to the network process with
// --with-json-logs, and makes the gateway their resolver when no --nameservers are given.
func (qemuProvisioner) Configure(r *Request) {
	// As upstream's qemu nodes: the guest's virtio disk.
	r.Generate.Options = append(slices.Clone(r.Generate.Options), generate.WithInstallDisk(QEMUInstallDisk))

	if r.QEMU.JSONLogs {
		r.Patches = append(slices.Clone(r.Patches), jsonLogsPatch(r.NetworkCIDR()))
	}

	if len(r.Nameservers) == 0 {
		// The cluster's network process forwards DNS on the bridge (qemu.NetworkSpec).
		r.Nameservers = []string{Gateway(r.NetworkCIDR()).Addr().String()}
	}
}

func (qemuProvisioner) BasePatches() []string { return nil }

// NodeIdentity gives each machine a UUID of its own, as upstream's qemu nodes, and names it
// after it with --with-uuid-hostnames.
func (qemuProvisioner) NodeIdentity(r *Request, name string) (string, string) {
	id := uuid.NewString()
	if r.QEMU.UUIDHostnames {
		name = "machine-" + id
	}

	return name, id
}

// CreateNetwork records the boot assets, finds whether KVM works, makes the bridge and starts
// the network process.
func (qemuProvisioner) CreateNetwork(_ context.Context, c *Cluster, r *Request, progress io.Writer) error {
	return c.prepareQEMU(*r, progress)
}

func (qemuProvisioner) Launch(c *Cluster, n *Node, r *Request) error { return c.startQEMU(n, r) }

// Started applies the configs of nodes that boot without one (a boot medium, --with-apply-config).
func (qemuProvisioner) Started(ctx context.Context, c *Cluster, r *Request, progress io.Writer) error {
	q := r.QEMU
	if !r.SkipInjectingConfig && (q.ApplyConfig || q.ISO != "" || q.USB != "" || q.UKI != "" || q.IPXEBootScript != "" || q.DiskImage != "") {
		return c.applyConfigs(ctx, progress)
	}

	return nil
}

// DestroyNetwork stops the network process, then removes the taps and the bridge.
func (qemuProvisioner) DestroyNetwork(c *Cluster, progress io.Writer) error {
	if err := c.stopQEMUNetwork(progress); err != nil {
		return err
	}

	return c.RemoveNetwork(progress)
}

func (qemuProvisioner) Describe(c *Cluster, w io.Writer) {
	fmt.Fprintf(w, "BRIDGE            %s\nMTU               %d\nKERNEL            %s\nINITRAMFS         %s\nKVM               %v\nCONFIGS           %s\n",
		c.Bridge, c.MTU, c.Kernel, c.Initrd, c.KVM, c.ConfigServer)
}

// QEMUInstallDisk is the guests' disk (virtio), the generated configs' install disk.
const QEMUInstallDisk = "/dev/vda"

// QEMURequest is what only the qemu provisioner uses (upstream's qemu flags). CPUs, memory and
// MTU are the container provisioner's flags (ContainerRequest), as upstream shares them.
type QEMURequest struct {
	Kernel string // vmlinuz of `make boot`
	Initrd string // its initramfs
	ISO    string // boot this ISO (make boot's metal-amd64.iso) instead, until installed
	USB    string // or this USB stick's image (the hybrid ISO is one)
	UKI    string // or this unified kernel image (make boot's metal-amd64-uki.efi), with UEFI
	// DiskImage, or this disk image (make boot's metal-amd64.raw) as each node's disk: the node
	// boots it into maintenance mode, installed already.
	DiskImage string
	// IPXEBootScript, or this iPXE script's URL: the nodes boot from the network (their cards'
	// iPXE), the cluster's DHCP giving them the URL.
	IPXEBootScript string
	// NoBootloader boots the kernel and initramfs directly on every start, also once installed.
	NoBootloader bool
	// NoUEFI boots the nodes with the BIOS (SeaBIOS) instead of UEFI (OVMF).
	NoUEFI bool
	// UEFISearchPaths are searched for OVMF before the distributions' folders.
	UEFISearchPaths []string
	DiskMB          int64 // each node's disk, a file in its state folder
	// DiskBlockSize is that disk's block size (--disk-block-size): 512, or 4096 (a 4Kn disk,
	// which boots with UEFI only).
	DiskBlockSize   int
	ExtraKernelArgs []string

	Preallocate       bool     // allocate the disk files' blocks (else sparse)
	ExtraDisks        int      // more disks of each worker
	ExtraDisksSizeMB  int64    // their size
	ExtraDisksDrivers []string // their drivers, one per disk (virtio when not given)
	// UserVolumes are --user-volumes: a disk of every node per entry, with a UserVolumeConfig
	// for each of its volumes.
	UserVolumes         [][]UserVolume
	BadRTC              bool // the guests' clocks start two years behind
	DisableDHCPHostname bool // the leases name no hostname
	// ApplyConfig boots the nodes without a config (maintenance mode) and applies each one's
	// through the maintenance API, instead of talos.config=.
	ApplyConfig bool
	// ConfigInjection is how a booting node gets its config (--config-injection-method): "" or
	// "http", served by the network process (talos.config=URL); "metal-iso", on an ISO of its
	// own labelled metal-iso (talos.config=metal-iso).
	ConfigInjection string
	// UUIDHostnames names each node machine-<its SMBIOS UUID> (upstream's --with-uuid-hostnames).
	UUIDHostnames bool
	// TPM gives each node a TPM emulated by swtpm: qemu.TPM2 or qemu.TPM12 ("" for none).
	TPM string
	// IOMMU gives each node an Intel IOMMU (the q35 machine).
	IOMMU bool
	// UseVIP makes the Kubernetes endpoint a virtual IP (the network's 50th address) that the
	// control planes elect a holder of (machine.network.interfaces[].vip), as upstream's --use-vip.
	UseVIP bool
	// JSONLogs has the nodes send their logs (machine.logging, json_lines over TCP) to the
	// network process, which writes them to json-logs.log in the cluster's folder.
	JSONLogs bool
}

// geteuid is os.Geteuid, replaced in tests to check the refusal without root.
var geteuid = os.Geteuid

// The TPM versions of --with-tpm2 and --with-tpm1_2.
const (
	TPM2  = qemu.TPM2
	TPM12 = qemu.TPM12
)

// KMSKeyFile is the cluster's KMS sealing key, in its folder: without it the nodes' KMS-sealed
// volumes do not open.
const KMSKeyFile = "kms.key"

// vipAddress is --use-vip's shared address: the cluster network's 50th, as upstream's.
func vipAddress(cidr netip.Prefix) netip.Addr {
	a := cidr.Masked().Addr()
	for range 50 {
		a = a.Next()
	}

	return a
}

// vipPatch is the control planes' config patch that shares the VIP on their network card.
func vipPatch(vip netip.Addr) string {
	return fmt.Sprintf(`{"machine": {"network": {"interfaces": [{"interface": "eth0", "dhcp": true, "vip": {"ip": %q}}]}}}`, vip)
}

// JSONLogsFile is where --with-json-logs' logs go, in the cluster's folder.
const JSONLogsFile = "json-logs.log"

// jsonLogsPatch is the config patch that sends a node's logs to the network process.
func jsonLogsPatch(cidr netip.Prefix) string {
	return fmt.Sprintf(`{"machine": {"logging": {"destinations": [{"endpoint": "tcp://%s", "format": "json_lines"}]}}}`,
		netip.AddrPortFrom(Gateway(cidr).Addr(), qemu.JSONLogsPort))
}

func (r *Request) checkQEMU() error {
	q, c := r.QEMU, r.Container

	switch {
	case geteuid() != 0:
		return errors.New("the qemu provisioner needs root (it makes a bridge and taps): run it as root, or use `--provisioner process`, which needs none")
	case !r.CIDR.Addr().Is4() || r.CIDR.Addr().IsLoopback():
		return fmt.Errorf("--cidr %s: the qemu provisioner needs an IPv4 network off loopback, like %s", r.CIDR, DefaultContainerCIDR)
	case q.DiskMB < partition.MinSize(partition.Layout)/partition.MiB:
		return fmt.Errorf("--disk %d is too small: a node installs itself to its disk, give it at least %d MB", q.DiskMB, partition.MinSize(partition.Layout)/partition.MiB)
	case c.MemoryMB < 1024 || c.MemoryWorker < 1024:
		return errors.New("--memory and --memory-workers must be at least 1024 (MB): a metal node runs from memory")
	case c.CPUs <= 0 || c.CPUsWorkers <= 0:
		return errors.New("--cpus and --cpus-workers must be positive: they are the guests' CPUs")
	case c.MTU < 576 || c.MTU > 65535:
		return fmt.Errorf("--mtu %d is out of range: use 576 to 65535 (1500 is usual)", c.MTU)
	case q.DiskBlockSize != 0 && q.DiskBlockSize != partition.SectorSize && q.DiskBlockSize != partition.SectorSize4K:
		return fmt.Errorf("--disk-block-size %d: give 512 or 4096", q.DiskBlockSize)
	case q.DiskBlockSize == partition.SectorSize4K && q.NoUEFI:
		return errors.New("--disk-block-size 4096: GRUB boots a disk of 4096-byte sectors with UEFI only: drop --with-uefi=false")
	case q.ExtraDisks < 0:
		return fmt.Errorf("--extra-disks %d must not be negative", q.ExtraDisks)
	case q.ExtraDisks > 0 && q.ExtraDisksSizeMB < 1:
		return fmt.Errorf("--extra-disks-size %d must be positive (MB)", q.ExtraDisksSizeMB)
	case len(q.ExtraDisksDrivers) > q.ExtraDisks:
		return fmt.Errorf("--extra-disks-drivers names %d drivers for %d --extra-disks: give one per disk at most", len(q.ExtraDisksDrivers), q.ExtraDisks)
	}

	for _, d := range q.ExtraDisksDrivers {
		if !slices.Contains(qemu.DiskDrivers, d) {
			return fmt.Errorf("--extra-disks-drivers %q is not supported: use %s (the node's kernel carries their modules)", d, strings.Join(qemu.DiskDrivers, ", "))
		}
	}

	if q.TPM != "" {
		if _, err := exec.LookPath("swtpm"); err != nil {
			return fmt.Errorf("--with-tpm%s: no swtpm to emulate the TPM: install it with `apt-get install swtpm`", strings.ReplaceAll(strings.TrimSuffix(q.TPM, ".0"), ".", "_"))
		}
	}

	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return errors.New("no qemu-system-x86_64: install it with `apt-get install qemu-system-x86`")
	}

	switch q.ConfigInjection {
	case "", ConfigInjectionHTTP:
	case ConfigInjectionISO:
		if flag, medium := q.bootMedium(); medium != "" || q.ApplyConfig {
			if medium == "" {
				flag = "--with-apply-config"
			}

			return fmt.Errorf("--config-injection-method %s gives the config at boot, %s applies it in maintenance mode: drop one", ConfigInjectionISO, flag)
		}
	default:
		return fmt.Errorf("--config-injection-method %q is unknown: use %s (the default) or %s", q.ConfigInjection, ConfigInjectionHTTP, ConfigInjectionISO)
	}

	paths, err := q.bootPaths()
	if err != nil {
		return err
	}

	for flag, path := range paths {
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("%s: %w (build the boot assets with `make boot`)", flag, err)
		}
	}

	if !q.NoUEFI {
		if _, err := qemu.FindUEFI(q.UEFISearchPaths); err != nil {
			return fmt.Errorf("--with-uefi: %w; or boot with the BIOS: --with-uefi=false", err)
		}
	}

	return nil
}

// bootPaths checks the first boot's medium (a kernel and initramfs, or one of --iso-path,
// --usb-path, --uki-path, --ipxe-boot-script and --disk-image-path) against the other flags,
// and names the files it needs by flag (none for an iPXE script, a URL).
func (q QEMURequest) bootPaths() (map[string]string, error) {
	paths := map[string]string{"--vmlinuz-path": q.Kernel, "--initrd-path": q.Initrd}
	if flag, medium := q.bootMedium(); medium != "" {
		if media := len(slices.DeleteFunc([]string{q.ISO, q.USB, q.UKI, q.IPXEBootScript, q.DiskImage}, func(s string) bool { return s == "" })); media > 1 {
			return nil, errors.New("--iso-path, --usb-path, --uki-path, --ipxe-boot-script and --disk-image-path each give the first boot's medium: give one")
		}

		if q.DiskImage != "" && q.DiskBlockSize > partition.SectorSize {
			return nil, fmt.Errorf("--disk-image-path: the image's partition table is in 512-byte sectors: drop --disk-block-size %d", q.DiskBlockSize)
		}

		if q.IPXEBootScript != "" && !httpURL(q.IPXEBootScript) {
			return nil, fmt.Errorf("--ipxe-boot-script %q: give the script's http:// or https:// URL", q.IPXEBootScript)
		}

		// OVMF boots the network with its own PXE client, not the card's iPXE, and the
		// cluster's DHCP serves iPXE only (no TFTP, no UEFI HTTP boot).
		if q.IPXEBootScript != "" && !q.NoUEFI {
			return nil, errors.New("--ipxe-boot-script: the nodes' UEFI firmware boots the network with its own PXE client, which the cluster's DHCP does not serve (it answers iPXE): add --with-uefi=false")
		}

		if q.UKI != "" && q.NoUEFI {
			return nil, errors.New("--uki-path: a unified kernel image boots with UEFI: drop --with-uefi=false")
		}

		if q.NoBootloader {
			return nil, fmt.Errorf("--with-bootloader=false boots the kernel directly on every start: drop %s, or --with-bootloader=false", flag)
		}

		// The medium's menu has the kernel arguments: the configs go through the maintenance API.
		if len(q.ExtraKernelArgs) > 0 {
			return nil, fmt.Errorf("--extra-boot-kernel-args are for a kernel booted directly: the %s carries its own; drop %s, or --extra-boot-kernel-args", flag, flag)
		}

		paths = map[string]string{flag: medium}
		if q.IPXEBootScript != "" {
			paths = nil // a URL, fetched by the nodes
		}
	}

	return paths, nil
}

// The values of --config-injection-method.
const (
	ConfigInjectionHTTP = "http"
	ConfigInjectionISO  = "metal-iso"
)

// makeConfigISO writes an ISO 9660 image labelled metal-iso holding the config as config.yaml
// (Debian's xorriso).
func makeConfigISO(config, out string) error {
	cmd := exec.Command("xorriso", "-as", "mkisofs", "-quiet", "-V", metal.MetalISO, "-o", out, "-graft-points", "config.yaml="+config)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("--config-injection-method %s: making the node's ISO with xorriso (apt-get install xorriso): %w: %s", ConfigInjectionISO, err, b)
	}

	return nil
}

// bootMedium is the first boot's medium, an ISO or a USB stick, and its flag ("" when the
// kernel boots directly).
func (q QEMURequest) bootMedium() (flag, path string) {
	if q.USB != "" {
		return "--usb-path", q.USB
	}

	if q.UKI != "" {
		return "--uki-path", q.UKI
	}

	if q.IPXEBootScript != "" {
		return "--ipxe-boot-script", q.IPXEBootScript
	}

	if q.DiskImage != "" {
		return "--disk-image-path", q.DiskImage
	}

	return "--iso-path", q.ISO
}

// CIDR6 is the cluster's IPv6 network with --ipv6, as upstream derives it from the IPv4 one: the
// ULA prefix fd74:616c ("tal"), then the IPv4 network's four bytes, a /64.
func CIDR6(cidr4 netip.Prefix) netip.Prefix {
	b := cidr4.Masked().Addr().As4()
	a := [16]byte{0xfd, 0x74, 0x61, 0x6c, b[0], b[1], b[2], b[3]}

	return netip.PrefixFrom(netip.AddrFrom16(a), 64)
}

// macFor is a node's MAC: QEMU's prefix and the last three bytes of its IPv4 address, unique in
// the cluster and the same on every boot.
func macFor(addr netip.Addr) string {
	b := addr.As4()

	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", b[1], b[2], b[3])
}

// prepareQEMU records the boot assets, finds whether KVM works, and makes the network.
func (c *Cluster) prepareQEMU(req Request, progress io.Writer) error {
	var err error
	if c.Kernel, err = filepath.Abs(req.QEMU.Kernel); err != nil {
		return err
	}

	if c.Initrd, err = filepath.Abs(req.QEMU.Initrd); err != nil {
		return err
	}

	for _, m := range []struct{ path, abs *string }{{&req.QEMU.ISO, &c.ISO}, {&req.QEMU.USB, &c.USB}, {&req.QEMU.UKI, &c.UKI}, {&req.QEMU.DiskImage, &c.DiskImage}} {
		if *m.path != "" {
			if *m.abs, err = filepath.Abs(*m.path); err != nil {
				return err
			}
		}
	}

	c.KVM = qemu.KVMWorks(c.Kernel)
	fmt.Fprintf(progress, "QEMU with KVM: %v (without it the guests are emulated: slow)\n", c.KVM)

	return c.createQEMUNetwork(req, progress)
}

// createQEMUNetwork makes the bridge and starts the cluster's network process (DHCP and the
// configs over HTTP on the bridge's address).
func (c *Cluster) createQEMUNetwork(req Request, progress io.Writer) error {
	gw := Gateway(req.NetworkCIDR())

	spec, err := c.networkSpec(req, gw)
	if err != nil {
		return err
	}

	fmt.Fprintf(progress, "creating bridge %s (%s)\n", c.Bridge, gw)

	if err = container.CreateBridge(c.Bridge, gw, c.MTU); err != nil {
		return err
	}

	if req.IPv6 {
		gw6 := Gateway(spec.IPv6)
		fmt.Fprintf(progress, "advertising %s on the bridge (%s): the nodes lease their IPv6 addresses over DHCPv6\n", spec.IPv6, gw6)

		if gw6 != gw {
			if err = container.AddAddress(c.Bridge, gw6); err != nil {
				return err
			}
		}
	}

	if req.NoIPv4 {
		fmt.Fprintf(progress, "IPv6-only: the nodes reach the cluster network only (no IPv4, no NAT for IPv6)\n")
	} else if err = Masquerade(c.Bridge, req, progress); err != nil {
		return err
	}

	// The listener is made here so that its port is known for the nodes' kernel arguments.
	l, err := qemu.ListenOnBridge(netip.AddrPortFrom(gw.Addr(), 0))
	if err != nil {
		return fmt.Errorf("the config server on %s: %w", gw.Addr(), err)
	}
	defer l.Close()

	lf, err := l.File()
	if err != nil {
		return err
	}
	defer lf.Close()

	c.ConfigServer = "http://" + l.Addr().String()

	specJSON, err := json.Marshal(spec)
	if err != nil {
		return err
	}

	fmt.Fprintf(progress, "starting DHCP and the config server at %s\n", c.ConfigServer)

	pid, err := c.StartDetached("network.log", []*os.File{lf}, "qemu-network", "--spec", string(specJSON))
	c.NetworkPID = pid

	return err
}

// networkSpec names the cluster's bridge and the nodes' taps, MACs and IPv6 addresses, and is
// what the network process serves: the nodes' leases and configs.
func (c *Cluster) networkSpec(req Request, gw netip.Prefix) (qemu.NetworkSpec, error) {
	cidr := req.CIDR

	// The MACs come from the IPv4 addresses, which an IPv6-only cluster has too (unused).
	addrs4, err := NodeAddresses(cidr, len(c.Nodes))
	if err != nil {
		return qemu.NetworkSpec{}, err
	}

	c.MTU, c.Bridge = req.Container.MTU, "br-"+ShortHash(c.Dir, 12)

	spec := qemu.NetworkSpec{Bridge: c.Bridge, Gateway: gw, NoHostname: req.QEMU.DisableDHCPHostname, IPXEBootScript: req.QEMU.IPXEBootScript}
	if req.QEMU.JSONLogs {
		spec.JSONLogs = filepath.Join(c.Dir, JSONLogsFile)
	}

	if req.Encryption.usesKMS() {
		spec.KMSKey = filepath.Join(c.Dir, KMSKeyFile)
	}

	for _, ns := range req.Nameservers {
		if a, err := netip.ParseAddr(ns); err == nil {
			spec.Nameservers = append(spec.Nameservers, a)
		}
	}

	if req.IPv6 {
		spec.IPv6 = CIDR6(cidr)
	}

	var addrs6 []netip.Addr
	if req.IPv6 {
		if addrs6, err = NodeAddresses(spec.IPv6, len(c.Nodes)); err != nil {
			return qemu.NetworkSpec{}, err
		}
	}

	for i := range c.Nodes {
		n := &c.Nodes[i]
		n.Tap, n.MAC = "tap"+ShortHash(n.State, 11), macFor(addrs4[i])
		lease := qemu.NodeLease{Name: n.Name, MAC: n.MAC, Address: addrs4[i], Config: n.Config}

		switch {
		case req.NoIPv4:
			lease.Address, lease.Address6 = netip.Addr{}, addrs6[i]
		case req.IPv6:
			lease.Address6, n.Address6 = addrs6[i], addrs6[i].String()
		}

		spec.Nodes = append(spec.Nodes, lease)
	}

	return spec, nil
}

// startQEMU starts a node's launcher, which runs QEMU on the boot assets.
func (c *Cluster) startQEMU(n *Node, req *Request) error {
	if err := os.MkdirAll(n.State, 0o700); err != nil {
		return err
	}

	cpus, mem := req.Container.CPUs, req.Container.MemoryMB
	if n.Type == TypeWorker {
		cpus, mem = req.Container.CPUsWorkers, req.Container.MemoryWorker
	}

	cmdline := append([]string{}, metal.DefaultKernelArgs...)
	configISO := ""

	switch {
	case req.QEMU.ApplyConfig || c.ISO != "" || c.USB != "" || c.UKI != "" || req.QEMU.IPXEBootScript != "" || req.SkipInjectingConfig:
	case req.QEMU.ConfigInjection == ConfigInjectionISO:
		configISO = filepath.Join(n.State, "config.iso")
		if err := makeConfigISO(n.Config, configISO); err != nil {
			return err
		}

		cmdline = append(cmdline, "talos.config="+metal.MetalISO)
	default:
		cmdline = append(cmdline, "talos.config="+c.ConfigServer+qemu.ConfigPath(n.Name))
	}

	cmdline = append(cmdline, req.QEMU.ExtraKernelArgs...)

	// As upstream: the extra disks are the workers'.
	var extra []qemu.Disk

	for i := range req.QEMU.ExtraDisks {
		if n.Type != TypeWorker {
			break
		}

		driver := "virtio"
		if i < len(req.QEMU.ExtraDisksDrivers) {
			driver = req.QEMU.ExtraDisksDrivers[i]
		}

		extra = append(extra, qemu.Disk{Path: filepath.Join(n.State, fmt.Sprintf("disk-%d.raw", i+1)), SizeMB: req.QEMU.ExtraDisksSizeMB, Driver: driver})
	}

	for i, disk := range req.QEMU.UserVolumes {
		extra = append(extra, qemu.Disk{Path: filepath.Join(n.State, fmt.Sprintf("user-volumes-%d.raw", i+1)), SizeMB: userVolumeDiskMiB(disk), Driver: "virtio", Serial: userVolumeSerial(i)})
	}

	var uefi *qemu.UEFI

	if !req.QEMU.NoUEFI {
		u, err := qemu.FindUEFI(req.QEMU.UEFISearchPaths)
		if err != nil {
			return err
		}

		u.Vars = filepath.Join(n.State, "uefi-vars.fd")
		uefi = &u
	}

	spec := qemu.NodeSpec{
		Name: n.Name, Kernel: c.Kernel, Initrd: c.Initrd, Cmdline: cmdline, ISO: c.ISO, USB: c.USB, UKI: c.UKI, NetBoot: req.QEMU.IPXEBootScript != "", ConfigISO: configISO, DirectBoot: req.QEMU.NoBootloader, UEFI: uefi,
		Disk: filepath.Join(n.State, "disk.raw"), DiskMB: req.QEMU.DiskMB, DiskBlockSize: req.QEMU.DiskBlockSize, ExtraDisks: extra,
		Preallocate: req.QEMU.Preallocate, BadRTC: req.QEMU.BadRTC, DiskImage: c.DiskImage,
		MemoryMB: mem, CPUs: int(math.Ceil(cpus)), KVM: c.KVM,
		MAC: n.MAC, Bridge: c.Bridge, Tap: n.Tap, MTU: c.MTU, UUID: n.UUID,
		IOMMU: req.QEMU.IOMMU,
	}

	if req.QEMU.TPM != "" {
		spec.TPM, spec.TPMState = req.QEMU.TPM, filepath.Join(n.State, "tpm")
	}

	specJSON, err := json.Marshal(spec)
	if err != nil {
		return err
	}

	n.PID, err = c.StartDetached(n.Name+".log", nil, "qemu", "--spec", string(specJSON))

	return err
}

// applyConfigs gives each node booted in maintenance mode its config through the maintenance
// API (no client certificate: the node has no PKI yet), as `talosctl apply-config --insecure`.
func (c *Cluster) applyConfigs(ctx context.Context, progress io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()

	for _, n := range c.Nodes {
		cfg, err := os.ReadFile(n.Config)
		if err != nil {
			return err
		}

		if err = step(ctx, progress, "maintenance mode on "+n.Name+" to apply its config", func(ctx context.Context) error {
			cl, err := client.New(ctx, client.WithEndpoints(n.Address),
				client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true})) //nolint:gosec // maintenance mode has no PKI yet
			if err != nil {
				return err
			}
			defer cl.Close()

			_, err = cl.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: cfg, Mode: machine.ApplyConfigurationRequest_AUTO})

			return err
		}); err != nil {
			return err
		}
	}

	return nil
}

// stopQEMUNetwork stops the network process (after the nodes: a rebooting node asks it again).
func (c *Cluster) stopQEMUNetwork(progress io.Writer) error {
	fmt.Fprintf(progress, "stopping DHCP and the config server\n")

	return StopProcess("the network process", c.NetworkPID, c.Dir, 10*time.Second)
}
