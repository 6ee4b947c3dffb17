package provision

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/talos-go/talos/internal/configpatch"
)

// Request describes a cluster to create.
type Request struct {
	Name          string
	ControlPlanes int
	Workers       int
	CIDR          netip.Prefix
	StateRoot     string   // clusters are kept in StateRoot/Name
	Binary        string   // the multi-call node binary
	NodeArgs      []string // extra machined arguments, before the per-node ones
	InputDir      string   // use controlplane.yaml, worker.yaml and talosconfig from here
	Patches       []string // --config-patch: every node
	CPPatches     []string // --config-patch-control-plane
	WorkerPatches []string // --config-patch-worker
	// Nameservers are the nodes' resolvers (machine.network.nameservers) in container mode.
	Nameservers []string
	Progress    io.Writer

	// Endpoint, when set, is the talosconfig's only endpoint and a SAN of the nodes' certificates
	// (--endpoint: a load balancer or name in front of the control planes); InitNodeAsEndpoint
	// makes the first control plane the only one. Otherwise every control plane is one.
	Endpoint           string
	InitNodeAsEndpoint bool
	// SkipInjectingConfig starts the nodes without their configs (maintenance mode) and writes
	// the cluster's configs (controlplane.yaml, worker.yaml, talosconfig) to ConfigsDir instead,
	// for the user to apply (upstream's --skip-injecting-config).
	SkipInjectingConfig bool
	ConfigsDir          string
	// NoMasqueradeCIDRs are the networks the nodes reach with their own addresses (not the
	// host's) from a container or qemu cluster's network (--no-masquerade-cidrs).
	NoMasqueradeCIDRs []netip.Prefix
	// WireguardCIDR, when valid, links the nodes with WireGuard (--wireguard-cidr): each gets a
	// link wg0 with an address in it, the others as peers.
	WireguardCIDR netip.Prefix
	// CustomCNIURL is --custom-cni-url: the cluster's CNI is the manifest at that URL
	// (cluster.network.cni custom), which the control planes fetch and apply.
	CustomCNIURL string
	// Encryption is --encrypt-state, --encrypt-ephemeral and --disk-encryption-key-types
	// (qemu): LUKS2 on the installed disk's partitions.
	Encryption EncryptionRequest
	// KubeSpan is --with-kubespan: machine.network.kubespan enabled on every node (qemu).
	KubeSpan bool
	// IPv6 is --ipv6: the cluster network is dual-stack (qemu): an IPv6 network advertised on
	// the bridge, derived from CIDR as upstream's (CIDR6), the nodes' addresses in it leased over
	// DHCPv6, and Kubernetes' pod and service subnets dual-stack. NoIPv4 is --ipv4=false: with
	// --ipv6, the cluster is IPv6-only (CIDR only names the IPv6 network).
	IPv6, NoIPv4 bool
	// Firewall is --with-firewall: the nodes' ingress firewall's default action (accept or
	// block) with the rules the cluster needs; "" for none.
	Firewall string
	// WithInitNode makes the first control plane an init node (machine.type init), which
	// bootstraps etcd itself: create asks no bootstrap (upstream's legacy --with-init-node).
	WithInitNode bool

	Provisioner string // ProvisionerProcess (default), ProvisionerContainer or ProvisionerQEMU
	// Arch is the nodes' architecture (--arch): the node binary, image and boot assets are
	// built for this machine's, so only it is accepted.
	Arch      string
	Container ContainerRequest
	QEMU      QEMURequest

	// WithRegistry is --with-registry (container): an image registry with TLS and basic auth
	// on the cluster network's gateway (port RegistryPort), started with the cluster and
	// stopped with it; the nodes' configs trust it and mirror every registry through it.
	WithRegistry bool

	// NoClusterDiscovery is --with-cluster-discovery=false: the configs turn discovery off and
	// no discovery service is started. DiscoveryEndpoint is --discovery-endpoint: the nodes use
	// that service and none is started. Otherwise create starts one for the cluster (see
	// startDiscovery), which the configs name unless they name another.
	NoClusterDiscovery bool
	DiscoveryEndpoint  string

	// Generate are the choices made when the configs are generated (not with InputDir).
	Generate GenerateOptions
}

