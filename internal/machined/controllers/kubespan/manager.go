package kubespan

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Routing: WireGuard marks its own (encrypted) packets with the firewall mark; every other packet
// looks up the KubeSpan table first, which routes the routed peers' allowed IPs into the tunnel
// (what it does not hold falls through to the main table). Upstream marks the packets to route
// with nftables instead; the effect is the same.
const (
	rulePriority = 32500 // before the main table's rule (32766)
	// PeerDownAfter is how long without a handshake a peer counts as down (WireGuard shakes hands
	// every 2 minutes on a live session).
	PeerDownAfter = 275 * time.Second
	// endpointTimeout is how long a peer's endpoint is tried before the next one.
	endpointTimeout = 15 * time.Second
	// statusInterval is how often the peers' statuses are read from the kernel, by default.
	statusInterval = 3 * time.Second
)

// ManagerController makes the KubeSpan link (WireGuard, "kubespan") with the node's identity,
// its peers from the PeerSpecs, the routing into it, and publishes the peers' statuses.
type ManagerController struct {
	// LoadModule loads the wireguard module; nil: none is loaded.
	LoadModule func(name string) error
	// Interval is how often the peers' statuses are read (zero: every 3 s).
	Interval time.Duration

	endpoints map[string]*endpointChoice // by public key
	routes    map[netip.Prefix]bool      // added to the KubeSpan table
	active    bool                       // the link and the rules may be there
}

type endpointChoice struct {
	index   int
	changed time.Time
}

// Name implements controller.Controller.
func (ctrl *ManagerController) Name() string { return "kubespan.ManagerController" }

// Inputs implements controller.Controller.
func (ctrl *ManagerController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: config.NamespaceName, Type: kubespan.ConfigType, ID: optional.Some(kubespan.ConfigID), Kind: controller.InputWeak},
		{Namespace: kubespan.NamespaceName, Type: kubespan.IdentityType, ID: optional.Some(kubespan.LocalIdentity), Kind: controller.InputWeak},
		{Namespace: kubespan.NamespaceName, Type: kubespan.PeerSpecType, Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *ManagerController) Outputs() []controller.Output {
	return []controller.Output{{Type: kubespan.PeerStatusType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *ManagerController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	ctrl.endpoints, ctrl.routes = map[string]*endpointChoice{}, map[netip.Prefix]bool{}

	ticker := time.NewTicker(cmp.Or(ctrl.Interval, statusInterval))
	defer ticker.Stop()

	last := ""

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-ticker.C:
		}

		// The kernel may refuse (no WireGuard): say so once, and try again on every tick.
		err := ctrl.reconcile(ctx, r)

		switch {
		case err != nil && err.Error() != last:
			log.Warn("KubeSpan", zap.Error(err))
		case err == nil && last != "":
			log.Info("KubeSpan works again")
		}

		last = ""
		if err != nil {
			last = err.Error()
		}
	}
}

func (ctrl *ManagerController) reconcile(ctx context.Context, r controller.Runtime) error {
	statuses, err := ctrl.apply(ctx, r)

	// The statuses are published (or removed) whatever happened: a failure leaves none behind.
	r.StartTrackingOutputs()

	for key, st := range statuses {
		if werr := safe.WriterModify(ctx, r, kubespan.NewPeerStatus(kubespan.NamespaceName, key), func(res *kubespan.PeerStatus) error {
			*res.TypedSpec() = st

			return nil
		}); werr != nil {
			err = errors.Join(err, werr)
		}
	}

	return errors.Join(err, safe.CleanupOutputs[*kubespan.PeerStatus](ctx, r))
}

