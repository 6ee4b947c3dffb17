package talosctl

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/spf13/cobra"

	"github.com/talos-go/talos/internal/container"
	"github.com/talos-go/talos/internal/images"
	"github.com/talos-go/talos/internal/provision"
	_ "github.com/talos-go/talos/internal/provision/providers" // the kinds of node
)

func clusterCmd(g *Global) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "A collection of commands for managing local clusters",
	}

	var (
		name, state string
		provisioner string
	)

	cmd.PersistentFlags().StringVar(&name, "name", "talos-default", "the name of the cluster")
	cmd.PersistentFlags().StringVar(&state, "state", "", "directory path to store cluster state (default ~/.talos/clusters)")

	root := func() (string, error) {
		if state != "" {
			return state, nil
		}

		return provision.DefaultStateRoot()
	}

	cmd.PersistentFlags().StringVar(&provisioner, "provisioner", provision.ProvisionerProcess, "Talos cluster provisioner to use: process (no root), container (root: namespaces, a bridge, the node image) or qemu (root: VMs booting the metal boot assets on a bridge)")

	cmd.AddCommand(clusterCreateCmd(g, &name, &provisioner, root), clusterDestroyCmd(&name, &provisioner, root), clusterShowCmd(&name, &provisioner, root))

	return cmd
}

// nodeBinary finds the multi-call node binary: the flag, then next to talosctl, then PATH.
func nodeBinary(flag string) (string, error) {
	if flag != "" {
		return filepath.Abs(flag)
	}

	if self, err := os.Executable(); err == nil {
		candidate := filepath.Join(filepath.Dir(self), "machined")
		if _, err := os.Stat(candidate); err == nil {
			return candidate, nil
		}
	}

	if p, err := exec.LookPath("machined"); err == nil {
		return filepath.Abs(p)
	}

	return "", errors.New("node binary `machined` not found next to talosctl or on PATH: build it with `go build -o _out/ ./cmd/...` or pass --machined-path")
}

// createOptions are `cluster create`'s flags.
type createOptions struct {
	req             provision.Request
	cidr            string
	binary          string
	wait            bool
	waitTimeout     time.Duration
	skipKubeconfig  bool
	imageKeys       string
	installImage    string
	withDebug       bool
	waitOpts        provision.WaitOptions
	k8sVersion      string
	dnsDomain       string
	kubePrismPort   int
	cpPort          int
	talosVersion    string
	mirrors         []string
	insecure        []string
	discovery       bool
	kubeSpan        bool
	ipv4            bool
	extraKernelArgs string
	tpm2, tpm12     bool
	mounts          []string
	noMasquerade    []string
	wireguardCIDR   string
	userVolumes     []string
	certLifetime    time.Duration

	// Whether --cidr and --nameservers were given: the provisioner's defaults apply otherwise.
	cidrSet, nameserversSet bool
}

