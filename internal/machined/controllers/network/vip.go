package network

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// VIPController runs the VIP operators (machine.network.interfaces[].vip): the control planes
// elect one of them through etcd for each shared address, and the one elected holds it on its
// link (an operator-layer address spec) and announces it with gratuitous ARP; it lets go when
// it loses etcd or stops, and another takes it.
type VIPController struct {
	// Etcd gives a client of the cluster's etcd (the node's own member's, once it runs).
	Etcd func(ctx context.Context) (*clientv3.Client, error)
	// Hostname is this node's value in the election.
	Hostname func() string
	// SessionTTL is how long a leader that stopped answering keeps the address (default 10s).
	SessionTTL int
	// Retry is the wait between attempts to reach etcd (default 5s).
	Retry time.Duration
}

// Name implements controller.Controller.
func (ctrl *VIPController) Name() string { return "network.VIPController" }

// Inputs implements controller.Controller.
func (ctrl *VIPController) Inputs() []controller.Input {
	return []controller.Input{{Namespace: network.NamespaceName, Type: network.OperatorSpecType, Kind: controller.InputWeak}}
}

// Outputs implements controller.Controller.
func (ctrl *VIPController) Outputs() []controller.Output {
	return []controller.Output{{Type: network.AddressSpecType, Kind: controller.OutputShared}}
}

// vipState is one VIP's campaign.
type vipState struct {
	spec   network.OperatorSpecSpec
	cancel context.CancelFunc
	held   bool
}

// Run implements controller.Controller.
func (ctrl *VIPController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	if ctrl.SessionTTL == 0 {
		ctrl.SessionTTL = 10
	}

	if ctrl.Retry == 0 {
		ctrl.Retry = 5 * time.Second
	}

	var wg sync.WaitGroup

	campaigns := map[string]*vipState{}
	updates := make(chan vipUpdate)

	defer func() {
		for _, c := range campaigns {
			c.cancel()
		}

		// Each campaign resigns before it ends, so another node takes the address at once.
		go func() {
			for range updates { //nolint:revive // drain the campaigns' last words
			}
		}()
		wg.Wait()
		close(updates)
	}()

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
			if err := ctrl.reconcile(ctx, r, log, campaigns, updates, &wg); err != nil {
				return err
			}
		case u := <-updates:
			if c := campaigns[u.id]; c != nil && c.spec.VIP.IP == u.ip {
				c.held = u.held
			}
		}

		if err := ctrl.publish(ctx, r, campaigns); err != nil {
			return err
		}
	}
}

type vipUpdate struct {
	id   string
	ip   netip.Addr
	held bool
}

// reconcile starts a campaign for each VIP operator spec and ends those whose spec is gone.
func (ctrl *VIPController) reconcile(ctx context.Context, r controller.Runtime, log *zap.Logger, campaigns map[string]*vipState, updates chan<- vipUpdate, wg *sync.WaitGroup) error {
	specs, err := safe.ReaderListAll[*network.OperatorSpec](ctx, r)
	if err != nil {
		return err
	}

	want := map[string]network.OperatorSpecSpec{}

	for spec := range specs.All() {
		if s := spec.TypedSpec(); s.Operator == network.OperatorVIP && s.VIP.IP.IsValid() {
			want[spec.Metadata().ID()] = *s
		}
	}

	for id, c := range campaigns {
		if s, ok := want[id]; !ok || !s.Equal(c.spec) {
			c.cancel()
			delete(campaigns, id)
		}
	}

	for id, s := range want {
		if campaigns[id] != nil {
			continue
		}

		cctx, cancel := context.WithCancel(ctx)
		campaigns[id] = &vipState{spec: s, cancel: cancel}

		wg.Go(func() {
			ctrl.campaign(cctx, log.With(zap.String("vip", s.VIP.IP.String()), zap.String("link", s.LinkName)), id, s, updates)
		})
	}

	return nil
}