// apply sets the kernel up for the config, the identity and the peers (or tears KubeSpan down)
// and returns the peers' statuses.
func (ctrl *ManagerController) apply(ctx context.Context, r controller.Runtime) (map[string]kubespan.PeerStatusSpec, error) {
	cfg, err := safe.ReaderGetByID[*kubespan.Config](ctx, r, kubespan.ConfigID)
	if err != nil && !state.IsNotFoundError(err) {
		return nil, err
	}

	id, err := safe.ReaderGetByID[*kubespan.Identity](ctx, r, kubespan.LocalIdentity)
	if err != nil && !state.IsNotFoundError(err) {
		return nil, err
	}

	if cfg == nil || !cfg.TypedSpec().Enabled || id == nil {
		if !ctrl.active {
			return nil, nil
		}

		return nil, ctrl.teardown()
	}

	specs, err := safe.ReaderListAll[*kubespan.PeerSpec](ctx, r)
	if err != nil {
		return nil, err
	}

	peers := map[string]*kubespan.PeerSpecSpec{}
	for p := range specs.All() {
		peers[p.Metadata().ID()] = p.TypedSpec()
	}

	conn, err := rtnetlink.Dial(nil)
	if err != nil {
		return nil, err
	}
	defer conn.Close()

	ctrl.active = true

	index, err := ctrl.link(conn, id.TypedSpec(), cfg.TypedSpec().MTU)
	if err != nil {
		return nil, err
	}

	statuses, err := ctrl.configure(id.TypedSpec(), peers)
	if err != nil {
		return nil, err
	}

	routed := map[netip.Prefix]bool{}

	for key, st := range statuses {
		if cfg.TypedSpec().ForceRouting || st.State == kubespan.PeerStateUp {
			for _, p := range peers[key].AllowedIPs {
				routed[p] = true
			}
		}
	}

	if err = ctrl.route(conn, index, routed); err != nil {
		return statuses, err
	}

	return statuses, rules(conn, true)
}

// link makes the WireGuard link with the node's KubeSpan address, up, and returns its index.
func (ctrl *ManagerController) link(conn *rtnetlink.Conn, id *kubespan.IdentitySpec, mtu uint32) (uint32, error) {
	l, err := net.InterfaceByName(constants.KubeSpanLinkName)
	if err != nil {
		if ctrl.LoadModule != nil {
			if err = ctrl.LoadModule("wireguard"); err != nil {
				return 0, fmt.Errorf("loading wireguard: %w", err)
			}
		}

		if err = conn.Link.New(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Attributes: &rtnetlink.LinkAttributes{
			Name: constants.KubeSpanLinkName, MTU: mtu, Info: &rtnetlink.LinkInfo{Kind: "wireguard"},
		}}); err != nil && !errors.Is(err, unix.EEXIST) {
			return 0, fmt.Errorf("creating the WireGuard link %s (does the kernel have WireGuard?): %w", constants.KubeSpanLinkName, err)
		}

		if l, err = net.InterfaceByName(constants.KubeSpanLinkName); err != nil {
			return 0, err
		}
	}

	index := uint32(l.Index)

	if l.Flags&net.FlagUp == 0 || uint32(l.MTU) != mtu {
		if err = conn.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: index, Flags: unix.IFF_UP, Change: unix.IFF_UP,
			Attributes: &rtnetlink.LinkAttributes{MTU: mtu}}); err != nil {
			return 0, fmt.Errorf("bringing %s up: %w", constants.KubeSpanLinkName, err)
		}
	}

	// The address with the KubeSpan network's length: the other nodes' KubeSpan addresses are
	// on the link.
	addr := id.Address.Addr()
	if err = conn.Address.New(&rtnetlink.AddressMessage{Family: unix.AF_INET6, PrefixLength: uint8(id.Subnet.Bits()), Scope: unix.RT_SCOPE_UNIVERSE,
		Index: index, Flags: unix.IFA_F_NODAD, Attributes: &rtnetlink.AddressAttributes{Address: addr.AsSlice(), Local: addr.AsSlice()}}); err != nil && !errors.Is(err, unix.EEXIST) {
		return 0, fmt.Errorf("adding %s to %s: %w", addr, constants.KubeSpanLinkName, err)
	}

	return index, nil
}

