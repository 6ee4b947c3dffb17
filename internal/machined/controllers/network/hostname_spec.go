// Package network holds the controllers of the network namespace.
package network

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
)

// HostnameSpecController writes the hostname the node should have.
type HostnameSpecController = transform.Controller[*network.NodeAddress, *network.HostnameSpec]

// NewHostnameSpecController declares HostnameSpec: machine.network.hostname from the config,
// else the platform's (platformHostname, which may be a FQDN: nocloud's local-hostname), else a
// name generated from address, the one the node was started with (stable across restarts, and
// unchanged when links come up later). The default NodeAddress, not the config,
// is the input: it exists from the start, and a node has a hostname before it has a config
// (maintenance mode answers with it).
func NewHostnameSpecController(address, platformHostname string) *HostnameSpecController {
	return transform.NewController(
		transform.Settings[*network.NodeAddress, *network.HostnameSpec]{
			Name: "network.HostnameSpecController",
			MapMetadataOptionalFunc: func(addr *network.NodeAddress) optional.Optional[*network.HostnameSpec] {
				if addr.Metadata().ID() != network.NodeAddressDefaultID {
					return optional.None[*network.HostnameSpec]()
				}

				return optional.Some(network.NewHostnameSpec(network.NamespaceName, network.HostnameID))
			},
			TransformFunc: func(ctx context.Context, r controller.Reader, _ *zap.Logger, _ *network.NodeAddress, out *network.HostnameSpec) error {
				cfg, err := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID)
				if err != nil && !state.IsNotFoundError(err) {
					return fmt.Errorf("reading machine config: %w", err)
				}

				spec := out.TypedSpec()
				spec.Hostname, spec.Domainname, spec.ConfigLayer = GeneratedHostname(address), "", network.ConfigDefault
				if platformHostname != "" {
					spec.ConfigLayer = network.ConfigPlatform
					spec.Hostname, spec.Domainname, _ = strings.Cut(platformHostname, ".")
				}

				if cfg != nil && cfg.Config().Machine() != nil {
					if configured := cfg.Config().Machine().Network().Hostname(); configured != "" {
						spec.ConfigLayer = network.ConfigMachineConfiguration
						spec.Hostname, spec.Domainname, _ = strings.Cut(configured, ".")
					}
				}

				return nil
			},
		},
		transform.WithExtraInputs(controller.Input{
			Namespace: config.NamespaceName, Type: config.MachineConfigType,
			ID: optional.Some(config.ActiveID), Kind: controller.InputWeak,
		}),
	)
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