// GenerateOptions are `cluster create`'s config choices, as upstream's flags make them.
type GenerateOptions struct {
	// KubernetesVersion without its v (default: the version the node image carries).
	KubernetesVersion string
	// TalosVersion is the config's version contract, e.g. v1.10 (default: the current one).
	TalosVersion string
	// ControlPlanePort is the API server's port in the cluster endpoint (default 6443).
	ControlPlanePort int
	// Options are more generate options (DNS domain, KubePrism port, discovery...).
	Options []generate.Option
}

// talosEndpoints are the talosconfig's endpoints, as upstream's: --endpoint, or the first
// control plane with --init-node-as-endpoint, or every control plane (talosctl balances).
func (r Request) talosEndpoints(controlPlanes []netip.Addr) []string {
	switch {
	case r.Endpoint != "":
		return []string{r.Endpoint}
	case r.InitNodeAsEndpoint:
		return []string{controlPlanes[0].String()}
	}

	eps := make([]string, 0, len(controlPlanes))
	for _, a := range controlPlanes {
		eps = append(eps, a.String())
	}

	return eps
}

// NetworkCIDR is the network the nodes' addresses are in: CIDR, or its IPv6 network (CIDR6) in
// an IPv6-only cluster.
func (r Request) NetworkCIDR() netip.Prefix {
	if r.NoIPv4 {
		return CIDR6(r.CIDR)
	}

	return r.CIDR
}

func (r *Request) check(caps Capabilities) error {
	switch {
	case r.Name == "":
		return errors.New("--name must not be empty")
	case r.ControlPlanes < 1:
		return errors.New("--controlplanes must be at least 1")
	case r.Workers < 0:
		return errors.New("--workers must not be negative")
	case !r.CIDR.IsValid():
		return errors.New("--cidr is not a valid prefix: use one like 127.5.0.0/24")
	case r.Binary == "":
		return errors.New("no node binary: build it with `go build -o _out/machined ./cmd/machined`")
	case r.Arch != "" && r.Arch != runtime.GOARCH:
		return fmt.Errorf("--arch %s: the nodes run this machine's builds (node binary, image, boot assets), which are %s: use --arch %s", r.Arch, runtime.GOARCH, runtime.GOARCH)
	case !caps.OwnKernel && (r.QEMU.UUIDHostnames || r.QEMU.TPM != "" || r.QEMU.IOMMU):
		return errors.New("--with-uuid-hostnames, --with-tpm2, --with-tpm1_2 and --with-iommu are the qemu provisioner's (its VMs' UUID, TPM and IOMMU): use --provisioner qemu")
	case !caps.OwnKernel && r.QEMU.UseVIP:
		return errors.New("--use-vip: the nodes hold the VIP on their own network cards, which only the qemu provisioner's have (container and process nodes do not run machine.network): use --provisioner qemu")
	case r.QEMU.UseVIP && r.CIDR.Bits() > 26:
		return fmt.Errorf("--use-vip takes the network's 50th address for the VIP: --cidr %s is too small, give a /26 or larger", r.CIDR)
	case r.WithRegistry && !caps.Registry:
		return errors.New("--with-registry starts a registry on a container cluster's bridge: use --provisioner container")
	case !caps.Registry && r.Container.dockerFlagsUsed() != "":
		return fmt.Errorf("%s is the container provisioner's (upstream's docker flags): use --provisioner container", r.Container.dockerFlagsUsed())
	case r.WireguardCIDR.IsValid() && !caps.OwnKernel:
		return errors.New("--wireguard-cidr: the WireGuard links are made by nodes on their own kernel: use --provisioner qemu")
	case r.WireguardCIDR.IsValid() && r.WireguardCIDR.Bits() > 32-bitsFor(r.ControlPlanes+r.Workers+2):
		return fmt.Errorf("--wireguard-cidr %s has too few addresses for %d nodes: give a larger network", r.WireguardCIDR, r.ControlPlanes+r.Workers)
	case r.DiscoveryEndpoint != "" && !httpURL(r.DiscoveryEndpoint):
		return fmt.Errorf("--discovery-endpoint %q: give the service's URL, http://host:port/ (plain gRPC) or https://host:port/ (TLS)", r.DiscoveryEndpoint)
	case r.DiscoveryEndpoint != "" && r.NoClusterDiscovery:
		return errors.New("--discovery-endpoint names a discovery service, and --with-cluster-discovery=false turns discovery off: drop one")
	case r.CustomCNIURL != "" && !httpURL(r.CustomCNIURL):
		return fmt.Errorf("--custom-cni-url %q: give the manifest's http:// or https:// URL", r.CustomCNIURL)
	case r.NoIPv4 && !r.IPv6:
		return errors.New("--ipv4=false without --ipv6 leaves the cluster no network: add --ipv6")
	case r.NoIPv4 && (r.QEMU.UseVIP || r.WireguardCIDR.IsValid() || r.Firewall != ""):
		return errors.New("--ipv4=false: --use-vip, --wireguard-cidr and --with-firewall make IPv4 addresses and rules: leave them out of an IPv6-only cluster, or keep IPv4")
	case r.IPv6 && !caps.OwnKernel:
		return errors.New("--ipv6: the IPv6 network is advertised on a qemu cluster's bridge: use --provisioner qemu")
	case r.KubeSpan && !caps.OwnKernel:
		return errors.New("--with-kubespan: KubeSpan's WireGuard link is made by nodes on their own kernel: use --provisioner qemu")
	case r.Firewall != "" && r.Firewall != FirewallAccept && r.Firewall != FirewallBlock:
		return fmt.Errorf("--with-firewall %q: give %s or %s (the default action of the nodes' ingress firewall)", r.Firewall, FirewallAccept, FirewallBlock)
	case len(r.NoMasqueradeCIDRs) > 0 && !caps.Bridge:
		return errors.New("--no-masquerade-cidrs: process nodes use this machine's addresses, there is no cluster network to masquerade: use --provisioner container or qemu")
	case r.Firewall != "" && !caps.Bridge:
		return errors.New("--with-firewall: process nodes share this machine's network, which their firewall would filter: use --provisioner container or qemu")
	case len(r.QEMU.UserVolumes) > 0 && !caps.OwnKernel:
		return errors.New("--user-volumes: the volumes are partitions of the nodes' own disks: use --provisioner qemu")
	case r.Encryption.UserVolumes && len(r.QEMU.UserVolumes) == 0:
		return errors.New("--encrypt-user-volumes encrypts the volumes of --user-volumes, and none is given")
	case r.Encryption.check(caps.OwnKernel, r.QEMU.TPM) != nil:
		return r.Encryption.check(caps.OwnKernel, r.QEMU.TPM)
	case r.QEMU.JSONLogs && !caps.OwnKernel:
		return errors.New("--with-json-logs: the receiver is the qemu provisioner's network process: use --provisioner qemu, or send the logs to a receiver of yours with a machine.logging config patch")
	}

	return nil
}

