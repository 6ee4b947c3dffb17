package network

import (
	"context"
	"fmt"
	"slices"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/mdlayher/ethtool"
	"github.com/siderolabs/gen/optional"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/machined/controllers/activeconfig"
)

// EthernetController applies the config's EthernetConfig documents to the links they name, by
// ethtool's netlink interface (features, rings, channels: only the settings a document sets, and
// only when they differ from the link's), and publishes EthernetStatus for each Ethernet link
// ethtool answers for, as upstream's EthernetSpecController and EthernetStatusController do. A
// setting the driver refuses is logged and left; the status shows what the link has.
type EthernetController struct{}

// Name implements controller.Controller.
func (ctrl *EthernetController) Name() string { return "network.EthernetController" }

// Inputs implements controller.Controller.
func (ctrl *EthernetController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak},
		{Namespace: network.NamespaceName, Type: network.LinkStatusType, Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *EthernetController) Outputs() []controller.Output {
	return []controller.Output{{Type: network.EthernetStatusType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *EthernetController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	client, err := ethtool.New()
	if err != nil {
		log.Warn("no ethtool netlink: EthernetConfig is not applied", zap.Error(err))

		return nil
	}
	defer client.Close()

	return activeconfig.Run(ctx, r, func(cfg *config.MachineConfig) error {
		docs := map[string]talosconfig.EthernetConfig{}

		if cfg != nil {
			for _, d := range cfg.Config().EthernetConfigs() {
				docs[d.Name()] = d
			}
		}

		links, err := safe.ReaderListAll[*network.LinkStatus](ctx, r)
		if err != nil {
			return fmt.Errorf("listing links: %w", err)
		}

		r.StartTrackingOutputs()

		for link := range links.All() {
			spec := link.TypedSpec()
			if spec.Type != nethelpers.LinkEther || spec.Kind != "" {
				continue
			}

			ifi := ethtool.Interface{Name: link.Metadata().ID()}

			if d, ok := docs[ifi.Name]; ok {
				for _, err := range applyEthernet(client, ifi, d) {
					log.Warn("EthernetConfig not applied", zap.String("link", ifi.Name), zap.Error(err))
				}
			}

			status, ok := ethernetStatus(client, ifi)
			if !ok {
				continue
			}

			if err = safe.WriterModify(ctx, r, network.NewEthernetStatus(network.NamespaceName, ifi.Name), func(res *network.EthernetStatus) error {
				*res.TypedSpec() = status

				return nil
			}); err != nil {
				return fmt.Errorf("writing the ethernet status of %s: %w", ifi.Name, err)
			}
		}

		return safe.CleanupOutputs[*network.EthernetStatus](ctx, r)
	})
}

// applyEthernet sets what the document sets and the link does not have yet.
func applyEthernet(client *ethtool.Client, ifi ethtool.Interface, d talosconfig.EthernetConfig) []error {
	var errs []error

	if want := d.Features(); len(want) > 0 {
		have, err := client.Features(ifi)
		if err != nil {
			errs = append(errs, fmt.Errorf("reading features: %w", err))
		} else {
			change := map[string]bool{}

			for name, on := range want {
				i := slices.IndexFunc(have, func(f ethtool.FeatureInfo) bool { return f.Name == name })
				if i < 0 {
					errs = append(errs, fmt.Errorf("features.%s: the link has no such feature", name))

					continue
				}

				if have[i].Active != on {
					change[name] = on
				}
			}

			if len(change) > 0 {
				if err = client.SetFeatures(ifi, change); err != nil {
					errs = append(errs, fmt.Errorf("features %v: %w", change, err))
				}
			}
		}
	}

	if err := applyRings(client, ifi, d.Rings()); err != nil {
		errs = append(errs, err)
	}

	if err := applyChannels(client, ifi, d.Channels()); err != nil {
		errs = append(errs, err)
	}

	return errs
}

// setIfDiffers puts want into dst when it is set and differs from have; it says whether it did.
func setIfDiffers[T comparable](dst *optional.Optional[T], want *T, have optional.Optional[T]) bool {
	if want == nil {
		return false
	}

	if v, ok := have.Get(); ok && v == *want {
		return false
	}

	*dst = optional.Some(*want)

	return true
}

func applyRings(client *ethtool.Client, ifi ethtool.Interface, want talosconfig.EthernetRingsConfig) error {
	if want == (talosconfig.EthernetRingsConfig{}) {
		return nil
	}

	have, err := client.Rings(ifi)
	if err != nil {
		return fmt.Errorf("reading rings: %w", err)
	}

	set := ethtool.Rings{Interface: ifi}
	changed := false

	for _, c := range []bool{
		setIfDiffers(&set.RX, want.RX, have.RX),
		setIfDiffers(&set.TX, want.TX, have.TX),
		setIfDiffers(&set.RXMini, want.RXMini, have.RXMini),
		setIfDiffers(&set.RXJumbo, want.RXJumbo, have.RXJumbo),
		setIfDiffers(&set.RXBufLen, want.RXBufLen, have.RXBufLen),
		setIfDiffers(&set.CQESize, want.CQESize, have.CQESize),
		setIfDiffers(&set.TXPush, want.TXPush, have.TXPush),
		setIfDiffers(&set.RXPush, want.RXPush, have.RXPush),
		setIfDiffers(&set.TXPushBufLen, want.TXPushBufLen, have.TXPushBufLen),
		setIfDiffers(&set.TCPDataSplit, want.TCPDataSplit, have.TCPDataSplit),
	} {
		changed = changed || c
	}

	if !changed {
		return nil
	}

	if err = client.SetRings(set); err != nil {
		return fmt.Errorf("rings: %w", err)
	}

	return nil
}

func applyChannels(client *ethtool.Client, ifi ethtool.Interface, want talosconfig.EthernetChannelsConfig) error {
	if want == (talosconfig.EthernetChannelsConfig{}) {
		return nil
	}

	have, err := client.Channels(ifi)
	if err != nil {
		return fmt.Errorf("reading channels: %w", err)
	}

	set := ethtool.Channels{Interface: ifi}
	changed := false

	for _, c := range []bool{
		setIfDiffers(&set.RXCount, want.RX, have.RXCount),
		setIfDiffers(&set.TXCount, want.TX, have.TXCount),
		setIfDiffers(&set.OtherCount, want.Other, have.OtherCount),
		setIfDiffers(&set.CombinedCount, want.Combined, have.CombinedCount),
	} {
		changed = changed || c
	}

	if !changed {
		return nil
	}

	if err = client.SetChannels(set); err != nil {
		return fmt.Errorf("channels: %w", err)
	}

	return nil
}

// ethernetStatus reads what ethtool says of a link; false when it says nothing (no ethtool ops).
func ethernetStatus(client *ethtool.Client, ifi ethtool.Interface) (network.EthernetStatusSpec, bool) {
	var s network.EthernetStatusSpec

	info, err := client.LinkInfo(ifi)
	if err != nil {
		return s, false
	}

	s.Port = nethelpers.Port(info.Port)

	if st, err := client.LinkState(ifi); err == nil {
		s.LinkState = &st.Link
	}

	if m, err := client.LinkMode(ifi); err == nil {
		s.SpeedMegabits = m.SpeedMegabits
		s.Duplex = nethelpers.Duplex(m.Duplex)

		for _, o := range m.Ours {
			s.OurModes = append(s.OurModes, o.Name)
		}

		for _, p := range m.Peer {
			s.PeerModes = append(s.PeerModes, p.Name)
		}
	}

	if rg, err := client.Rings(ifi); err == nil {
		s.Rings = &network.EthernetRingsStatus{
			RXMax: rg.RXMax.Ptr(), RXMiniMax: rg.RXMiniMax.Ptr(), RXJumboMax: rg.RXJumboMax.Ptr(), TXMax: rg.TXMax.Ptr(),
			TXPushBufLenMax: rg.TXPushBufLenMax.Ptr(),
			RX:              rg.RX.Ptr(), RXMini: rg.RXMini.Ptr(), RXJumbo: rg.RXJumbo.Ptr(), TX: rg.TX.Ptr(),
			RXBufLen: rg.RXBufLen.Ptr(), CQESize: rg.CQESize.Ptr(), TXPush: rg.TXPush.Ptr(), RXPush: rg.RXPush.Ptr(),
			TXPushBufLen: rg.TXPushBufLen.Ptr(), TCPDataSplit: rg.TCPDataSplit.Ptr(),
		}
	}

	if ch, err := client.Channels(ifi); err == nil {
		s.Channels = &network.EthernetChannelsStatus{
			RXMax: ch.RXMax.Ptr(), TXMax: ch.TXMax.Ptr(), OtherMax: ch.OtherMax.Ptr(), CombinedMax: ch.CombinedMax.Ptr(),
			RX: ch.RXCount.Ptr(), TX: ch.TXCount.Ptr(), Other: ch.OtherCount.Ptr(), Combined: ch.CombinedCount.Ptr(),
		}
	}

	if fs, err := client.Features(ifi); err == nil {
		for _, f := range fs {
			s.Features = append(s.Features, network.EthernetFeatureStatus{Name: f.Name, Status: f.State() + f.Suffix()})
		}
	}

	return s, true
}
