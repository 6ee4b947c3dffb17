package network

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/siderolabs/gen/optional"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/talos-go/talos/internal/machined/hostdns"
)

// Where the node's resolv.conf files are, under its root, as upstream: /system/etc/resolv.conf
// is bound over /etc/resolv.conf at boot (so it is rewritten in place, never replaced), and
// kubelet gives /system/resolved/resolv.conf to the pods with dnsPolicy Default (CoreDNS).
const (
	HostResolvConf = "/system/etc/resolv.conf"
	PodResolvConf  = constants.PodResolvConfPath
)

// defaultNameservers are upstream's resolvers for a node whose config names none.
var defaultNameservers = []string{"1.1.1.1", "8.8.8.8"}

// Nameservers are the node's resolvers: the config's machine.network.nameservers, or
// upstream's defaults when it names none (or the node has no config yet). CoreDNS forwards to
// them (through the host DNS when it runs) and refuses to start without any.
func Nameservers(c talosconfig.Config) []string {
	if c != nil && c.Machine() != nil {
		if ns := c.Machine().Network().Resolvers(); len(ns) > 0 {
			return ns
		}
	}

	return defaultNameservers
}

// SearchDomains are the config's machine.network.searchDomains: the search line of the node's
// and the pods' resolv.conf, as upstream writes them (kubelet adds the pods' to every pod's).
// An empty entry or one with a space would break the line: those are returned as bad.
func SearchDomains(c talosconfig.Config) (search, bad []string) {
	if c == nil || c.Machine() == nil {
		return nil, nil
	}

	for _, d := range c.Machine().Network().SearchDomains() {
		if d == "" || strings.ContainsFunc(d, unicode.IsSpace) {
			bad = append(bad, d)

			continue
		}

		search = append(search, d)
	}

	return search, bad
}

// hostDNSListen is where the host DNS answers the node's own lookups.
var hostDNSListen = netip.MustParseAddrPort("127.0.0.53:53")

// ResolverController runs the node's name resolution in the container and metal modes, as
// upstream's resolver and host DNS controllers do: the resolvers (ResolverStatus) are the
// config's machine.network.nameservers, else the DHCP leases' (DHCP4Controller's resolver
// specs), else upstream's defaults; with
// machine.features.hostDNS.enabled the host DNS cache listens on 127.0.0.53 and the node's
// resolv.conf points at it, and with forwardKubeDNSToHost it also listens on 169.254.116.108
// (an address on lo) and the pods' resolv.conf points there, so CoreDNS forwards through it;
// with resolveMemberNames it answers for the cluster members' hostnames and node names
// (cluster.Member, from discovery) with their addresses.
// A node that shares the host's network (process mode) runs ResolverStatusController instead.
type ResolverController struct {
	// Root is the node's root: the resolv.conf files are under it.
	Root string
	// Log is where the host DNS logs (`talosctl logs dns-resolve-cache`); nil: the
	// controller's logger.
	Log *zap.Logger
	// Platform are the platform's name servers (nocloud's network-config), under the config's
	// and the DHCP leases'.
	Platform []netip.Addr

	resolver  *hostdns.Resolver
	listeners map[netip.AddrPort]*hostdns.Listener
}

// Name implements controller.Controller.
func (ctrl *ResolverController) Name() string { return "network.ResolverController" }

// Inputs implements controller.Controller.
func (ctrl *ResolverController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak},
		{Namespace: network.NamespaceName, Type: network.ResolverSpecType, Kind: controller.InputWeak}, // DHCP's
		{Namespace: cluster.NamespaceName, Type: cluster.MemberType, Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *ResolverController) Outputs() []controller.Output {
	return []controller.Output{
		{Type: network.ResolverStatusType, Kind: controller.OutputExclusive},
		{Type: network.HostDNSConfigType, Kind: controller.OutputExclusive},
		{Type: network.DNSUpstreamType, Kind: controller.OutputExclusive},
		{Type: network.DNSResolveCacheType, Kind: controller.OutputExclusive},
	}
}

// Run implements controller.Controller.
func (ctrl *ResolverController) Run(ctx context.Context, r controller.Runtime, logger *zap.Logger) error {
	log := ctrl.Log
	if log == nil {
		log = logger
	}

	ctrl.resolver = hostdns.NewResolver(log)
	ctrl.listeners = map[netip.AddrPort]*hostdns.Listener{}

	defer ctrl.closeListeners(nil)

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		cfg, err := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID)
		if err != nil && !state.IsNotFoundError(err) {
			return fmt.Errorf("reading machine config: %w", err)
		}

		var c talosconfig.Config
		if cfg != nil {
			c = cfg.Config()
		}

		leased, err := leasedNameservers(ctx, r)
		if err != nil {
			return err
		}

		if err = ctrl.reconcile(ctx, r, log, c, leased); err != nil {
			return err
		}

		r.ResetRestartBackoff()
	}
}