// bitsFor is the host bits n addresses need.
func bitsFor(n int) int {
	bits := 0
	for 1<<bits < n {
		bits++
	}

	return bits
}

func httpURL(s string) bool {
	u, err := url.Parse(s)

	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// Configs are a cluster's machine configs and client config.
type Configs struct {
	ControlPlane []byte
	Worker       []byte
	Talosconfig  *clientconfig.Config
}

// GenerateConfigs makes configs as `talosctl gen config` does, or reads them from inputDir.
func GenerateConfigs(name string, endpoint netip.Addr, inputDir string, opts GenerateOptions) (*Configs, error) {
	if inputDir != "" {
		cp, err := os.ReadFile(filepath.Join(inputDir, "controlplane.yaml"))
		if err != nil {
			return nil, fmt.Errorf("--input-dir: %w", err)
		}

		w, err := os.ReadFile(filepath.Join(inputDir, "worker.yaml"))
		if err != nil {
			return nil, fmt.Errorf("--input-dir: %w", err)
		}

		// clientconfig.Open takes a missing file for an empty config: look first.
		tcPath := filepath.Join(inputDir, "talosconfig")
		if _, err = os.Stat(tcPath); err != nil {
			return nil, fmt.Errorf("--input-dir: %w (it needs controlplane.yaml, worker.yaml and talosconfig, as `talosctl gen config` writes them)", err)
		}

		tc, err := clientconfig.Open(tcPath)
		if err != nil {
			return nil, fmt.Errorf("--input-dir: %w", err)
		}

		return &Configs{ControlPlane: cp, Worker: w, Talosconfig: tc}, nil
	}

	version := cmp.Or(opts.KubernetesVersion, constants.DefaultKubernetesVersion)
	genOpts := slices.Clone(opts.Options)

	if opts.TalosVersion != "" {
		contract, err := config.ParseContractFromVersion(opts.TalosVersion)
		if err != nil {
			return nil, fmt.Errorf("--talos-version %q: %w (give a version like v1.10)", opts.TalosVersion, err)
		}

		genOpts = append(genOpts, generate.WithVersionContract(contract))
	}

	port := cmp.Or(opts.ControlPlanePort, constants.DefaultControlPlanePort)

	in, err := generate.NewInput(name, fmt.Sprintf("https://%s", netip.AddrPortFrom(endpoint, uint16(port))), version, genOpts...)
	if err != nil {
		return nil, fmt.Errorf("generating secrets: %w", err)
	}

	out := &Configs{}

	for _, t := range []struct {
		typ machine.Type
		dst *[]byte
	}{{machine.TypeControlPlane, &out.ControlPlane}, {machine.TypeWorker, &out.Worker}} {
		cfg, err := in.Config(t.typ)
		if err != nil {
			return nil, fmt.Errorf("generating %s config: %w", t.typ, err)
		}

		if *t.dst, err = cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled)); err != nil {
			return nil, err
		}
	}

	if out.Talosconfig, err = in.Talosconfig(); err != nil {
		return nil, fmt.Errorf("generating talosconfig: %w", err)
	}

	return out, nil
}

