// Package qemu is the qemu provisioner: each node is a QEMU guest booting the metal boot assets
// (`make boot`), on a bridge of the cluster's where a network process of its own (package vm)
// serves DHCP, DNS and the nodes' configs (root).
package qemu

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"net/url"
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

	ctr "github.com/talos-go/talos/internal/container"
	"github.com/talos-go/talos/internal/metal"
	"github.com/talos-go/talos/internal/partition"
	"github.com/talos-go/talos/internal/provision"
	"github.com/talos-go/talos/internal/provision/qemu/vm"
)

// Provisioner is the qemu provisioner.
type Provisioner struct{}

var _ provision.Provisioner = Provisioner{}

func init() { provision.Register(Provisioner{}) }

// Name is its --provisioner value.
func (Provisioner) Name() string { return provision.ProvisionerQEMU }

// Capabilities: VMs with their own kernel and disks on a bridge, the image's Kubernetes, and the
// network process answering DNS on the gateway.
func (Provisioner) Capabilities() provision.Capabilities {
	return provision.Capabilities{Bridge: true, OwnKernel: true, ImageKubernetes: true, GatewayDNS: true}
}

// DefaultCIDR is upstream's.
func (Provisioner) DefaultCIDR() string { return provision.DefaultContainerCIDR }

// Check refuses a request without root, QEMU or the boot assets, or with flags that contradict.
func (Provisioner) Check(r *provision.Request) error { return check(r) }

// Configure installs to the guests' disk, sends their logs to the network process with
// --with-json-logs, and makes the gateway their resolver when no --nameservers are given.
func (Provisioner) Configure(r *provision.Request) {
	// As upstream's qemu nodes: the guest's virtio disk.
	r.Generate.Options = append(slices.Clone(r.Generate.Options), generate.WithInstallDisk(provision.QEMUInstallDisk))

	if r.QEMU.JSONLogs {
		r.Patches = append(slices.Clone(r.Patches), jsonLogsPatch(r.NetworkCIDR()))
	}

	if len(r.Nameservers) == 0 {
		// The cluster's network process forwards DNS on the bridge (vm.NetworkSpec).
		r.Nameservers = []string{provision.Gateway(r.NetworkCIDR()).Addr().String()}
	}
}

// BasePatches are none.
func (Provisioner) BasePatches() []string { return nil }

// NodeIdentity gives each machine a UUID of its own, as upstream's qemu nodes, and names it
// after it with --with-uuid-hostnames.
func (Provisioner) NodeIdentity(r *provision.Request, name string) (string, string) {
	id := uuid.NewString()
	if r.QEMU.UUIDHostnames {
		name = "machine-" + id
	}

	return name, id
}

// CreateNetwork records the boot assets, finds whether KVM works, makes the bridge and starts
// the network process.
func (Provisioner) CreateNetwork(_ context.Context, c *provision.Cluster, r *provision.Request, progress io.Writer) error {
	return prepare(c, *r, progress)
}

// Launch starts the node's launcher (the node binary's qemu command), which runs QEMU.
func (Provisioner) Launch(c *provision.Cluster, n *provision.Node, r *provision.Request) error {
	return start(c, n, r)
}

// Started applies the configs of nodes that boot without one (a boot medium, --with-apply-config).
func (Provisioner) Started(ctx context.Context, c *provision.Cluster, r *provision.Request, progress io.Writer) error {
	q := r.QEMU
	if !r.SkipInjectingConfig && (q.ApplyConfig || q.ISO != "" || q.USB != "" || q.UKI != "" || q.IPXEBootScript != "" || q.DiskImage != "") {
		return applyConfigs(ctx, c, progress)
	}

	return nil
}

// StopServices stops the network process (after the nodes: a rebooting node asks it again).
func (Provisioner) StopServices(c *provision.Cluster, progress io.Writer) error {
	return stopNetwork(c, progress)
}

// DestroyNetwork removes the taps and the bridge.
func (Provisioner) DestroyNetwork(c *provision.Cluster, progress io.Writer) error {
	return c.RemoveNetwork(progress)
}

// Describe adds the bridge, its MTU, the boot assets, KVM and the config server, once recorded.
func (Provisioner) Describe(c *provision.Cluster, w io.Writer) {
	if c.Kernel == "" {
		return // the create failed before
	}

	fmt.Fprintf(w, "BRIDGE            %s\nMTU               %d\nKERNEL            %s\nINITRAMFS         %s\nKVM               %v\nCONFIGS           %s\n",
		c.Bridge, c.MTU, c.Kernel, c.Initrd, c.KVM, c.ConfigServer)
}

// geteuid is os.Geteuid, replaced in tests to check the refusal without root.
var geteuid = os.Geteuid

// jsonLogsPatch is the config patch that sends a node's logs to the network process.
func jsonLogsPatch(cidr netip.Prefix) string {
	return fmt.Sprintf(`{"machine": {"logging": {"destinations": [{"endpoint": "tcp://%s", "format": "json_lines"}]}}}`,
		netip.AddrPortFrom(provision.Gateway(cidr).Addr(), vm.JSONLogsPort))
}

