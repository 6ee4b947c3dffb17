package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/talos-go/talos/internal/discovery"
	"github.com/talos-go/talos/internal/version"
)

// ExchangeInterval is how often a node refreshes its membership with the registries.
const ExchangeInterval = 2 * time.Second

// MemberController publishes the cluster's Members and Affiliates (with their KubeSpan peers):
// this node and those the registries of the control planes know, refreshed every
// ExchangeInterval.
type MemberController struct{}

// Name implements controller.Controller.
func (ctrl *MemberController) Name() string { return "cluster.MemberController" }

// Inputs implements controller.Controller.
func (ctrl *MemberController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: cluster.NamespaceName, Type: cluster.IdentityType, ID: optional.Some(cluster.LocalIdentity), Kind: controller.InputWeak},
		{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak},
		{Namespace: network.NamespaceName, Type: network.HostnameStatusType, ID: optional.Some(network.HostnameID), Kind: controller.InputWeak},
		{Namespace: network.NamespaceName, Type: network.NodeAddressType, ID: optional.Some(network.NodeAddressCurrentID), Kind: controller.InputWeak},
		{Namespace: kubespan.NamespaceName, Type: kubespan.IdentityType, ID: optional.Some(kubespan.LocalIdentity), Kind: controller.InputWeak},
		{Namespace: config.NamespaceName, Type: kubespan.ConfigType, ID: optional.Some(kubespan.ConfigID), Kind: controller.InputWeak},
		{Namespace: kubespan.NamespaceName, Type: kubespan.PeerStatusType, Kind: controller.InputWeak}, // harvestExtraEndpoints
	}
}

// Outputs implements controller.Controller.
func (ctrl *MemberController) Outputs() []controller.Output {
	return []controller.Output{{Type: cluster.MemberType, Kind: controller.OutputExclusive}, {Type: cluster.AffiliateType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *MemberController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	conns := map[string]*grpc.ClientConn{}

	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()

	ticker := time.NewTicker(ExchangeInterval)
	defer ticker.Stop()

	var (
		known []discovery.Affiliate
		sent  *discovery.Affiliate // the last exchange's own affiliate
	)

	for {
		tick := false

		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-ticker.C:
			tick = true
		}

		self, endpoints, dial, err := ctrl.local(ctx, r)
		if errors.Is(err, errDiscoveryOff) {
			// As upstream: without discovery the node lists no members, itself included.
			known = nil

			if err = ctrl.writeMembers(ctx, r, nil); err != nil {
				return err
			}

			continue
		}

		if err != nil {
			return err
		}

		if self == nil {
			continue // no config yet, or no hostname/addresses yet
		}

		if self.KubeSpan != nil {
			if self.Observed, err = observedEndpoints(ctx, r, known); err != nil {
				return err
			}
		}

		// An input that changes often (a KubeSpan peer's traffic counters) changes nothing we
		// say: the next exchange is the ticker's.
		if !tick && sent != nil && reflect.DeepEqual(self, sent) {
			continue
		}

		sent = self

		for _, a := range known {
			if a.MachineType == machine.TypeControlPlane.String() || a.MachineType == machine.TypeInit.String() {
				for _, addr := range a.Addresses {
					endpoints = appendUnique(endpoints, addr)
				}
			}
		}

		merged, reached := exchange(ctx, log, conns, endpoints, dial, self)
		if reached == 0 {
			// No registry answered: keep the last view of the others rather than shrinking to
			// ourselves, but with our own entry current (a new hostname shows at once).
			for _, a := range known {
				if a.NodeID != self.NodeID {
					merged[a.NodeID] = a
				}
			}
		}

		known = known[:0]
		for _, a := range merged {
			known = append(known, a)
		}

		if err = ctrl.writeMembers(ctx, r, known); err != nil {
			return err
		}
	}
}

// exchange sends self to each registry at endpoints (dialled once, kept in conns) and merges
// their affiliates with self; reached counts the registries that answered.
func exchange(ctx context.Context, log *zap.Logger, conns map[string]*grpc.ClientConn, endpoints []string,
	dial func(string) (*grpc.ClientConn, error), self *discovery.Affiliate,
) (merged map[string]discovery.Affiliate, reached int) {
	merged = map[string]discovery.Affiliate{self.NodeID: *self}

	for _, ep := range endpoints {
		conn, ok := conns[ep]
		if !ok {
			var err error
			if conn, err = dial(ep); err != nil {
				continue
			}

			conns[ep] = conn
		}

		callCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
		list, err := discovery.Exchange(callCtx, conn, *self)
		cancel()

		if err != nil {
			log.Debug("discovery exchange failed", zap.String("endpoint", ep), zap.Error(err))
			continue
		}

		reached++

		for _, a := range list {
			merged[a.NodeID] = a
		}
	}

	return merged, reached
}

// errDiscoveryOff: cluster.discovery is disabled, or its service registry is.
var errDiscoveryOff = errors.New("cluster discovery is disabled")

func appendUnique(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}

	return append(list, s)
}

