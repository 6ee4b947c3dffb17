package network

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// ignoredLinks names the links machine.network.interfaces[] marks `ignore: true` (by interface
// or deviceSelector). Upstream leaves such a link alone: no DHCP, no addresses, no operator, as
// the kernel argument talos.network.interface.ignore= does at boot.
func ignoredLinks(ctx context.Context, r controller.Reader) (map[string]bool, error) {
	cfg, err := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID)
	if err != nil {
		if state.IsNotFoundError(err) {
			return nil, nil
		}

		return nil, fmt.Errorf("reading the machine config: %w", err)
	}

	if cfg.Config().Machine() == nil {
		return nil, nil
	}

	ignored := map[string]bool{}

	var (
		links  safe.List[*network.LinkStatus]
		listed bool
	)

	for _, dev := range cfg.Config().Machine().Network().Devices() {
		if !dev.Ignore() {
			continue
		}

		if dev.Interface() != "" {
			ignored[dev.Interface()] = true

			continue
		}

		if !listed {
			if links, err = safe.ReaderListAll[*network.LinkStatus](ctx, r); err != nil {
				return nil, fmt.Errorf("listing link statuses: %w", err)
			}

			listed = true
		}

		for _, name := range selected(links, dev.Selector()) {
			ignored[name] = true
		}
	}

	return ignored, nil
}

// ignoredInputs are what ignoredLinks reads, for the DHCP controllers' inputs.
func ignoredInputs() []controller.Input {
	return []controller.Input{
		{Namespace: config.NamespaceName, Type: config.MachineConfigType, Kind: controller.InputWeak},
		{Namespace: network.NamespaceName, Type: network.LinkStatusType, Kind: controller.InputWeak},
	}
}

// releaseBootLease removes from link the address the boot leased on it before the config said
// to ignore it (the boot runs DHCP on every link before the config is read): a global IPv4
// address, or with v6 a global IPv6 /128 (DHCPv6's; router advertisements' are /64). The
// kernel drops the routes through the link with its last address.
func releaseBootLease(link string, v6 bool) error {
	iface, err := net.InterfaceByName(link)
	if err != nil {
		return nil // the link is gone, and its addresses with it
	}

	conn, err := rtnetlink.Dial(nil)
	if err != nil {
		return fmt.Errorf("opening netlink: %w", err)
	}
	defer conn.Close()

	msgs, err := conn.Address.List()
	if err != nil {
		return fmt.Errorf("listing addresses: %w", err)
	}

	for i := range msgs {
		m := &msgs[i]
		if m.Index != uint32(iface.Index) || m.Attributes == nil || !m.Attributes.Address.IsGlobalUnicast() {
			continue
		}

		isV4 := m.Attributes.Address.To4() != nil
		if (v6 && (isV4 || m.PrefixLength != 128)) || (!v6 && !isV4) {
			continue
		}

		del := &rtnetlink.AddressMessage{
			Family: m.Family, PrefixLength: m.PrefixLength, Index: m.Index,
			Attributes: &rtnetlink.AddressAttributes{Address: m.Attributes.Address, Local: m.Attributes.Local},
		}

		if err = conn.Address.Delete(del); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("removing %s from %s: %w", m.Attributes.Address, link, err)
		}
	}

	return nil
}

// releaseIgnored takes the boot's lease away from each boot link the config now ignores, once
// (released remembers which); a link the config stops ignoring may be released again later.
func releaseIgnored(boot []string, ignored, released map[string]bool, v6 bool, log *zap.Logger) error {
	for _, link := range boot {
		switch {
		case !ignored[link]:
			delete(released, link)
		case !released[link]:
			if err := releaseBootLease(link, v6); err != nil {
				return err
			}

			log.Info("the config ignores the link: the boot's lease on it is taken away", zap.String("link", link))

			released[link] = true
		}
	}

	return nil
}