func clusterCreateCmd(g *Global, name, provisionerFlag *string, root func() (string, error)) *cobra.Command {
	var o createOptions

	cmd := &cobra.Command{
		Use:   "create",
		Short: "Creates a local cluster: machined processes on loopback addresses (process), nodes in their own namespaces on a bridge (container, root), or VMs on a bridge (qemu, root)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.cidrSet, o.nameserversSet = cmd.Flags().Changed("cidr"), cmd.Flags().Changed("nameservers")

			return createCluster(cmd, g, *name, *provisionerFlag, root, &o)
		},
	}

	req := &o.req
	f := cmd.Flags()
	f.IntVar(&req.ControlPlanes, "controlplanes", 1, "the number of control plane nodes to create")
	f.IntVar(&req.Workers, "workers", 1, "the number of worker nodes to create")
	f.StringVar(&o.cidr, "cidr", "127.5.0.0/24", "CIDR of the cluster network: nodes get .2, .3, ... (default 10.5.0.0/24 for --provisioner container or qemu)")
	f.StringSliceVar(&req.Nameservers, "nameservers", []string{"8.8.8.8", "1.1.1.1", "2001:4860:4860::8888", "2606:4700:4700::1111"}, "list of nameservers to use (--provisioner container or qemu; qemu's default: the bridge's address, where the cluster's network process forwards DNS to the host's resolvers)")
	f.StringArrayVar(&req.Patches, "config-patch", nil, "patch generated machineconfigs (applied to all node types), use @file to read a patch from file")
	f.StringArrayVar(&req.CPPatches, "config-patch-control-plane", nil, "patch generated machineconfigs (applied to 'init' and 'controlplane' types)")
	f.StringArrayVar(&req.WorkerPatches, "config-patch-worker", nil, "patch generated machineconfigs (applied to 'worker' type)")
	f.StringVarP(&req.InputDir, "input-dir", "i", "", "location of pre-generated config files")
	f.StringVar(&o.k8sVersion, "kubernetes-version", constants.DefaultKubernetesVersion, "desired kubernetes version to run (--provisioner container: the version the node image carries)")
	f.StringVar(&o.talosVersion, "talos-version", "", "the desired Talos version to generate config for (default: the current one)")
	f.StringVar(&o.dnsDomain, "dns-domain", "cluster.local", "the dns domain to use for cluster")
	f.IntVar(&o.kubePrismPort, "kubeprism-port", constants.DefaultKubePrismPort, "KubePrism port (set to 0 to disable)")
	f.IntVar(&o.cpPort, "control-plane-port", constants.DefaultControlPlanePort, "control plane port (load balancer and local API port)")
	f.BoolVar(&o.waitOpts.SkipNodeReadiness, "skip-k8s-node-readiness-check", false, "skip k8s node readiness checks")
	f.BoolVar(&o.discovery, "with-cluster-discovery", true, "enable cluster discovery (a discovery service is started for the cluster, on the cluster network's gateway, port 3000, or a free port of the gateway's loopback address for process clusters; stopped with the cluster, its log discovery.log in the cluster's folder)")
	f.StringVar(&req.DiscoveryEndpoint, "discovery-endpoint", "", "use the discovery service at this URL instead of starting one for the cluster: http://host:port/ (plain gRPC) or https://host:port/ (TLS), e.g. https://discovery.talos.dev/")
	f.BoolVar(&o.ipv4, "ipv4", true, "enable IPv4 network in the cluster (false with --ipv6: an IPv6-only cluster)")
	f.BoolVar(&req.IPv6, "ipv6", false, "enable IPv6 network in the cluster (qemu: the IPv6 network derived from --cidr is advertised on the bridge, the nodes lease addresses in it over DHCPv6)")
	f.BoolVar(&o.kubeSpan, "with-kubespan", false, "enable KubeSpan system (qemu: a WireGuard mesh between the nodes, its peers found through discovery)")
	f.StringSliceVar(&o.mirrors, "registry-mirror", nil, "list of registry mirrors to use in format: <registry host>=<mirror URL>")
	f.StringSliceVar(&o.insecure, "registry-insecure-skip-verify", nil, "list of registry hostnames to skip TLS verification for")
	f.BoolVar(&req.WithRegistry, "with-registry", false, "start an image registry (TLS, basic auth) on the cluster network's gateway, port 5000, stopped with the cluster; the nodes trust it and mirror every registry through it (container; its CA, user and password are in the cluster's folder, registry/)")
	f.BoolVar(&o.wait, "wait", true, "wait for the cluster to be ready before returning")
	f.DurationVar(&o.waitTimeout, "wait-timeout", 20*time.Minute, "timeout to wait for the cluster to be ready")
	f.BoolVar(&o.skipKubeconfig, "skip-kubeconfig", false, "skip merging kubeconfig from the created cluster")
	f.StringVar(&o.imageKeys, "image-keys", "", "public key (from `imager keygen`) the nodes trust for upgrade images")
	f.StringVar(&o.binary, "machined-path", "", "the node binary (default: machined next to talosctl, else on PATH)")
	// Hidden: tests that watch certificate rotation shorten the nodes' certificates (machined's
	// own hidden --cert-lifetime).
	f.DurationVar(&o.certLifetime, "cert-lifetime", 0, "lifetime of the nodes' certificates, e.g. 10s (process nodes); 0: a day")
	_ = f.MarkHidden("cert-lifetime")
	f.StringVar(&req.QEMU.Kernel, "vmlinuz-path", "_out/boot/vmlinuz", "the kernel of the boot assets (`make boot`) for --provisioner qemu")
	f.StringVar(&req.QEMU.Initrd, "initrd-path", "_out/boot/initramfs.img", "the initramfs of the boot assets (`make boot`) for --provisioner qemu")
	f.Var(negatedBool{&req.QEMU.NoBootloader}, "with-bootloader", "enable bootloader to load kernel and initramfs from disk image after install (qemu; false: the kernel is booted directly on every start)")
	f.Lookup("with-bootloader").NoOptDefVal = "true"
	f.Var(negatedBool{&req.QEMU.NoUEFI}, "with-uefi", "enable UEFI on x86_64 architecture (qemu; Debian's OVMF; false: the BIOS)")
	f.Lookup("with-uefi").NoOptDefVal = "true"
	f.StringSliceVar(&req.QEMU.UEFISearchPaths, "extra-uefi-search-paths", nil, "additional search paths for UEFI firmware (only applies when UEFI is enabled) (qemu)")
	f.StringVar(&req.Arch, "arch", runtime.GOARCH, "cluster architecture")
	f.StringVar(&req.Endpoint, "endpoint", "", "use endpoint instead of provider defaults")
	f.BoolVar(&req.InitNodeAsEndpoint, "init-node-as-endpoint", false, "use init node as endpoint instead of any load balancer endpoint")
	f.StringVar(&o.wireguardCIDR, "wireguard-cidr", "", "CIDR of the wireguard network (qemu: each node gets wg0 with an address in it, the other nodes as peers)")
	f.StringSliceVar(&o.noMasquerade, "no-masquerade-cidrs", nil, "list of CIDRs to exclude from NAT (container, qemu: the nodes reach them with their own addresses)")
	f.StringVar(&req.CustomCNIURL, "custom-cni-url", "", "install custom CNI from the URL (the control planes fetch and apply its manifest; flannel is not deployed)")
	f.StringVar(&req.Firewall, "with-firewall", "", "enable firewall with the specified default action (accept, block) and the rules the cluster needs (container, qemu)")
	f.BoolVar(&req.SkipInjectingConfig, "skip-injecting-config", false, "skip injecting config from embedded metadata server, write config files only (the nodes boot in maintenance mode; the configs go to the current folder)")
	f.BoolVar(&req.WithInitNode, "with-init-node", false, "create the cluster with an init node (machine.type init: it bootstraps etcd itself)")
	f.BoolVar(&req.QEMU.JSONLogs, "with-json-logs", false, "enable JSON logs receiver and configure Talos to send logs there (qemu: json-logs.log in the cluster's folder)")
	f.BoolVar(&o.withDebug, "with-debug", false, "enable debug in Talos config to send service logs to the console")
	f.StringVar(&o.installImage, "install-image", defaultInstallerImage(), "the installer image to use (machine.install.image of the configs; a metal node installs the system it booted)")
	f.StringVar(&req.QEMU.ConfigInjection, "config-injection-method", "", "a method to inject machine config: default is HTTP server, 'metal-iso' to mount an ISO (QEMU only)")
	f.StringVar(&req.QEMU.USB, "usb-path", "", "the USB stick image path to use for the initial boot (`make boot`'s hybrid ISO is one; the configs are applied in maintenance mode) (qemu)")
	f.StringVar(&req.QEMU.IPXEBootScript, "ipxe-boot-script", "", "iPXE boot script (URL) to use: the nodes boot from the network first, the cluster's DHCP giving iPXE the URL; the configs are applied in maintenance mode (qemu, with --with-uefi=false)")
	f.StringVar(&req.QEMU.UKI, "uki-path", "", "the UKI image path to use for the initial boot (`make boot`'s _out/boot/metal-amd64-uki.efi, UEFI; the configs are applied in maintenance mode) (qemu)")
	f.StringVar(&req.QEMU.DiskImage, "disk-image-path", "", "disk image to use (`make boot`'s _out/boot/metal-amd64.raw: each node's disk starts as a copy of it, grown to --disk, and boots into maintenance mode, where the configs are applied) (qemu)")
	f.StringVar(&req.QEMU.ISO, "iso-path", "", "the ISO path to use for the initial boot (`make boot`'s _out/boot/metal-amd64.iso; the configs are applied in maintenance mode) (qemu)")
	f.Int64Var(&req.QEMU.DiskMB, "disk", 6*1024, "default limit on disk size in MB (each VM) (qemu)")
	f.IntVar(&req.QEMU.DiskBlockSize, "disk-block-size", 512, "disk block size (qemu: 512, or 4096 with UEFI)")
	f.StringVar(&o.extraKernelArgs, "extra-boot-kernel-args", "", "add extra kernel args to the initial boot from vmlinuz and initramfs (qemu)")
	f.BoolVar(&req.QEMU.Preallocate, "disk-preallocate", true, "whether disk space should be preallocated (qemu)")
	f.IntVar(&req.QEMU.ExtraDisks, "extra-disks", 0, "number of extra disks to create for each worker VM (qemu)")
	f.Int64Var(&req.QEMU.ExtraDisksSizeMB, "extra-disks-size", 5*1024, "default limit on disk size in MB (each VM) (qemu)")
	f.StringSliceVar(&req.QEMU.ExtraDisksDrivers, "extra-disks-drivers", nil, "driver for each extra disk (virtio, scsi, nvme) (qemu)")
	f.BoolVar(&req.QEMU.BadRTC, "bad-rtc", false, "launch VM with bad RTC state: two years behind (qemu)")
	f.BoolVar(&req.QEMU.DisableDHCPHostname, "disable-dhcp-hostname", false, "skip announcing hostname via DHCP (qemu)")
	f.BoolVar(&req.QEMU.UUIDHostnames, "with-uuid-hostnames", false, "use machine UUIDs as default hostnames (QEMU only)")
	f.BoolVar(&o.tpm2, "with-tpm2", false, "enable TPM 2.0 emulation support using swtpm (qemu)")
	f.BoolVar(&o.tpm12, "with-tpm1_2", false, "enable TPM 1.2 emulation support using swtpm (qemu)")
	f.BoolVar(&req.QEMU.UseVIP, "use-vip", false, "use a virtual IP for the controlplane endpoint instead of the loadbalancer endpoint (qemu: the network's 50th address, held by the control plane etcd elects)")
	f.BoolVar(&req.Encryption.State, "encrypt-state", false, "enable state partition encryption (qemu: LUKS2, a VolumeConfig per volume)")
	f.BoolVar(&req.Encryption.Ephemeral, "encrypt-ephemeral", false, "enable ephemeral partition encryption (qemu: LUKS2, its keys locked to STATE)")
	f.BoolVar(&req.Encryption.UserVolumes, "encrypt-user-volumes", false, "enable user volumes encryption (qemu: LUKS2, the --disk-encryption-key-types keys)")
	f.StringSliceVar(&o.userVolumes, "user-volumes", nil, "list of user volumes to create for each VM in format: <name1>:<size1>:<name2>:<size2> (qemu: each value is one more disk of every node, the volumes partitions of it mounted at /var/mnt/<name>)")
	f.StringSliceVar(&req.Encryption.KeyTypes, "disk-encryption-key-types", []string{provision.KeyTypeUUID}, "encryption key types to use for disk encryption (uuid, kms, tpm) (qemu: kms keys are sealed by a KMS on the cluster network's gateway, port 4050; tpm keys by each node's TPM, with --with-tpm2)")
	f.BoolVar(&req.QEMU.IOMMU, "with-iommu", false, "enable IOMMU support: an Intel IOMMU on the q35 machine (qemu)")
	f.BoolVar(&req.QEMU.ApplyConfig, "with-apply-config", false, "enable apply config when the VM is starting in maintenance mode (qemu)")
	f.StringVar(&req.Container.Image, "image", "_out/rootfs.sqsh", "the node image (squashfs from `make rootfs`) for --provisioner container")
	f.StringArrayVar(&o.mounts, "mount", nil, "attach a mount to the container (container: type=bind,source=<host path>,target=<node path>[,readonly], or type=tmpfs,target=<node path>)")
	f.StringVarP(&req.Container.ExposedPorts, "exposed-ports", "p", "", "comma-separated list of ports/protocols to expose on init node. Ex -p <hostPort>:<containerPort>/<protocol (tcp or udp)> (container)")
	f.StringVar(&req.Container.HostIP, "docker-host-ip", "0.0.0.0", "host IP to forward exposed ports to (container)")
	f.BoolVar(&req.Container.DisableIPv6, "docker-disable-ipv6", false, "skip enabling IPv6 in containers (container)")
	f.IntVar(&req.Container.MTU, "mtu", 1500, "MTU of the cluster network (container, qemu)")
	f.Float64Var(&req.Container.CPUs, "cpus", 2.0, "the share of CPUs as fraction (each control plane) (container; qemu: the guest's CPUs, rounded up)")
	f.Float64Var(&req.Container.CPUsWorkers, "cpus-workers", 2.0, "the share of CPUs as fraction (each worker) (container; qemu: the guest's CPUs, rounded up)")
	f.Int64Var(&req.Container.MemoryMB, "memory", 2048, "the limit on memory usage in MB (each control plane) (container; qemu: the guest's memory)")
	f.Int64Var(&req.Container.MemoryWorker, "memory-workers", 2048, "the limit on memory usage in MB (each worker) (container; qemu: the guest's memory)")

	return cmd
}