// publish writes the address spec of each VIP this node holds and removes the others.
func (ctrl *VIPController) publish(ctx context.Context, r controller.Runtime, campaigns map[string]*vipState) error {
	r.StartTrackingOutputs()

	for _, c := range campaigns {
		if !c.held {
			continue
		}

		addr := netip.PrefixFrom(c.spec.VIP.IP, c.spec.VIP.IP.BitLen())
		family := nethelpers.FamilyInet4

		if addr.Addr().Is6() {
			family = nethelpers.FamilyInet6
		}

		if err := safe.WriterModify(ctx, r, network.NewAddressSpec(network.NamespaceName, network.LayeredID(network.ConfigOperator, network.AddressID(c.spec.LinkName, addr))),
			func(res *network.AddressSpec) error {
				*res.TypedSpec() = network.AddressSpecSpec{
					Address: addr, LinkName: c.spec.LinkName, Family: family, Scope: nethelpers.ScopeGlobal,
					Flags: nethelpers.AddressFlags(nethelpers.AddressPermanent), ConfigLayer: network.ConfigOperator,
				}

				return nil
			}); err != nil {
			return err
		}
	}

	return r.CleanupOutputs(ctx, resource.NewMetadata(network.NamespaceName, network.AddressSpecType, "", resource.VersionUndefined))
}

// campaign runs the election for one VIP until ctx ends: it waits for etcd, campaigns, holds the
// address while its etcd session lives, and campaigns again once it is lost.
func (ctrl *VIPController) campaign(ctx context.Context, log *zap.Logger, id string, spec network.OperatorSpecSpec, updates chan<- vipUpdate) {
	report := func(held bool) { updates <- vipUpdate{id: id, ip: spec.VIP.IP, held: held} }

	for ctx.Err() == nil {
		if err := ctrl.holdOnce(ctx, log, spec, report); err != nil && ctx.Err() == nil {
			log.Info("VIP: waiting for etcd to campaign", zap.Error(err))

			select {
			case <-ctx.Done():
			case <-time.After(ctrl.Retry):
			}
		}
	}
}

// holdOnce campaigns once and, when elected, holds the address until the session or ctx ends.
func (ctrl *VIPController) holdOnce(ctx context.Context, log *zap.Logger, spec network.OperatorSpecSpec, report func(bool)) error {
	cli, err := ctrl.Etcd(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()

	session, err := concurrency.NewSession(cli, concurrency.WithTTL(ctrl.SessionTTL), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("etcd session: %w", err)
	}
	// Closing revokes the lease: the others campaign at once.
	defer session.Close()

	election := concurrency.NewElection(session, "/talos/vip/"+spec.VIP.IP.String())

	if err = election.Campaign(ctx, ctrl.Hostname()); err != nil {
		return fmt.Errorf("campaigning: %w", err)
	}

	log.Info("VIP: elected: holding the address")
	report(true)

	if spec.VIP.GratuitousARP && spec.VIP.IP.Is4() {
		go announce(ctx, log, spec.LinkName, spec.VIP.IP)
	}

	select {
	case <-ctx.Done():
	case <-session.Done():
		log.Warn("VIP: etcd session lost: letting the address go")
	}

	report(false)

	rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()

	election.Resign(rctx) //nolint:errcheck // the lease's revoke ends it anyway

	return nil
}

// announce sends a few gratuitous ARP requests for ip on link, so that the network's neighbour
// caches move to this node's address at once.
func announce(ctx context.Context, log *zap.Logger, link string, ip netip.Addr) {
	for i := range 3 {
		if i > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}

		if err := gratuitousARP(link, ip); err != nil {
			log.Warn("VIP: gratuitous ARP", zap.Error(err))

			return
		}
	}
}

// gratuitousARP broadcasts an ARP request for ip from ip on link (RFC 5227's announcement).
func gratuitousARP(link string, ip netip.Addr) error {
	ifi, err := net.InterfaceByName(link)
	if err != nil {
		return err
	}

	if len(ifi.HardwareAddr) != 6 {
		return fmt.Errorf("%s has no Ethernet address", link)
	}

	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ARP)))
	if err != nil {
		return fmt.Errorf("packet socket: %w", err)
	}
	defer unix.Close(fd)

	broadcast := [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	a := ip.As4()

	frame := make([]byte, 0, 42)
	frame = append(frame, broadcast[:6]...)
	frame = append(frame, ifi.HardwareAddr...)
	frame = binary.BigEndian.AppendUint16(frame, unix.ETH_P_ARP)
	frame = binary.BigEndian.AppendUint16(frame, 1)      // Ethernet
	frame = binary.BigEndian.AppendUint16(frame, 0x0800) // IPv4
	frame = append(frame, 6, 4)
	frame = binary.BigEndian.AppendUint16(frame, 1) // request
	frame = append(frame, ifi.HardwareAddr...)
	frame = append(frame, a[:]...)
	frame = append(frame, make([]byte, 6)...)
	frame = append(frame, a[:]...)

	return unix.Sendto(fd, frame, 0, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifi.Index, Halen: 6, Addr: broadcast})
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
