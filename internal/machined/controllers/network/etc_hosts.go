package network

import (
	"context"
	"fmt"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
)

// EtcHostsController keeps the node's /etc/hosts (Path, the file bound over it) in step with
// the hostname in effect and machine.network.extraHostEntries, as upstream's etc file
// controller: localhost, the node's address with its names, then one line per extra entry.
type EtcHostsController struct {
	// Address is the node's own address, listed with its names.
	Address string
	// Path is the file written in place (a bind mount's source stays bound).
	Path string
}

// Name implements controller.Controller.
func (ctrl *EtcHostsController) Name() string { return "network.EtcHostsController" }

// Inputs implements controller.Controller.
func (ctrl *EtcHostsController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: network.NamespaceName, Type: network.HostnameStatusType, ID: optional.Some(network.HostnameID), Kind: controller.InputWeak},
		{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller: a file only.
func (ctrl *EtcHostsController) Outputs() []controller.Output { return nil }

// Run implements controller.Controller.
func (ctrl *EtcHostsController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		status, err := safe.ReaderGetByID[*network.HostnameStatus](ctx, r, network.HostnameID)
		if state.IsNotFoundError(err) {
			continue // the launcher's file stands until the hostname is known
		} else if err != nil {
			return fmt.Errorf("reading the hostname status: %w", err)
		}

		cfg, err := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID)
		if err != nil && !state.IsNotFoundError(err) {
			return fmt.Errorf("reading machine config: %w", err)
		}

		var extra []talosconfig.ExtraHost
		if cfg != nil && cfg.Config().Machine() != nil && cfg.Config().Machine().Network() != nil {
			extra = cfg.Config().Machine().Network().ExtraHosts()
		}

		content := HostsFile(ctrl.Address, status.TypedSpec().Hostname, status.TypedSpec().Domainname, extra)

		if err = writeInPlace(ctrl.Path, content); err != nil {
			return fmt.Errorf("writing %s: %w", ctrl.Path, err)
		}

		r.ResetRestartBackoff()
	}
}

// HostsFile renders /etc/hosts: localhost, the node's address with its names (the full name
// first), and each extra entry as "ip alias...".
func HostsFile(address, hostname, domain string, extra []talosconfig.ExtraHost) string {
	var b strings.Builder

	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")

	names := hostname
	if domain != "" {
		names = hostname + "." + domain + "\t" + hostname
	}

	if address != "" && hostname != "" {
		fmt.Fprintf(&b, "%s\t%s\n", address, names)
	}

	for _, h := range extra {
		fmt.Fprintf(&b, "%s\t%s\n", h.IP(), strings.Join(h.Aliases(), " "))
	}

	return b.String()
}