// createCluster makes the cluster the flags describe, then bootstraps it, or waits for it to be
// healthy and merges its kubeconfig.
func createCluster(cmd *cobra.Command, g *Global, name, provisioner string, root func() (string, error), o *createOptions) error {
	req, err := o.request(name, provisioner, root)
	if err != nil {
		return err
	}

	req.Progress = cmd.OutOrStdout()
	start := time.Now()

	c, cfgs, err := provision.Create(cmd.Context(), req)
	if err != nil {
		if c != nil {
			return fmt.Errorf("%w\nclean up with `talosctl cluster destroy --name %s`", err, name)
		}

		return err
	}

	if err = mergeClusterContext(g, cfgs, c, cmd); err != nil {
		return err
	}

	if req.SkipInjectingConfig {
		fmt.Fprintf(cmd.OutOrStdout(), "the nodes boot in maintenance mode, without a config; the configs are in %s (controlplane.yaml, worker.yaml, talosconfig), each node's own in %s:\n"+
			"apply them with `talosctl apply-config --insecure -n %s --file controlplane.yaml`, then `talosctl -n %s bootstrap`\n",
			req.ConfigsDir, c.Dir, c.Nodes[0].Address, c.Nodes[0].Address)

		return nil
	}

	ctx, cancel := context.WithTimeout(cmd.Context(), o.waitTimeout)
	defer cancel()

	if !o.wait {
		// As upstream: etcd is bootstrapped even when the rest is not waited for.
		if _, err = provision.Bootstrap(ctx, c, cfgs.Talosconfig, cmd.OutOrStdout()); err != nil {
			return fmt.Errorf("%w\nthe nodes keep running: bootstrap later with `talosctl -n %s bootstrap`, or remove them with `talosctl cluster destroy --name %s`", err, c.Nodes[0].Address, name)
		}

		fmt.Fprintf(cmd.OutOrStdout(), "nodes started and etcd bootstrapped; follow them with `talosctl cluster show --name %s` and `talosctl health`\n", name)

		return nil
	}

	kubeconfig, err := provision.Wait(ctx, c, cfgs.Talosconfig, cmd.OutOrStdout(), o.waitOpts)
	if err != nil {
		return fmt.Errorf("%w\nthe nodes keep running: inspect with `talosctl cluster show --name %s`, remove with `talosctl cluster destroy --name %s`", err, name, name)
	}

	fmt.Fprintf(cmd.OutOrStdout(), "cluster %q is healthy (%s)\n", name, time.Since(start).Round(10*time.Millisecond))

	// As upstream: the cluster's admin kubeconfig is merged into the default one.
	if kubeconfig == nil || o.skipKubeconfig {
		return nil
	}

	path, err := kubeconfigPath(nil)
	if err != nil {
		return err
	}

	if err = mergeKubeconfigFile(path, kubeconfig, "", false, cmd.OutOrStdout()); err != nil {
		return fmt.Errorf("merging the kubeconfig into %s: %w (get it later with `talosctl kubeconfig`)", path, err)
	}

	fmt.Fprintf(cmd.OutOrStdout(), "merged the kubeconfig of cluster %q into %s\n", name, path)

	return nil
}