// local builds this node's affiliate, the registries to ask, and how to reach them.
func (ctrl *MemberController) local(ctx context.Context, r controller.Runtime) (*discovery.Affiliate, []string, func(string) (*grpc.ClientConn, error), error) {
	identity, err := safe.ReaderGetByID[*cluster.Identity](ctx, r, cluster.LocalIdentity)
	if state.IsNotFoundError(err) {
		return nil, nil, nil, nil
	}

	if err != nil {
		return nil, nil, nil, err
	}

	cfg, err := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID)
	if state.IsNotFoundError(err) {
		return nil, nil, nil, nil
	}

	if err != nil {
		return nil, nil, nil, err
	}

	hostname, err := safe.ReaderGetByID[*network.HostnameStatus](ctx, r, network.HostnameID)
	if state.IsNotFoundError(err) {
		return nil, nil, nil, nil
	}

	if err != nil {
		return nil, nil, nil, err
	}

	addrs, err := safe.ReaderGetByID[*network.NodeAddress](ctx, r, network.NodeAddressCurrentID)
	if state.IsNotFoundError(err) {
		return nil, nil, nil, nil
	}

	if err != nil {
		return nil, nil, nil, err
	}

	c := cfg.Config()
	if c.Machine() == nil || c.Cluster() == nil || c.Cluster().Endpoint() == nil {
		return nil, nil, nil, nil
	}

	// The control planes' registry stands for upstream's discovery service.
	if d := c.Cluster().Discovery(); !d.Enabled() || !d.Registries().Service().Enabled() {
		return nil, nil, nil, errDiscoveryOff
	}

	self := &discovery.Affiliate{
		NodeID:          identity.TypedSpec().NodeID,
		Hostname:        hostname.TypedSpec().FQDN(),
		MachineType:     c.Machine().Type().String(),
		OperatingSystem: fmt.Sprintf("%s (%s)", version.Name, version.Tag),
	}

	// Addresses in the pod and service subnets (flannel's and the CNI bridge's) reach the node
	// only from inside the cluster network: the others are not given them, as upstream's
	// affiliates leave them out (etcd joins and KubePrism would try them in vain).
	podNets := parsePrefixes(c.Cluster().Network().PodCIDRs())
	clusterNets := append(slices.Clone(podNets), parsePrefixes(c.Cluster().Network().ServiceCIDRs())...)

	ks, err := safe.ReaderGetByID[*kubespan.Identity](ctx, r, kubespan.LocalIdentity)
	if err != nil && !state.IsNotFoundError(err) {
		return nil, nil, nil, err
	}

	if ks != nil {
		// The KubeSpan network is reached through the tunnel: never an endpoint of it.
		clusterNets = append(clusterNets, ks.TypedSpec().Subnet)
	}

	// The node's own pod networks: the networks of its addresses in the pod subnets (the CNI
	// bridge's, flannel's), which KubeSpan may advertise.
	var pods []string

	for _, p := range addrs.TypedSpec().Addresses {
		if slices.ContainsFunc(podNets, func(n netip.Prefix) bool { return n.Contains(p.Addr()) }) {
			pods = appendUnique(pods, p.Masked().String())
		}

		if !slices.ContainsFunc(clusterNets, func(n netip.Prefix) bool { return n.Contains(p.Addr()) }) {
			self.Addresses = append(self.Addresses, p.Addr().String())
		}
	}

	if ks != nil {
		self.KubeSpan = kubeSpanAffiliate(ctx, r, ks.TypedSpec(), self.Addresses, pods)
	}

	return self, []string{c.Cluster().Endpoint().Hostname()}, registryDialer(c.Machine().Security()), nil
}

// registryDialer dials a control plane's registry (trustd's port) trusting the machine's CAs,
// with the machine token.
func registryDialer(sec talosconfig.Security) func(host string) (*grpc.ClientConn, error) {
	pool := x509.NewCertPool()
	if ca := sec.IssuingCA(); ca != nil {
		pool.AppendCertsFromPEM(ca.Crt)
	}

	for _, ca := range sec.AcceptedCAs() {
		pool.AppendCertsFromPEM(ca.Crt)
	}

	token := sec.Token()

	return func(host string) (*grpc.ClientConn, error) {
		tlsCfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, ServerName: host}

		return grpc.NewClient(net.JoinHostPort(host, strconv.Itoa(constants.TrustdPort)),
			grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
			grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				return invoker(metadata.AppendToOutgoingContext(ctx, "token", token), method, req, reply, cc, opts...)
			}),
		)
	}
}