// configure sets the link's WireGuard key, port, mark and peers (each on its current endpoint,
// the next one after endpointTimeout without a handshake), and reads back their statuses.
func (ctrl *ManagerController) configure(id *kubespan.IdentitySpec, peers map[string]*kubespan.PeerSpecSpec) (map[string]kubespan.PeerStatusSpec, error) {
	c, err := wgctrl.New()
	if err != nil {
		return nil, fmt.Errorf("WireGuard: %w", err)
	}
	defer c.Close()

	dev, err := c.Device(constants.KubeSpanLinkName)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", constants.KubeSpanLinkName, err)
	}

	key, err := wgtypes.ParseKey(id.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("the KubeSpan identity's key: %w", err)
	}

	now := time.Now()
	have := map[string]wgtypes.Peer{}

	for _, p := range dev.Peers {
		have[p.PublicKey.String()] = p
	}

	port, mark, keepalive := constants.KubeSpanDefaultPort, constants.KubeSpanDefaultFirewallMark, constants.KubeSpanDefaultPeerKeepalive
	wg := wgtypes.Config{PrivateKey: &key, ListenPort: &port, FirewallMark: &mark}
	statuses := map[string]kubespan.PeerStatusSpec{}

	for pub, spec := range peers {
		pk, err := wgtypes.ParseKey(pub)
		if err != nil {
			continue // not a key: nothing to peer with
		}

		st := peerStatus(have[pub], spec.Label, now)

		choice := ctrl.endpoints[pub]
		if choice == nil {
			choice = &endpointChoice{changed: now}
			ctrl.endpoints[pub] = choice
		}

		if st.State != kubespan.PeerStateUp && now.Sub(choice.changed) > endpointTimeout && len(spec.Endpoints) > 1 {
			choice.index, choice.changed = choice.index+1, now
		}

		peer := wgtypes.PeerConfig{PublicKey: pk, ReplaceAllowedIPs: true, PersistentKeepaliveInterval: &keepalive}

		if len(spec.Endpoints) > 0 {
			ep := spec.Endpoints[choice.index%len(spec.Endpoints)]
			st.LastUsedEndpoint, st.LastEndpointChange = ep, choice.changed

			// A peer that is up keeps the endpoint it talks from (it may be behind NAT).
			if st.State != kubespan.PeerStateUp {
				peer.Endpoint = net.UDPAddrFromAddrPort(ep)
			}
		}

		for _, a := range spec.AllowedIPs {
			peer.AllowedIPs = append(peer.AllowedIPs, net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())})
		}

		wg.Peers = append(wg.Peers, peer)
		statuses[pub] = st
	}

	for pub, p := range have {
		if _, ok := peers[pub]; !ok {
			wg.Peers = append(wg.Peers, wgtypes.PeerConfig{PublicKey: p.PublicKey, Remove: true})
			delete(ctrl.endpoints, pub)
		}
	}

	if err = c.ConfigureDevice(constants.KubeSpanLinkName, wg); err != nil {
		return nil, fmt.Errorf("configuring %s: %w", constants.KubeSpanLinkName, err)
	}

	return statuses, nil
}

// peerStatus is a peer's status from the kernel's view of it: up after a recent handshake,
// down when the last is too old (or none came within endpointTimeout), unknown before.
func peerStatus(p wgtypes.Peer, label string, now time.Time) kubespan.PeerStatusSpec {
	st := kubespan.PeerStatusSpec{Label: label, ReceiveBytes: p.ReceiveBytes, TransmitBytes: p.TransmitBytes, LastHandshakeTime: p.LastHandshakeTime}

	if p.Endpoint != nil {
		st.Endpoint = p.Endpoint.AddrPort()
		st.Endpoint = netip.AddrPortFrom(st.Endpoint.Addr().Unmap(), st.Endpoint.Port())
	}

	switch {
	case p.PublicKey == (wgtypes.Key{}):
		st.State = kubespan.PeerStateUnknown // not configured yet
	case !p.LastHandshakeTime.IsZero() && now.Sub(p.LastHandshakeTime) < PeerDownAfter:
		st.State = kubespan.PeerStateUp
	case !p.LastHandshakeTime.IsZero():
		st.State = kubespan.PeerStateDown
	default:
		st.State = kubespan.PeerStateUnknown
	}

	return st
}