// request turns the flags into the cluster's request, the provisioner's defaults filling what
// was not given.
func (o *createOptions) request(name, provisioner string, root func() (string, error)) (provision.Request, error) {
	req := o.req
	req.Provisioner = provisioner

	p, err := provision.Lookup(provisioner)
	if err != nil {
		return req, err
	}

	caps := p.Capabilities()

	cidr := o.cidr
	if !o.cidrSet {
		cidr = p.DefaultCIDR()
	}

	if caps.GatewayDNS && !o.nameserversSet {
		// The cluster's network process answers DNS on the bridge (forwarding to the host's
		// resolvers): the nodes resolve through it, online or not.
		req.Nameservers = nil
	}

	prefix, err := netip.ParsePrefix(cidr)
	if err != nil {
		return req, fmt.Errorf("--cidr %q: %w (use a prefix like 127.5.0.0/24)", cidr, err)
	}

	if req.Generate, err = generateOptions(caps.ImageKubernetes, o.k8sVersion, o.dnsDomain, o.kubePrismPort, o.cpPort); err != nil {
		return req, err
	}

	req.Generate.TalosVersion = o.talosVersion

	req.NoIPv4 = !o.ipv4

	if req.KubeSpan = o.kubeSpan; o.kubeSpan && !o.discovery {
		return req, errors.New("--with-kubespan: the nodes find their KubeSpan peers through cluster discovery: drop --with-cluster-discovery=false")
	}
	// Without discovery, the configs turn it off and no discovery service is started.
	req.NoClusterDiscovery = !o.discovery
	req.Generate.Options = append(req.Generate.Options, generate.WithInstallImage(o.installImage), generate.WithDebug(o.withDebug))

	if req.Generate.Options, err = registryOptions(req.Generate.Options, o.mirrors, o.insecure); err != nil {
		return req, err
	}

	if req.StateRoot, err = root(); err != nil {
		return req, err
	}

	if req.Binary, err = nodeBinary(o.binary); err != nil {
		return req, err
	}

	req.Name, req.CIDR = name, prefix
	if req.SkipInjectingConfig {
		// As upstream's: the configs go to the current folder.
		if req.ConfigsDir, err = os.Getwd(); err != nil {
			return req, err
		}
	}
	req.QEMU.ExtraKernelArgs = strings.Fields(o.extraKernelArgs)

	if err = o.networkFlags(&req); err != nil {
		return req, err
	}

	switch {
	case o.tpm2 && o.tpm12:
		return req, errors.New("--with-tpm2 and --with-tpm1_2 both give the nodes a TPM: choose one version")
	case o.tpm2:
		req.QEMU.TPM = provision.TPM2
	case o.tpm12:
		req.QEMU.TPM = provision.TPM12
	}

	return req, o.nodeArgs(&req, caps)
}