// hostDNS is what the config asks of the host DNS.
type hostDNS struct {
	enabled, forward, members bool
}

func hostDNSOf(c talosconfig.Config) hostDNS {
	if c == nil || c.Machine() == nil {
		return hostDNS{}
	}

	h := c.Machine().Features().HostDNS()

	return hostDNS{enabled: h.Enabled(), forward: h.Enabled() && h.ForwardKubeDNSToHost(), members: h.Enabled() && h.ResolveMemberNames()}
}

// leasedNameservers are the name servers of the DHCP leases (the operator layer's resolver
// specs), in the specs' order.
func leasedNameservers(ctx context.Context, r controller.Reader) ([]netip.Addr, error) {
	specs, err := safe.ReaderListAll[*network.ResolverSpec](ctx, r)
	if err != nil {
		return nil, fmt.Errorf("listing resolver specs: %w", err)
	}

	var out []netip.Addr

	for spec := range specs.All() {
		if spec.TypedSpec().ConfigLayer == network.ConfigOperator {
			for _, a := range spec.TypedSpec().DNSServers {
				if !slices.Contains(out, a) {
					out = append(out, a)
				}
			}
		}
	}

	return out, nil
}

// clusterMembers are the members discovery found, by hostname and node name.
func clusterMembers(ctx context.Context, r controller.Reader) ([]hostdns.Member, error) {
	list, err := safe.ReaderListAll[*cluster.Member](ctx, r)
	if err != nil {
		return nil, fmt.Errorf("listing cluster members: %w", err)
	}

	out := make([]hostdns.Member, 0, list.Len())

	for m := range list.All() {
		out = append(out, hostdns.Member{Names: []string{m.TypedSpec().Hostname, m.Metadata().ID()}, Addresses: m.TypedSpec().Addresses})
	}

	return out, nil
}

// reconcile runs the resolvers: the config's, else the DHCP leases' (leased), else the
// platform's, else upstream's defaults.
func (ctrl *ResolverController) reconcile(ctx context.Context, r controller.Runtime, log *zap.Logger, c talosconfig.Config, leased []netip.Addr) error {
	var servers []netip.Addr

	for _, s := range Nameservers(c) {
		if a, err := netip.ParseAddr(s); err == nil {
			servers = append(servers, a)
		}
	}

	// Under the config's: the leases', else the platform's (nocloud's network-config).
	if c == nil || c.Machine() == nil || len(c.Machine().Network().Resolvers()) == 0 {
		switch {
		case len(leased) > 0:
			servers = leased
		case len(ctrl.Platform) > 0:
			servers = ctrl.Platform
		}
	}

	want := hostDNSOf(c)
	serviceAddr := netip.MustParseAddr(constants.HostDNSAddress)

	listen := []netip.AddrPort{}
	if want.enabled {
		listen = append(listen, hostDNSListen)
	}

	if want.forward {
		if err := addLoopbackAddress(serviceAddr); err != nil {
			return fmt.Errorf("adding the host DNS address %s to lo: %w", serviceAddr, err)
		}

		listen = append(listen, netip.AddrPortFrom(serviceAddr, 53))
	}

	upstreams := make([]netip.AddrPort, 0, len(servers))
	for _, s := range servers {
		upstreams = append(upstreams, netip.AddrPortFrom(s, 53))
	}

	active := ctrl.resolver.SetUpstreams(upstreams)

	var members []hostdns.Member

	if want.members {
		var err error
		if members, err = clusterMembers(ctx, r); err != nil {
			return err
		}
	}

	ctrl.resolver.SetMembers(members)

	if err := ctrl.listen(listen, log); err != nil {
		return err
	}

	search, bad := SearchDomains(c)
	if len(bad) > 0 {
		log.Warn("machine.network.searchDomains: skipping entries that are not domain names (empty or with spaces)", zap.Strings("skipped", bad))
	}

	if err := ctrl.writeResources(ctx, r, servers, search, want, listen, active, serviceAddr); err != nil {
		return err
	}

	host, pods := resolvConfText(servers, search), resolvConfText(servers, search)
	if want.enabled {
		host = resolvConfText([]netip.Addr{hostDNSListen.Addr()}, search)
	}

	if want.forward {
		pods = resolvConfText([]netip.Addr{serviceAddr}, search)
	}

	if err := writeInPlace(filepath.Join(ctrl.Root, HostResolvConf), host); err != nil {
		return err
	}

	return writeInPlace(filepath.Join(ctrl.Root, PodResolvConf), pods)
}