func check(r *provision.Request) error {
	q, c := r.QEMU, r.Container

	switch {
	case geteuid() != 0:
		return errors.New("the qemu provisioner needs root (it makes a bridge and taps): run it as root, or use `--provisioner process`, which needs none")
	case !r.CIDR.Addr().Is4() || r.CIDR.Addr().IsLoopback():
		return fmt.Errorf("--cidr %s: the qemu provisioner needs an IPv4 network off loopback, like %s", r.CIDR, provision.DefaultContainerCIDR)
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
		if !slices.Contains(vm.DiskDrivers, d) {
			return fmt.Errorf("--extra-disks-drivers %q is not supported: use %s (the node's kernel carries their modules)", d, strings.Join(vm.DiskDrivers, ", "))
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
	case "", provision.ConfigInjectionHTTP:
	case provision.ConfigInjectionISO:
		if flag, medium := bootMedium(q); medium != "" || q.ApplyConfig {
			if medium == "" {
				flag = "--with-apply-config"
			}

			return fmt.Errorf("--config-injection-method %s gives the config at boot, %s applies it in maintenance mode: drop one", provision.ConfigInjectionISO, flag)
		}
	default:
		return fmt.Errorf("--config-injection-method %q is unknown: use %s (the default) or %s", q.ConfigInjection, provision.ConfigInjectionHTTP, provision.ConfigInjectionISO)
	}

	paths, err := bootPaths(q)
	if err != nil {
		return err
	}

	for flag, path := range paths {
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("%s: %w (build the boot assets with `make boot`)", flag, err)
		}
	}

	if !q.NoUEFI {
		if _, err := vm.FindUEFI(q.UEFISearchPaths); err != nil {
			return fmt.Errorf("--with-uefi: %w; or boot with the BIOS: --with-uefi=false", err)
		}
	}

	return nil
}