// patch applies config patches (strategic merge or JSON patch, "@file" reads a file).
func patch(cfg []byte, patches ...[]string) ([]byte, error) {
	var all []string
	for _, p := range patches {
		all = append(all, p...)
	}

	if len(all) == 0 {
		return cfg, nil
	}

	loaded, err := configpatcher.LoadPatches(all)
	if err != nil {
		return nil, fmt.Errorf("loading config patches: %w", err)
	}

	out, err := configpatch.Apply(configpatcher.WithBytes(cfg), loaded)
	if err != nil {
		return nil, fmt.Errorf("applying config patches: %w", err)
	}

	return out.Bytes()
}

// defaultTimeServer names the cluster's gateway as the node's time server when its config names
// none: the network process serves NTP there, so the node keeps time (and etcd starts) without
// the internet, instead of waiting for time.cloudflare.com. Servers the user named stay.
func defaultTimeServer(cfg []byte, gw netip.Addr) ([]byte, error) {
	loaded, err := configloader.NewFromBytes(cfg)
	if err != nil {
		return nil, err
	}

	if loaded.Machine() == nil || len(loaded.Machine().Time().Servers()) > 0 {
		return cfg, nil
	}

	return patch(cfg, []string{fmt.Sprintf(`{"machine": {"time": {"servers": [%q]}}}`, gw)})
}

// Create writes the configs and starts every node; it does not wait for health (see Wait).
func Create(ctx context.Context, req Request) (*Cluster, *Configs, error) {
	p, err := Lookup(req.Provisioner)
	if err != nil {
		return nil, nil, err
	}

	if err = req.check(p.Capabilities()); err == nil {
		err = p.Check(&req)
	}

	if err != nil {
		return nil, nil, err
	}

	progress := req.Progress
	if progress == nil {
		progress = io.Discard
		req.Progress = progress
	}

	dir := filepath.Join(req.StateRoot, req.Name)
	if _, err = os.Stat(stateFile(dir)); err == nil {
		return nil, nil, fmt.Errorf("cluster %q already exists in %s: destroy it first with `talosctl cluster destroy --name %s`", req.Name, dir, req.Name)
	}

	addrs, err := NodeAddresses(req.NetworkCIDR(), req.ControlPlanes+req.Workers)
	if err != nil {
		return nil, nil, err
	}

	if req.SkipInjectingConfig {
		if err = req.checkConfigsDir(); err != nil {
			return nil, nil, err
		}
	}

	// The discovery service's port is taken before anything is made: a port in use is refused
	// at once, and the configs name the port the kernel picked.
	var discoveryLn *net.TCPListener
	if !req.NoClusterDiscovery && req.DiscoveryEndpoint == "" {
		if discoveryLn, err = listenDiscovery(req.discoveryAddr(p.Capabilities())); err != nil {
			return nil, nil, err
		}

		req.DiscoveryEndpoint = discoveryEndpoint(discoveryLn.Addr())

		defer discoveryLn.Close() // startDiscovery closes it too; until then, a failure lets it go
	}

	if err = os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("creating %s: %w", dir, err)
	}

	c := &Cluster{Name: req.Name, Dir: dir, CIDR: req.NetworkCIDR().String(), Binary: req.Binary, Provisioner: req.Provisioner}

	cfgs, err := c.writeNodeConfigs(p, &req, addrs)
	if err != nil {
		return nil, nil, err
	}

	if discoveryLn != nil {
		c.Discovery = &DiscoveryService{Endpoint: req.DiscoveryEndpoint}
	}

	if err = c.Save(); err != nil {
		return nil, nil, err
	}

	// From here on a failure leaves a cluster to destroy.
	if err = p.CreateNetwork(ctx, c, &req, progress); err == nil && c.Registry != nil {
		err = c.startRegistry(netip.MustParseAddrPort(c.Registry.Host), progress)
	}

	if err == nil && discoveryLn != nil {
		err = c.startDiscovery(discoveryLn, progress)
	}

	if err != nil {
		return c, cfgs, errors.Join(err, c.Save())
	}

	if err = c.Save(); err != nil {
		return c, cfgs, err
	}

	for i := range c.Nodes {
		fmt.Fprintf(progress, "creating node %s (%s) at %s\n", c.Nodes[i].Name, c.Nodes[i].Type, c.Nodes[i].Address)

		if err = p.Launch(c, &c.Nodes[i], &req); err != nil {
			return c, cfgs, err
		}

		if err = c.Save(); err != nil {
			return c, cfgs, err
		}
	}

	return c, cfgs, p.Started(ctx, c, &req, progress)
}