// networkFlags parses --wireguard-cidr, --user-volumes, --no-masquerade-cidrs and --mount.
func (o *createOptions) networkFlags(req *provision.Request) error {
	var err error

	if o.wireguardCIDR != "" {
		if req.WireguardCIDR, err = netip.ParsePrefix(o.wireguardCIDR); err != nil || !req.WireguardCIDR.Addr().Is4() {
			return fmt.Errorf("--wireguard-cidr %q: give an IPv4 network like 172.20.1.0/24", o.wireguardCIDR)
		}
	}

	if req.QEMU.UserVolumes, err = provision.ParseUserVolumes(o.userVolumes); err != nil {
		return err
	}

	req.NoMasqueradeCIDRs = nil

	for _, c := range o.noMasquerade {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fmt.Errorf("--no-masquerade-cidrs %q: %w (give networks like 10.0.0.0/8)", c, err)
		}

		req.NoMasqueradeCIDRs = append(req.NoMasqueradeCIDRs, p)
	}

	req.Container.Mounts = nil

	for _, m := range o.mounts {
		parsed, err := container.ParseMount(m)
		if err != nil {
			return err
		}

		req.Container.Mounts = append(req.Container.Mounts, parsed)
	}

	return nil
}

// nodeArgs are the machined arguments of process nodes: --image-keys and --cert-lifetime.
func (o *createOptions) nodeArgs(req *provision.Request, caps provision.Capabilities) error {
	// Process nodes start through the boot stage (A/B slots), as the firmware would boot
	// them; container nodes boot their image.
	req.NodeArgs = []string{"boot"}
	if o.imageKeys != "" {
		keys, err := filepath.Abs(o.imageKeys)
		if err != nil {
			return err
		}

		req.NodeArgs = append(req.NodeArgs, "--image-keys", keys)
	}

	switch {
	case o.certLifetime < 0:
		return fmt.Errorf("--cert-lifetime %s is negative: give a duration like 10s", o.certLifetime)
	case o.certLifetime > 0 && !caps.MachinedArgs:
		return errors.New("--cert-lifetime applies to process nodes only (--provisioner process)")
	case o.certLifetime > 0:
		req.NodeArgs = append(req.NodeArgs, "--cert-lifetime", o.certLifetime.String())
	}

	return nil
}