// bootPaths checks the first boot's medium (a kernel and initramfs, or one of --iso-path,
// --usb-path, --uki-path, --ipxe-boot-script and --disk-image-path) against the other flags,
// and names the files it needs by flag (none for an iPXE script, a URL).
func bootPaths(q provision.QEMURequest) (map[string]string, error) {
	paths := map[string]string{"--vmlinuz-path": q.Kernel, "--initrd-path": q.Initrd}
	if flag, medium := bootMedium(q); medium != "" {
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

// makeConfigISO writes an ISO 9660 image labelled metal-iso holding the config as config.yaml
// (Debian's xorriso).
func makeConfigISO(config, out string) error {
	cmd := exec.Command("xorriso", "-as", "mkisofs", "-quiet", "-V", metal.MetalISO, "-o", out, "-graft-points", "config.yaml="+config)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("--config-injection-method %s: making the node's ISO with xorriso (apt-get install xorriso): %w: %s", provision.ConfigInjectionISO, err, b)
	}

	return nil
}

// bootMedium is the first boot's medium, an ISO or a USB stick, and its flag ("" when the
// kernel boots directly).
func bootMedium(q provision.QEMURequest) (flag, path string) {
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

// macFor is a node's MAC: QEMU's prefix and the last three bytes of its IPv4 address, unique in
// the cluster and the same on every boot.
func macFor(addr netip.Addr) string {
	b := addr.As4()

	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", b[1], b[2], b[3])
}

// prepare records the boot assets, finds whether KVM works, and makes the network.
func prepare(c *provision.Cluster, req provision.Request, progress io.Writer) error {
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

	c.KVM = vm.KVMWorks(c.Kernel)
	fmt.Fprintf(progress, "QEMU with KVM: %v (without it the guests are emulated: slow)\n", c.KVM)

	return createNetwork(c, req, progress)
}

// createNetwork makes the bridge and starts the cluster's network process (DHCP and the
// configs over HTTP on the bridge's address).
func createNetwork(c *provision.Cluster, req provision.Request, progress io.Writer) error {
	gw := provision.Gateway(req.NetworkCIDR())

	spec, err := networkSpec(c, req, gw)
	if err != nil {
		return err
	}

	fmt.Fprintf(progress, "creating bridge %s (%s)\n", c.Bridge, gw)

	if err = ctr.CreateBridge(c.Bridge, gw, c.MTU); err != nil {
		return err
	}

	if req.IPv6 {
		gw6 := provision.Gateway(spec.IPv6)
		fmt.Fprintf(progress, "advertising %s on the bridge (%s): the nodes lease their IPv6 addresses over DHCPv6\n", spec.IPv6, gw6)

		if gw6 != gw {
			if err = ctr.AddAddress(c.Bridge, gw6); err != nil {
				return err
			}
		}
	}

	if req.NoIPv4 {
		fmt.Fprintf(progress, "IPv6-only: the nodes reach the cluster network only (no IPv4, no NAT for IPv6)\n")
	} else if err = provision.Masquerade(c.Bridge, req, progress); err != nil {
		return err
	}

	// The listener is made here so that its port is known for the nodes' kernel arguments.
	l, err := vm.ListenOnBridge(netip.AddrPortFrom(gw.Addr(), 0))
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
func networkSpec(c *provision.Cluster, req provision.Request, gw netip.Prefix) (vm.NetworkSpec, error) {
	cidr := req.CIDR

	// The MACs come from the IPv4 addresses, which an IPv6-only cluster has too (unused).
	addrs4, err := provision.NodeAddresses(cidr, len(c.Nodes))
	if err != nil {
		return vm.NetworkSpec{}, err
	}

	c.MTU, c.Bridge = req.Container.MTU, "br-"+provision.ShortHash(c.Dir, 12)

	spec := vm.NetworkSpec{Bridge: c.Bridge, Gateway: gw, NoHostname: req.QEMU.DisableDHCPHostname, IPXEBootScript: req.QEMU.IPXEBootScript}
	if req.QEMU.JSONLogs {
		spec.JSONLogs = filepath.Join(c.Dir, provision.JSONLogsFile)
	}

	if req.Encryption.UsesKMS() {
		spec.KMSKey = filepath.Join(c.Dir, provision.KMSKeyFile)
	}

	for _, ns := range req.Nameservers {
		if a, err := netip.ParseAddr(ns); err == nil {
			spec.Nameservers = append(spec.Nameservers, a)
		}
	}

	if req.IPv6 {
		spec.IPv6 = provision.CIDR6(cidr)
	}

	var addrs6 []netip.Addr
	if req.IPv6 {
		if addrs6, err = provision.NodeAddresses(spec.IPv6, len(c.Nodes)); err != nil {
			return vm.NetworkSpec{}, err
		}
	}

	for i := range c.Nodes {
		n := &c.Nodes[i]
		n.Tap, n.MAC = "tap"+provision.ShortHash(n.State, 11), macFor(addrs4[i])
		lease := vm.NodeLease{Name: n.Name, MAC: n.MAC, Address: addrs4[i], Config: n.Config}

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

// start starts a node's launcher, which runs QEMU on the boot assets.
func start(c *provision.Cluster, n *provision.Node, req *provision.Request) error {
	if err := os.MkdirAll(n.State, 0o700); err != nil {
		return err
	}

	cpus, mem := req.Container.CPUs, req.Container.MemoryMB
	if n.Type == provision.TypeWorker {
		cpus, mem = req.Container.CPUsWorkers, req.Container.MemoryWorker
	}

	cmdline := append([]string{}, metal.DefaultKernelArgs...)
	configISO := ""

	switch {
	case req.QEMU.ApplyConfig || c.ISO != "" || c.USB != "" || c.UKI != "" || req.QEMU.IPXEBootScript != "" || req.SkipInjectingConfig:
	case req.QEMU.ConfigInjection == provision.ConfigInjectionISO:
		configISO = filepath.Join(n.State, "config.iso")
		if err := makeConfigISO(n.Config, configISO); err != nil {
			return err
		}

		cmdline = append(cmdline, "talos.config="+metal.MetalISO)
	default:
		cmdline = append(cmdline, "talos.config="+c.ConfigServer+vm.ConfigPath(n.Name))
	}

	cmdline = append(cmdline, req.QEMU.ExtraKernelArgs...)

	// As upstream: the extra disks are the workers'.
	var extra []vm.Disk

	for i := range req.QEMU.ExtraDisks {
		if n.Type != provision.TypeWorker {
			break
		}

		driver := "virtio"
		if i < len(req.QEMU.ExtraDisksDrivers) {
			driver = req.QEMU.ExtraDisksDrivers[i]
		}

		extra = append(extra, vm.Disk{Path: filepath.Join(n.State, fmt.Sprintf("disk-%d.raw", i+1)), SizeMB: req.QEMU.ExtraDisksSizeMB, Driver: driver})
	}

	for i, disk := range req.QEMU.UserVolumes {
		extra = append(extra, vm.Disk{Path: filepath.Join(n.State, fmt.Sprintf("user-volumes-%d.raw", i+1)), SizeMB: provision.UserVolumeDiskMiB(disk), Driver: "virtio", Serial: provision.UserVolumeSerial(i)})
	}

	var uefi *vm.UEFI

	if !req.QEMU.NoUEFI {
		u, err := vm.FindUEFI(req.QEMU.UEFISearchPaths)
		if err != nil {
			return err
		}

		u.Vars = filepath.Join(n.State, "uefi-vars.fd")
		uefi = &u
	}

	spec := vm.NodeSpec{
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
func applyConfigs(ctx context.Context, c *provision.Cluster, progress io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()

	for _, n := range c.Nodes {
		cfg, err := os.ReadFile(n.Config)
		if err != nil {
			return err
		}

		if err = provision.Step(ctx, progress, "maintenance mode on "+n.Name+" to apply its config", func(ctx context.Context) error {
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

// stopNetwork stops the network process (after the nodes: a rebooting node asks it again).
func stopNetwork(c *provision.Cluster, progress io.Writer) error {
	fmt.Fprintf(progress, "stopping DHCP and the config server\n")

	return provision.StopProcess("the network process", c.NetworkPID, c.Dir, 10*time.Second)
}

func httpURL(s string) bool {
	u, err := url.Parse(s)

	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}
