package cluster

import (
	"context"
	"crypto/aes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	discoveryclient "github.com/siderolabs/discovery-client/pkg/client"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/version"
)

// DiscoveryTTL is how long the service keeps what a node sent without a refresh (the client
// refreshes at half of it), as upstream's.
const DiscoveryTTL = 30 * time.Minute

// ServicePrefix starts the IDs of the raw affiliates the discovery service returned.
const ServicePrefix = "service/"

// DiscoveryServiceController speaks upstream's discovery service protocol (discovery-client):
// it sends the local affiliate, encrypted with the cluster's key, and the KubeSpan endpoints
// harvested for the others (and withdraws the affiliate while the node is being reset), and
// publishes the affiliates of the cluster the service returns as raw affiliates (cluster-raw,
// ID service/<node ID>).
type DiscoveryServiceController struct {
	// Roots are the CAs a TLS discovery service's certificate must chain to; nil: the system's.
	Roots func() (*x509.CertPool, error)
	// TTL is how long the service keeps what this node sent; 0: DiscoveryTTL. Only tests set
	// it, to see a node that died without withdrawing expire in seconds rather than 30 minutes.
	TTL time.Duration
}

// Name implements controller.Controller.
func (ctrl *DiscoveryServiceController) Name() string { return "cluster.DiscoveryServiceController" }

// Inputs implements controller.Controller.
func (ctrl *DiscoveryServiceController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: config.NamespaceName, Type: cluster.ConfigType, ID: optional.Some(cluster.ConfigID), Kind: controller.InputWeak},
		{Namespace: cluster.NamespaceName, Type: cluster.IdentityType, ID: optional.Some(cluster.LocalIdentity), Kind: controller.InputWeak},
		{Namespace: kubespan.NamespaceName, Type: kubespan.EndpointType, Kind: controller.InputWeak},
		{Namespace: runtimeres.NamespaceName, Type: runtimeres.MachineStatusType, ID: optional.Some(runtimeres.MachineStatusID), Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *DiscoveryServiceController) Outputs() []controller.Output {
	// Shared: the Kubernetes registry writes its raw affiliates beside these, and the network
	// controllers the node's own addresses.
	return []controller.Output{{Type: cluster.AffiliateType, Kind: controller.OutputShared}, {Type: network.AddressStatusType, Kind: controller.OutputShared}}
}

// session is one discovery client, for one version of the discovery config.
type session struct {
	client  *discoveryclient.Client
	cancel  context.CancelFunc
	done    chan error
	version resource.Version
	sent    any  // the last local data given to the client
	deleted bool // the local affiliate was withdrawn
}

// stop ends the client and waits for it; its error no longer matters.
func (s *session) stop() {
	if s != nil {
		s.cancel()
		<-s.done //nolint:errcheck // a stopped client's error is context.Canceled or nothing
	}
}

// Run implements controller.Controller.
//
//nolint:gocyclo,cyclop // the loop reads its inputs one after the other
func (ctrl *DiscoveryServiceController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	var (
		s       *session
		localID string
	)

	defer func() { s.stop() }()

	notify := make(chan struct{}, 1)

	for {
		var done chan error
		if s != nil {
			done = s.done
		}

		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-notify:
		case err := <-done:
			s.cancel()
			s = nil

			if err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("discovery service client: %w", err)
			}
		}

		disc, err := readOptional[*cluster.Config](ctx, r, cluster.ConfigID)
		if err != nil {
			return err
		}

		if disc == nil || !disc.TypedSpec().RegistryServiceEnabled {
			// Registry off (or discovery): withdraw this node from the service, keeping the
			// client until it has (it stops at the next config that turns the registry on),
			// and list nobody.
			if s != nil && !s.deleted {
				s.client.DeleteLocalAffiliate()
				s.deleted = true
			}

			if err = ctrl.publish(ctx, r, nil, nil); err != nil {
				return err
			}

			continue
		}

		identity, err := readOptional[*cluster.Identity](ctx, r, cluster.LocalIdentity)
		if err != nil || identity == nil {
			if err != nil {
				return err
			}

			continue
		}

		if id := identity.TypedSpec().NodeID; id != localID {
			localID = id

			if err = r.UpdateInputs(append(ctrl.Inputs(), controller.Input{
				Namespace: cluster.NamespaceName, Type: cluster.AffiliateType, ID: optional.Some(localID), Kind: controller.InputWeak,
			})); err != nil {
				return err
			}

			s.stop()
			s = nil
		}

		if s != nil && !s.version.Equal(disc.Metadata().Version()) {
			// A new endpoint, cluster ID or key: a new client.
			s.stop()
			s = nil
		}

		local, err := readOptional[*cluster.Affiliate](ctx, r, localID)
		if err != nil || local == nil {
			if err != nil {
				return err
			}

			continue
		}

		harvested, err := safe.ReaderListAll[*kubespan.Endpoint](ctx, r)
		if err != nil {
			return fmt.Errorf("listing KubeSpan endpoints: %w", err)
		}

		if s == nil {
			if s, err = ctrl.start(ctx, log, disc, localID, notify); err != nil {
				return err
			}
		}

		status, err := readOptional[*runtimeres.MachineStatus](ctx, r, runtimeres.MachineStatusID)
		if err != nil {
			return err
		}

		var others []*kubespan.EndpointSpec
		for e := range harvested.All() {
			others = append(others, e.TypedSpec())
		}

		// Only a change is sent: the service echoes each update back through the watch, which
		// would otherwise loop.
		sent := []any{*local.TypedSpec(), others}

		switch {
		case status != nil && status.TypedSpec().Stage == runtimeres.MachineStageResetting:
			// A node being reset leaves the cluster: the others stop listing it at once rather
			// than after the TTL (as upstream). A reset that fails sends it again.
			if !s.deleted {
				s.client.DeleteLocalAffiliate()
				s.sent, s.deleted = nil, true
			}
		case !reflect.DeepEqual(sent, s.sent):
			if err = s.client.SetLocalData(toProto(local.TypedSpec()), otherEndpoints(others)); err != nil {
				return fmt.Errorf("discovery service: setting the local affiliate: %w", err)
			}

			s.sent, s.deleted = sent, false
		}

		if err = ctrl.publish(ctx, r, s.client.GetAffiliates(), s.client.GetPublicIP()); err != nil {
			return err
		}
	}
}