// generateOptions are the config choices of the create flags. A Kubernetes version other than
// the node image's is refused for nodes that run their image's (imageKubernetes): they pull no
// images.
func generateOptions(imageKubernetes bool, k8sVersion, dnsDomain string, kubePrismPort, cpPort int) (provision.GenerateOptions, error) {
	k8sVersion = strings.TrimPrefix(k8sVersion, "v")

	if carried := strings.TrimPrefix(images.KubernetesVersion, "v"); imageKubernetes && k8sVersion != carried {
		return provision.GenerateOptions{}, fmt.Errorf("--kubernetes-version %s: the node image carries Kubernetes %s, and nodes pull no images: use %s", k8sVersion, carried, carried)
	}

	if cpPort < 1 || cpPort > 65535 {
		return provision.GenerateOptions{}, fmt.Errorf("--control-plane-port %d: give a TCP port (1-65535)", cpPort)
	}

	opts := []generate.Option{generate.WithDNSDomain(dnsDomain), generate.WithLocalAPIServerPort(cpPort)}

	// Port 0 turns KubePrism off, as upstream's flag does.
	if kubePrismPort != constants.DefaultKubePrismPort {
		opts = append(opts, generate.WithKubePrismPort(kubePrismPort))
	}

	return provision.GenerateOptions{KubernetesVersion: k8sVersion, ControlPlanePort: cpPort, Options: opts}, nil
}