// writeNodeConfigs generates the cluster's configs with the request's patches and writes each
// node's own (its hostname and the kind's defaults added), recording the nodes in c.
func (c *Cluster) writeNodeConfigs(p Provisioner, req *Request, addrs []netip.Addr) (*Configs, error) {
	progress := req.Progress

	fmt.Fprintf(progress, "generating PKI and tokens\n")

	endpoint := req.addPatches(p, addrs)

	cfgs, err := GenerateConfigs(req.Name, endpoint, req.InputDir, req.Generate)
	if err != nil {
		return nil, err
	}

	if ctxCfg := cfgs.Talosconfig.Contexts[cfgs.Talosconfig.Context]; ctxCfg != nil {
		ctxCfg.Endpoints = req.talosEndpoints(addrs[:req.ControlPlanes])
		ctxCfg.Nodes = []string{addrs[0].String()}
	}

	if req.SkipInjectingConfig {
		fmt.Fprintf(progress, "writing the configs to %s\n", req.ConfigsDir)

		if err = req.writeConfigs(cfgs); err != nil {
			return nil, err
		}
	}

	if req.WithRegistry {
		var regPatch string
		if c.Registry, regPatch, err = registryFiles(c.Dir, netip.AddrPortFrom(Gateway(req.NetworkCIDR()).Addr(), RegistryPort)); err != nil {
			return nil, err
		}

		req.Patches = append(slices.Clone(req.Patches), regPatch)
	}

	var wireguard []string
	if req.WireguardCIDR.IsValid() {
		if wireguard, err = wireguardPatches(req.WireguardCIDR, addrs, req.ControlPlanes); err != nil {
			return nil, err
		}
	}

	caps := p.Capabilities()

	for i, addr := range addrs {
		typ, index, base, extra := TypeControlPlane, i+1, cfgs.ControlPlane, req.CPPatches
		if i >= req.ControlPlanes {
			typ, index, base, extra = TypeWorker, i-req.ControlPlanes+1, cfgs.Worker, req.WorkerPatches
		}

		name, id := p.NodeIdentity(req, fmt.Sprintf("%s-%s-%d", req.Name, typ, index))

		own := []string{fmt.Sprintf(`{"machine": {"network": {"hostname": %q}}}`, name)}
		if req.WithInitNode && i == 0 {
			typ = TypeInit
			own = append(own, `{"machine": {"type": "init"}}`)
		}
		if wireguard != nil {
			own = append(own, wireguard[i])
		}
		if req.Workers == 0 {
			// No workers: pods go on the control planes, which are otherwise tainted NoSchedule.
			own = append(own, `{"cluster": {"allowSchedulingOnControlPlanes": true}}`)
		}
		if caps.Bridge && len(req.Nameservers) > 0 {
			ns, _ := json.Marshal(req.Nameservers) // a []string always encodes
			own = append(own, fmt.Sprintf(`{"machine": {"network": {"nameservers": %s}}}`, ns))
		}

		nodeCfg, err := patch(base, p.BasePatches(), req.Patches, extra, own)
		if err != nil {
			return nil, err
		}

		if nodeCfg, err = defaultDiscoveryEndpoint(nodeCfg, req.DiscoveryEndpoint); err != nil {
			return nil, err
		}

		if caps.OwnKernel {
			if nodeCfg, err = defaultTimeServer(nodeCfg, Gateway(req.NetworkCIDR()).Addr()); err != nil {
				return nil, err
			}
		}

		node := Node{Name: name, Type: typ, Address: addr.String(), State: filepath.Join(c.Dir, name), Config: filepath.Join(c.Dir, name+".yaml"), UUID: id}

		if err = os.WriteFile(node.Config, nodeCfg, 0o600); err != nil {
			return nil, err
		}

		c.Nodes = append(c.Nodes, node)
	}

	return cfgs, nil
}

