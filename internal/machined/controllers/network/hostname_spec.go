// Package network holds the controllers of the network namespace.
package network

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
)

// HostnameSpecController writes the hostname the node should have: from machine.network.hostname
// in the config, else one generated from the node address, stable across restarts.
type HostnameSpecController struct {
	Address string // the node address, seed of the generated hostname
}

// Name implements controller.Controller.
func (ctrl *HostnameSpecController) Name() string { return "network.HostnameSpecController" }

// Inputs implements controller.Controller.
func (ctrl *HostnameSpecController) Inputs() []controller.Input {
	return []controller.Input{{
		Namespace: config.NamespaceName, Type: config.MachineConfigType,
		ID: optional.Some(config.ActiveID), Kind: controller.InputWeak,
	}}
}

// Outputs implements controller.Controller.
func (ctrl *HostnameSpecController) Outputs() []controller.Output {
	return []controller.Output{{Type: network.HostnameSpecType, Kind: controller.OutputExclusive}}
}

// GeneratedHostname is the hostname of a node whose config sets none.
func GeneratedHostname(seed string) string {
	sum := sha256.Sum256([]byte(seed))
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"

	var b strings.Builder

	b.WriteString("talos-")

	for i := range 6 {
		if i == 3 {
			b.WriteByte('-')
		}

		b.WriteByte(letters[int(sum[i])%len(letters)])
	}

	return b.String()
}

// Run implements controller.Controller.
func (ctrl *HostnameSpecController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
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

		hostname, domain, layer := GeneratedHostname(ctrl.Address), "", network.ConfigDefault

		if cfg != nil && cfg.Config().Machine() != nil {
			if configured := cfg.Config().Machine().Network().Hostname(); configured != "" {
				layer = network.ConfigMachineConfiguration
				hostname, domain, _ = strings.Cut(configured, ".")
			}
		}

		if err = safe.WriterModify(ctx, r, network.NewHostnameSpec(network.NamespaceName, network.HostnameID), func(res *network.HostnameSpec) error {
			spec := res.TypedSpec()
			spec.Hostname, spec.Domainname, spec.ConfigLayer = hostname, domain, layer

			return nil
		}); err != nil {
			return fmt.Errorf("writing hostname spec: %w", err)
		}
	}
}