// registryOptions adds --registry-mirror and --registry-insecure-skip-verify to opts.
func registryOptions(opts []generate.Option, mirrors, insecure []string) ([]generate.Option, error) {
	for _, m := range mirrors {
		host, endpoint, ok := strings.Cut(m, "=")
		if !ok || host == "" || endpoint == "" {
			return nil, fmt.Errorf("--registry-mirror %q: give it as <registry host>=<mirror URL>, e.g. docker.io=http://10.5.0.1:5000", m)
		}

		if u, err := url.Parse(endpoint); err != nil || u.Scheme == "" || u.Host == "" {
			return nil, fmt.Errorf("--registry-mirror %q: the mirror %q is not a URL like http://10.5.0.1:5000", m, endpoint)
		}

		opts = append(opts, generate.WithRegistryMirror(host, endpoint))
	}

	for _, host := range insecure {
		opts = append(opts, generate.WithRegistryInsecureSkipVerify(host))
	}

	return opts, nil
}

// mergeClusterContext saves the cluster's talosconfig beside its state and merges its context
// into the user's client config.
func mergeClusterContext(g *Global, cfgs *provision.Configs, c *provision.Cluster, cmd *cobra.Command) error {
	if err := cfgs.Talosconfig.Save(filepath.Join(c.Dir, "talosconfig")); err != nil {
		return fmt.Errorf("saving cluster talosconfig: %w", err)
	}

	cfg, path, err := loadConfig(g.Talosconfig, true)
	if err != nil {
		return err
	}

	for _, r := range mergeConfig(cfg, cfgs.Talosconfig, false) {
		fmt.Fprintf(cmd.OutOrStdout(), "renamed talosconfig context %s\n", r.String())
	}

	if err = saveConfig(cfg, path); err != nil {
		return err
	}

	fmt.Fprintf(cmd.OutOrStdout(), "merged context %q into %s\n", cfg.Context, path)

	return nil
}

func clusterDestroyCmd(name, provisioner *string, root func() (string, error)) *cobra.Command {
	var (
		force                bool
		logsPath, supportDir string
	)

	cmd := &cobra.Command{
		Use:   "destroy",
		Short: "Destroys a local cluster: stops its nodes and removes their state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loadCluster(cmd, *name, *provisioner, root)
			if err != nil {
				return err
			}

			if supportDir != "" {
				saveSupport(cmd, c, supportDir)
			}

			if logsPath != "" {
				if err = saveClusterLogs(c, logsPath); err != nil {
					return fmt.Errorf("--save-cluster-logs-archive-path: %w (nothing was destroyed)", err)
				}

				fmt.Fprintf(cmd.OutOrStdout(), "saved the cluster logs to %s\n", logsPath)
			}

			err = provision.Destroy(filepath.Dir(c.Dir), *name, cmd.OutOrStdout())
			if err != nil && force {
				fmt.Fprintf(cmd.ErrOrStderr(), "destroy failed: %v; --force: removing %s\n", err, c.Dir)

				return os.RemoveAll(c.Dir)
			}

			return err
		},
	}

	f := cmd.Flags()
	f.BoolVarP(&force, "force", "f", false, "force deletion of cluster directory if there were errors")
	f.StringVar(&logsPath, "save-cluster-logs-archive-path", "", "save cluster logs archive to the specified file on destroy")
	f.StringVar(&supportDir, "save-support-archive-path", "", "save support archive to the specified file on destroy")

	return cmd
}