// route makes the KubeSpan table hold exactly the routed prefixes, through the link.
func (ctrl *ManagerController) route(conn *rtnetlink.Conn, index uint32, want map[netip.Prefix]bool) error {
	for p := range want {
		if err := conn.Route.Replace(routeMessage(p, index)); err != nil {
			return fmt.Errorf("routing %s into %s: %w", p, constants.KubeSpanLinkName, err)
		}

		ctrl.routes[p] = true
	}

	for p := range ctrl.routes {
		if !want[p] {
			if err := conn.Route.Delete(routeMessage(p, index)); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("removing the route of %s: %w", p, err)
			}

			delete(ctrl.routes, p)
		}
	}

	return nil
}

func routeMessage(p netip.Prefix, index uint32) *rtnetlink.RouteMessage {
	family, table := uint8(unix.AF_INET6), uint32(constants.KubeSpanDefaultRoutingTable)
	if p.Addr().Is4() {
		family = unix.AF_INET
	}

	return &rtnetlink.RouteMessage{Family: family, DstLength: uint8(p.Bits()), Table: unix.RT_TABLE_UNSPEC, Protocol: unix.RTPROT_STATIC,
		Scope: unix.RT_SCOPE_LINK, Type: unix.RTN_UNICAST,
		Attributes: rtnetlink.RouteAttributes{Dst: p.Addr().AsSlice(), OutIface: index, Table: table}}
}

// rules adds (or removes) the rule sending every packet not marked by WireGuard to the KubeSpan
// table, for IPv4 and IPv6.
func rules(conn *rtnetlink.Conn, add bool) error {
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		have, err := conn.Rule.List()
		if err != nil {
			return fmt.Errorf("listing routing rules: %w", err)
		}

		found := slices.ContainsFunc(have, func(m rtnetlink.RuleMessage) bool {
			return m.Family == family && m.Attributes != nil && m.Attributes.Priority != nil && *m.Attributes.Priority == rulePriority
		})

		switch {
		case add && !found:
			err = conn.Rule.Add(ruleMessage(family))
		case !add && found:
			err = conn.Rule.Delete(ruleMessage(family))
		}

		if err != nil {
			return fmt.Errorf("routing rule for the KubeSpan table: %w", err)
		}
	}

	return nil
}

func ruleMessage(family uint8) *rtnetlink.RuleMessage {
	prio, table := uint32(rulePriority), uint32(constants.KubeSpanDefaultRoutingTable)
	mark, mask := uint32(constants.KubeSpanDefaultFirewallMark), uint32(constants.KubeSpanDefaultFirewallMask)

	return &rtnetlink.RuleMessage{Family: family, Action: unix.FR_ACT_TO_TBL, Flags: unix.FIB_RULE_INVERT,
		Attributes: &rtnetlink.RuleAttributes{Priority: &prio, Table: &table, FwMark: &mark, FwMask: &mask}}
}

// teardown removes the link (its routes go with it) and the rules.
func (ctrl *ManagerController) teardown() error {
	conn, err := rtnetlink.Dial(nil)
	if err != nil {
		return err
	}
	defer conn.Close()

	clear(ctrl.routes)
	clear(ctrl.endpoints)
	ctrl.active = false

	if l, err := net.InterfaceByName(constants.KubeSpanLinkName); err == nil {
		if err = conn.Link.Delete(uint32(l.Index)); err != nil {
			return fmt.Errorf("removing %s: %w", constants.KubeSpanLinkName, err)
		}
	}

	return rules(conn, false)
}