// addPatches adds the generate options and patches the request's flags and the kind ask for,
// and returns the Kubernetes endpoint's address.
func (r *Request) addPatches(p Provisioner, addrs []netip.Addr) netip.Addr {
	if r.NoClusterDiscovery {
		r.Generate.Options = append(slices.Clone(r.Generate.Options), generate.WithClusterDiscovery(false))
	}

	p.Configure(r)

	if r.Endpoint != "" {
		r.Generate.Options = append(slices.Clone(r.Generate.Options), generate.WithAdditionalSubjectAltNames([]string{r.Endpoint}))
	}

	endpoint := addrs[0]
	if r.QEMU.UseVIP {
		endpoint = vipAddress(r.CIDR)
		r.CPPatches = append(slices.Clone(r.CPPatches), vipPatch(endpoint))
		fmt.Fprintf(r.Progress, "the Kubernetes endpoint is the control planes' VIP %s\n", endpoint)
	}

	if r.CustomCNIURL != "" {
		u, _ := json.Marshal(r.CustomCNIURL) // a string always encodes
		r.Patches = append(slices.Clone(r.Patches), fmt.Sprintf(`{"cluster": {"network": {"cni": {"name": "custom", "urls": [%s]}}}}`, u))
	}

	if r.Firewall != "" {
		cp, worker := firewallPatches(r.Firewall, r.CIDR, addrs[:r.ControlPlanes], r.KubeSpan)
		r.CPPatches = append(slices.Clone(r.CPPatches), cp)
		r.WorkerPatches = append(slices.Clone(r.WorkerPatches), worker)
	}

	if r.Encryption.State || r.Encryption.Ephemeral {
		r.Patches = append(slices.Clone(r.Patches), r.Encryption.patch(r.NetworkCIDR()))
	}

	if r.KubeSpan {
		r.Patches = append(slices.Clone(r.Patches), `{"machine": {"network": {"kubespan": {"enabled": true}}}}`)
	}

	switch {
	case r.NoIPv4:
		r.Patches = append(slices.Clone(r.Patches), fmt.Sprintf(`{"cluster": {"network": {"podSubnets": [%q], "serviceSubnets": [%q]}}}`,
			constants.DefaultIPv6PodNet, constants.DefaultIPv6ServiceNet))
	case r.IPv6:
		// Upstream's dual-stack defaults.
		r.Patches = append(slices.Clone(r.Patches), fmt.Sprintf(`{"cluster": {"network": {"podSubnets": [%q, %q], "serviceSubnets": [%q, %q]}}}`,
			constants.DefaultIPv4PodNet, constants.DefaultIPv6PodNet, constants.DefaultIPv4ServiceNet, constants.DefaultIPv6ServiceNet))
	}

	if r.IPv6 {
		// As upstream's qemu nodes: DHCP on the virtio link, for each family the network has.
		r.Patches = append(slices.Clone(r.Patches), fmt.Sprintf(
			`{"machine": {"network": {"interfaces": [{"deviceSelector": {"driver": "virtio_net"}, "dhcp": true, "dhcpOptions": {"ipv4": %t, "ipv6": true}}]}}}`, !r.NoIPv4))
	}

	if len(r.QEMU.UserVolumes) > 0 {
		r.Patches = append(slices.Clone(r.Patches), userVolumesPatch(r.QEMU.UserVolumes, r.Encryption.UserVolumes, r.Encryption, kmsEndpoint(r.NetworkCIDR())))
	}

	return endpoint
}