func (ctrl *MemberController) writeMembers(ctx context.Context, r controller.Runtime, list []discovery.Affiliate) error {
	r.StartTrackingOutputs()

	for _, a := range list {
		if a.Hostname == "" {
			continue
		}

		typ, err := machine.ParseType(a.MachineType)
		if err != nil {
			typ = machine.TypeUnknown
		}

		var addrs []netip.Addr

		for _, s := range a.Addresses {
			if addr, err := netip.ParseAddr(s); err == nil {
				addrs = append(addrs, addr)
			}
		}

		if err = safe.WriterModify(ctx, r, cluster.NewAffiliate(cluster.NamespaceName, a.NodeID), func(res *cluster.Affiliate) error {
			spec := res.TypedSpec()
			spec.NodeID, spec.Hostname, spec.MachineType, spec.OperatingSystem, spec.Addresses = a.NodeID, a.Hostname, typ, a.OperatingSystem, addrs
			spec.KubeSpan = affiliateKubeSpan(a.KubeSpan)

			return nil
		}); err != nil {
			return fmt.Errorf("writing affiliate %s: %w", a.Hostname, err)
		}

		if err = safe.WriterModify(ctx, r, cluster.NewMember(cluster.NamespaceName, a.Hostname), func(res *cluster.Member) error {
			spec := res.TypedSpec()
			spec.NodeID, spec.Hostname, spec.MachineType, spec.OperatingSystem, spec.Addresses = a.NodeID, a.Hostname, typ, a.OperatingSystem, addrs

			spec.ControlPlane = nil
			if typ.IsControlPlane() {
				spec.ControlPlane = &cluster.ControlPlane{APIServerPort: constants.DefaultControlPlanePort}
			}

			return nil
		}); err != nil {
			return fmt.Errorf("writing member %s: %w", a.Hostname, err)
		}
	}

	if err := r.CleanupOutputs(ctx, resource.NewMetadata(cluster.NamespaceName, cluster.MemberType, "", resource.VersionUndefined),
		resource.NewMetadata(cluster.NamespaceName, cluster.AffiliateType, "", resource.VersionUndefined)); err != nil {
		return fmt.Errorf("removing departed members: %w", err)
	}

	return nil
}

// parsePrefixes are the networks of cidrs (the config's, validated: a bad one is skipped).
func parsePrefixes(cidrs []string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(cidrs))

	for _, cidr := range cidrs {
		if p, err := netip.ParsePrefix(cidr); err == nil {
			out = append(out, p)
		}
	}

	return out
}

// kubeSpanAffiliate is this node's KubeSpan peer as the others see it: its key, its KubeSpan
// address and its WireGuard port on each of its addresses (and the config's extra endpoints);
// with advertiseKubernetesNetworks, its pod networks, which the others then route to it
// through KubeSpan.
func kubeSpanAffiliate(ctx context.Context, r controller.Reader, id *kubespan.IdentitySpec, addrs, podNets []string) *discovery.KubeSpan {
	ks := &discovery.KubeSpan{PublicKey: id.PublicKey, Address: id.Address.Addr().String()}

	for _, a := range addrs {
		if ip, err := netip.ParseAddr(a); err == nil && !ip.IsLinkLocalUnicast() {
			ks.Endpoints = append(ks.Endpoints, netip.AddrPortFrom(ip, constants.KubeSpanDefaultPort).String())
		}
	}

	if cfg, err := safe.ReaderGetByID[*kubespan.Config](ctx, r, kubespan.ConfigID); err == nil {
		for _, ep := range cfg.TypedSpec().ExtraEndpoints {
			ks.Endpoints = appendUnique(ks.Endpoints, ep.String())
		}

		if cfg.TypedSpec().AdvertiseKubernetesNetworks {
			ks.AdditionalAddresses = podNets
		}
	}

	return ks
}

// observedEndpoints are the endpoints this node's KubeSpan peers are up at, by their node ID (of
// the known affiliates, by public key), when the config harvests them.
func observedEndpoints(ctx context.Context, r controller.Reader, known []discovery.Affiliate) (map[string][]string, error) {
	cfg, err := safe.ReaderGetByID[*kubespan.Config](ctx, r, kubespan.ConfigID)
	if state.IsNotFoundError(err) || (err == nil && !cfg.TypedSpec().HarvestExtraEndpoints) {
		return nil, nil
	}

	if err != nil {
		return nil, err
	}

	statuses, err := safe.ReaderListAll[*kubespan.PeerStatus](ctx, r)
	if err != nil {
		return nil, err
	}

	var out map[string][]string

	for st := range statuses.All() {
		if s := st.TypedSpec(); s.State == kubespan.PeerStateUp && s.Endpoint.IsValid() {
			for _, a := range known {
				if a.KubeSpan != nil && a.KubeSpan.PublicKey == st.Metadata().ID() {
					if out == nil {
						out = map[string][]string{}
					}

					out[a.NodeID] = append(out[a.NodeID], s.Endpoint.String())
				}
			}
		}
	}

	return out, nil
}

// affiliateKubeSpan is an affiliate's KubeSpan peer as the Affiliate resource holds it.
func affiliateKubeSpan(ks *discovery.KubeSpan) cluster.KubeSpanAffiliateSpec {
	var spec cluster.KubeSpanAffiliateSpec

	if ks == nil {
		return spec
	}

	spec.PublicKey = ks.PublicKey
	spec.Address, _ = netip.ParseAddr(ks.Address)

	for _, s := range ks.AdditionalAddresses {
		if p, err := netip.ParsePrefix(s); err == nil {
			spec.AdditionalAddresses = append(spec.AdditionalAddresses, p)
		}
	}

	for _, s := range ks.Endpoints {
		if ep, err := netip.ParseAddrPort(s); err == nil {
			spec.Endpoints = append(spec.Endpoints, ep)
		}
	}

	return spec
}