// loadCluster loads the named cluster and checks it was made by --provisioner when that is set.
func loadCluster(cmd *cobra.Command, name, provisioner string, root func() (string, error)) (*provision.Cluster, error) {
	r, err := root()
	if err != nil {
		return nil, err
	}

	c, err := provision.Load(r, name)
	if err != nil {
		return nil, err
	}

	p, err := provision.Lookup(c.Provisioner)
	if err != nil {
		return nil, err
	}

	prov := p.Name()
	if cmd.Flags().Changed("provisioner") && provisioner != prov {
		return nil, fmt.Errorf("cluster %q was created by --provisioner %s, not %s: drop --provisioner or name that one", name, prov, provisioner)
	}

	c.Provisioner = prov

	return c, nil
}

// saveClusterLogs writes the cluster's node logs (the *.log files of its state folder) into a
// tar.gz archive.
func saveClusterLogs(c *provision.Cluster, path string) error {
	logs, err := filepath.Glob(filepath.Join(c.Dir, "*.log"))
	if err != nil {
		return err
	}

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()

	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)

	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err != nil {
			return err
		}

		if err = tw.WriteHeader(&tar.Header{Name: filepath.Base(l), Mode: 0o644, Size: int64(len(data)), ModTime: time.Now()}); err != nil {
			return err
		}

		if _, err = tw.Write(data); err != nil {
			return err
		}
	}

	if err = tw.Close(); err != nil {
		return err
	}

	if err = gz.Close(); err != nil {
		return err
	}

	return f.Close()
}

// saveSupport collects a support archive from the cluster's nodes with its own talosconfig; a
// failure is reported and does not stop the destroy.
func saveSupport(cmd *cobra.Command, c *provision.Cluster, path string) {
	g := &Global{Talosconfig: filepath.Join(c.Dir, "talosconfig")}

	for _, n := range c.Nodes {
		if n.IsControlPlane() && len(g.Endpoints) == 0 {
			g.Endpoints = []string{n.Address}
		}

		g.Nodes = append(g.Nodes, n.Address)
	}

	s, err := g.connect(cmd.Context())
	if err == nil {
		err = collectSupport(cmd.Context(), s, path, 4, false, cmd.ErrOrStderr())
		s.c.Close()
	}

	if err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "support archive: %v (destroying anyway)\n", err)
	}
}

func clusterShowCmd(name, provisioner *string, root func() (string, error)) *cobra.Command {
	return &cobra.Command{
		Use:   "show",
		Short: "Shows info about a local cluster",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := loadCluster(cmd, *name, *provisioner, root)
			if err != nil {
				return err
			}

			w := cmd.OutOrStdout()
			prov := c.Provisioner

			fmt.Fprintf(w, "PROVISIONER       %s\nNAME              %s\nNETWORK CIDR      %s\n", prov, c.Name, c.CIDR)

			p, err := provision.Lookup(prov)
			if err != nil {
				return err
			}

			p.Describe(c, w)

			if c.Discovery != nil {
				fmt.Fprintf(w, "DISCOVERY         %s\n", c.Discovery.Endpoint)
			}

			fmt.Fprintf(w, "STATE             %s\n\nNODES:\n\n", c.Dir)

			tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
			fmt.Fprintln(tw, "NAME\tTYPE\tIP\tPID\tSTATE")

			for _, n := range c.Nodes {
				st := "stopped"
				if n.Running() {
					st = "running"
				}

				ips := n.Address
				if n.Address6 != "" {
					ips += "," + n.Address6 // dual-stack (--ipv6)
				}

				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", n.Name, n.Type, ips, n.PID, st)
			}

			return tw.Flush()
		},
	}
}

// negatedBool is a flag whose value is the opposite of the field it sets (default true when
// the field is false).
type negatedBool struct{ p *bool }

func (b negatedBool) String() string {
	if b.p == nil {
		return "true"
	}

	return strconv.FormatBool(!*b.p)
}

func (b negatedBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}

	*b.p = !v

	return nil
}

func (b negatedBool) Type() string { return "bool" }