// listen makes the host DNS listen on exactly addrs.
func (ctrl *ResolverController) listen(addrs []netip.AddrPort, log *zap.Logger) error {
	keep := map[netip.AddrPort]bool{}

	for _, a := range addrs {
		keep[a] = true

		if ctrl.listeners[a] != nil {
			continue
		}

		l, err := hostdns.Listen(a, ctrl.resolver)
		if err != nil {
			return err
		}

		ctrl.listeners[a] = l
		log.Info("host DNS listening", zap.Stringer("address", a))
	}

	ctrl.closeListeners(keep)

	return nil
}

func (ctrl *ResolverController) closeListeners(keep map[netip.AddrPort]bool) {
	for a, l := range ctrl.listeners {
		if !keep[a] {
			l.Close() // the address is released either way
			delete(ctrl.listeners, a)
		}
	}
}

func (ctrl *ResolverController) writeResources(ctx context.Context, r controller.Runtime, servers []netip.Addr, search []string, want hostDNS,
	listen []netip.AddrPort, active []*hostdns.Upstream, serviceAddr netip.Addr,
) error {
	// Every output is written on each pass; the ones not written (a listener or upstream gone)
	// are removed at the end.
	r.StartTrackingOutputs()

	if err := safe.WriterModify(ctx, r, network.NewResolverStatus(network.NamespaceName, network.ResolverID), func(res *network.ResolverStatus) error {
		res.TypedSpec().DNSServers, res.TypedSpec().SearchDomains = servers, search

		return nil
	}); err != nil {
		return fmt.Errorf("writing resolver status: %w", err)
	}

	if err := safe.WriterModify(ctx, r, network.NewHostDNSConfig(network.HostDNSConfigID), func(res *network.HostDNSConfig) error {
		// As upstream's: 127.0.0.53 whether enabled or not, the pods' address when forwarding.
		spec := res.TypedSpec()
		spec.Enabled, spec.ListenAddresses, spec.ServiceHostDNSAddress = want.enabled, []netip.AddrPort{hostDNSListen}, netip.Addr{}
		spec.ResolveMemberNames = want.members

		if want.forward {
			spec.ListenAddresses = append(spec.ListenAddresses, netip.AddrPortFrom(serviceAddr, 53))
			spec.ServiceHostDNSAddress = serviceAddr
		}

		return nil
	}); err != nil {
		return fmt.Errorf("writing host DNS config: %w", err)
	}

	if want.enabled {
		for _, a := range listen {
			for _, proto := range []string{"udp", "tcp"} {
				if err := safe.WriterModify(ctx, r, network.NewDNSResolveCache(proto+"-"+a.String()), func(res *network.DNSResolveCache) error {
					res.TypedSpec().Status = "running"

					return nil
				}); err != nil {
					return fmt.Errorf("writing DNS resolve cache status: %w", err)
				}
			}
		}

		for _, u := range active {
			if err := safe.WriterModify(ctx, r, network.NewDNSUpstream(u.Addr()), func(res *network.DNSUpstream) error {
				if res.TypedSpec().Value.Conn == nil {
					res.TypedSpec().Value.Conn = network.NewDNSConn(u)
				}

				return nil
			}); err != nil {
				return fmt.Errorf("writing DNS upstream: %w", err)
			}
		}
	}

	if err := r.CleanupOutputs(ctx, resource.NewMetadata(network.NamespaceName, network.DNSUpstreamType, "", resource.VersionUndefined),
		resource.NewMetadata(network.NamespaceName, network.DNSResolveCacheType, "", resource.VersionUndefined)); err != nil {
		return fmt.Errorf("removing stale DNS resources: %w", err)
	}

	return nil
}

// resolvConfText is a resolv.conf: its name servers, then its search domains (none: no line).
func resolvConfText(servers []netip.Addr, search []string) string {
	var b strings.Builder

	for _, s := range servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}

	if len(search) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(search, " "))
	}

	return b.String()
}

// writeInPlace writes path's content without replacing the file: a bind mount of it (the
// node's /etc/resolv.conf, the containers') keeps showing the new content.
func writeInPlace(path, content string) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, []byte(content)) {
		return nil
	}

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}

	if _, err = f.WriteString(content); err != nil {
		f.Close()

		return fmt.Errorf("writing %s: %w", path, err)
	}

	return f.Close()
}

// addLoopbackAddress puts addr/32 on lo with host scope, as upstream does for the host DNS's
// address that pods reach.
func addLoopbackAddress(addr netip.Addr) error {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return err
	}

	conn, err := rtnetlink.Dial(nil)
	if err != nil {
		return err
	}
	defer conn.Close()

	ip := net.IP(addr.AsSlice())

	err = conn.Address.New(&rtnetlink.AddressMessage{
		Family: unix.AF_INET, PrefixLength: 32, Scope: unix.RT_SCOPE_HOST, Index: uint32(lo.Index),
		Attributes: &rtnetlink.AddressAttributes{Address: ip, Local: ip},
	})
	if err != nil && !errors.Is(err, unix.EEXIST) && !os.IsExist(err) {
		return err
	}

	return nil
}