// start runs a discovery client for the config disc until the session stops.
func (ctrl *DiscoveryServiceController) start(ctx context.Context, log *zap.Logger, disc *cluster.Config, localID string, notify chan<- struct{}) (*session, error) {
	spec := disc.TypedSpec()

	block, err := aes.NewCipher(spec.ServiceEncryptionKey)
	if err != nil {
		return nil, fmt.Errorf("cluster.secret is %d bytes, and the discovery service's affiliates are encrypted with it as an AES key (16, 24 or 32 bytes): generate it with talosctl gen secrets",
			len(spec.ServiceEncryptionKey))
	}

	ttl := ctrl.TTL
	if ttl <= 0 {
		ttl = DiscoveryTTL
	}

	opts := discoveryclient.Options{
		Cipher:        block,
		Endpoint:      spec.ServiceEndpoint,
		ClusterID:     spec.ServiceClusterID,
		AffiliateID:   localID,
		ClientVersion: version.Tag,
		TTL:           ttl,
		Insecure:      spec.ServiceEndpointInsecure,
	}

	if !opts.Insecure {
		opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}

		if ctrl.Roots != nil {
			if opts.TLSConfig.RootCAs, err = ctrl.Roots(); err != nil {
				return nil, fmt.Errorf("discovery service: reading the trusted CAs: %w", err)
			}
		}
	}

	client, err := discoveryclient.NewClient(opts)
	if err != nil {
		return nil, fmt.Errorf("discovery service: %w", err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	s := &session{client: client, cancel: cancel, done: make(chan error, 1), version: disc.Metadata().Version()}

	// The client logs its own failures (the endpoint and the error, never the key) and retries.
	log.Info("discovery service client started", zap.String("endpoint", spec.ServiceEndpoint), zap.Bool("insecure", spec.ServiceEndpointInsecure))

	go func() { s.done <- client.Run(runCtx, log, notify) }()

	return s, nil
}

// PublicAddressID is the AddressStatus (namespace cluster) holding the node's address as the
// discovery service saw it, which KubeSpan announces as an endpoint too (a node behind NAT).
const PublicAddressID = "service"

// publish writes the affiliates the service returned as raw affiliates and the node's address
// as the service saw it (publicIP, empty while unknown), and removes what this controller wrote
// before and does no longer hold.
func (ctrl *DiscoveryServiceController) publish(ctx context.Context, r controller.Runtime, affiliates []*discoveryclient.Affiliate, publicIP []byte) error {
	r.StartTrackingOutputs()

	if addr, ok := parseAddr(publicIP); ok {
		if err := safe.WriterModify(ctx, r, network.NewAddressStatus(cluster.NamespaceName, PublicAddressID), func(res *network.AddressStatus) error {
			res.TypedSpec().Address = netip.PrefixFrom(addr, addr.BitLen())

			return nil
		}); err != nil {
			return fmt.Errorf("writing the public address: %w", err)
		}
	}

	for _, a := range affiliates {
		if a.Affiliate == nil || a.Affiliate.NodeId == "" {
			continue
		}

		if err := safe.WriterModify(ctx, r, cluster.NewAffiliate(cluster.RawNamespaceName, ServicePrefix+a.Affiliate.NodeId), func(res *cluster.Affiliate) error {
			*res.TypedSpec() = fromProto(a.Affiliate, a.Endpoints)

			return nil
		}); err != nil {
			return fmt.Errorf("writing raw affiliate %s: %w", a.Affiliate.NodeId, err)
		}
	}

	return r.CleanupOutputs(ctx, resource.NewMetadata(cluster.RawNamespaceName, cluster.AffiliateType, "", resource.VersionUndefined),
		resource.NewMetadata(cluster.NamespaceName, network.AddressStatusType, "", resource.VersionUndefined))
}