// configFiles are --skip-injecting-config's files, as `talosctl gen config` names them.
var configFiles = []string{"controlplane.yaml", "worker.yaml", "talosconfig"}

// checkConfigsDir refuses to write over files a user has there.
func (r *Request) checkConfigsDir() error {
	for _, name := range configFiles {
		if _, err := os.Stat(filepath.Join(r.ConfigsDir, name)); err == nil {
			return fmt.Errorf("--skip-injecting-config writes %s to %s, where one is already: move it, or run the command in another folder", name, r.ConfigsDir)
		}
	}

	return nil
}

// writeConfigs writes the cluster's configs, with the patches for every node and for its type
// applied (not the per-node hostname), and its talosconfig, to ConfigsDir.
func (r *Request) writeConfigs(cfgs *Configs) error {
	cp, err := patch(cfgs.ControlPlane, r.Patches, r.CPPatches)
	if err == nil {
		cp, err = defaultDiscoveryEndpoint(cp, r.DiscoveryEndpoint)
	}

	if err != nil {
		return err
	}

	w, err := patch(cfgs.Worker, r.Patches, r.WorkerPatches)
	if err == nil {
		w, err = defaultDiscoveryEndpoint(w, r.DiscoveryEndpoint)
	}

	if err != nil {
		return err
	}

	for name, data := range map[string][]byte{configFiles[0]: cp, configFiles[1]: w} {
		if err = os.WriteFile(filepath.Join(r.ConfigsDir, name), data, 0o600); err != nil {
			return err
		}
	}

	return cfgs.Talosconfig.Save(filepath.Join(r.ConfigsDir, configFiles[2]))
}

// StartDetached starts the node binary with args in its own session, output appended to the
// cluster folder's logName, the extra files (if any) as its fds 3, 4, ...
func (c *Cluster) StartDetached(logName string, extra []*os.File, args ...string) (int, error) {
	out, err := os.OpenFile(filepath.Join(c.Dir, logName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer out.Close()

	cmd := exec.Command(c.Binary, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}

	cmd.ExtraFiles = extra

	if err = cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting %s: %w", strings.Join(args[:1], " "), err)
	}

	// Reap the child if the CLI lives long enough (tests); otherwise init adopts it.
	go cmd.Wait() //nolint:errcheck // only reaps; the processes report their own state

	return cmd.Process.Pid, nil
}

// Destroy stops every node cleanly and removes the cluster's folder.
func Destroy(root, name string, progress io.Writer) error {
	c, err := Load(root, name)
	if err != nil {
		return err
	}

	p, err := Lookup(c.Provisioner)
	if err != nil {
		return err
	}

	var errs []error

	// Workers first, then control planes, so etcd members go last.
	for i := len(c.Nodes) - 1; i >= 0; i-- {
		n := c.Nodes[i]
		fmt.Fprintf(progress, "destroying node %s\n", n.Name)

		if err = n.Stop(30 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}

	if len(errs) > 0 {
		return fmt.Errorf("some nodes did not stop, state kept in %s: %w", c.Dir, errors.Join(errs...))
	}

	if err = p.StopServices(c, progress); err != nil {
		return fmt.Errorf("%w (state kept in %s: destroy again)", err, c.Dir)
	}

	if c.Discovery != nil && c.Discovery.PID != 0 {
		fmt.Fprintf(progress, "stopping the discovery service\n")

		if err = StopProcess("the discovery service", c.Discovery.PID, c.Dir, 10*time.Second); err != nil {
			return fmt.Errorf("%w (state kept in %s: destroy again)", err, c.Dir)
		}
	}

	if c.Registry != nil && c.Registry.PID != 0 {
		fmt.Fprintf(progress, "stopping the registry\n")

		if err = StopProcess("the registry", c.Registry.PID, c.Dir, 10*time.Second); err != nil {
			return fmt.Errorf("%w (state kept in %s: destroy again)", err, c.Dir)
		}
	}

	if err = p.DestroyNetwork(c, progress); err != nil {
		return fmt.Errorf("%w (state kept in %s: destroy again)", err, c.Dir)
	}

	if err = os.RemoveAll(c.Dir); err != nil {
		return fmt.Errorf("removing %s: %w", c.Dir, err)
	}

	return nil
}
