package k8s

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/machined/kubeprism"
)

// kubePrismHost is where KubePrism listens, as upstream's.
const kubePrismHost = "127.0.0.1"

// KubePrismController runs KubePrism (machine.features.kubePrism): it publishes the API
// server endpoints (KubePrismEndpoints: this control plane's own API server, the cluster
// endpoint, and each control plane member's address), the balancer's config (KubePrismConfig),
// runs the balancer on 127.0.0.1:<port> and reports its health (KubePrismStatuses).
type KubePrismController struct{}

// Name implements controller.Controller.
func (ctrl *KubePrismController) Name() string { return "k8s.KubePrismController" }

// Inputs implements controller.Controller.
func (ctrl *KubePrismController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak},
		{Namespace: cluster.NamespaceName, Type: cluster.MemberType, Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *KubePrismController) Outputs() []controller.Output {
	return []controller.Output{
		{Type: k8s.KubePrismEndpointsType, Kind: controller.OutputExclusive},
		{Type: k8s.KubePrismConfigType, Kind: controller.OutputExclusive},
		{Type: k8s.KubePrismStatusesType, Kind: controller.OutputExclusive},
	}
}

// Run implements controller.Controller.
func (ctrl *KubePrismController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	var (
		lb       *kubeprism.LB
		stop     context.CancelFunc
		lbPort   int
		statusAt = time.NewTicker(2 * time.Second)
	)

	defer statusAt.Stop()

	stopLB := func() {
		if stop != nil {
			stop()
			stop, lb, lbPort = nil, nil, 0
		}
	}
	defer stopLB()

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-statusAt.C:
		}

		port, endpoints, err := ctrl.endpoints(ctx, r)
		if err != nil {
			return err
		}

		if port == 0 {
			stopLB()

			for _, md := range []*resource.Metadata{
				k8s.NewKubePrismEndpoints(k8s.NamespaceName, k8s.KubePrismEndpointsID).Metadata(),
				k8s.NewKubePrismConfig(k8s.NamespaceName, k8s.KubePrismConfigID).Metadata(),
				k8s.NewKubePrismStatuses(k8s.NamespaceName, k8s.KubePrismStatusesID).Metadata(),
			} {
				if err = r.Destroy(ctx, md); err != nil && !state.IsNotFoundError(err) {
					return err
				}
			}

			continue
		}

		if err = safe.WriterModify(ctx, r, k8s.NewKubePrismEndpoints(k8s.NamespaceName, k8s.KubePrismEndpointsID), func(res *k8s.KubePrismEndpoints) error {
			res.TypedSpec().Endpoints = endpoints

			return nil
		}); err != nil {
			return err
		}

		if err = safe.WriterModify(ctx, r, k8s.NewKubePrismConfig(k8s.NamespaceName, k8s.KubePrismConfigID), func(res *k8s.KubePrismConfig) error {
			*res.TypedSpec() = k8s.KubePrismConfigSpec{Host: kubePrismHost, Port: port, Endpoints: endpoints}

			return nil
		}); err != nil {
			return err
		}

		if lb != nil && port != lbPort {
			stopLB()
		}

		if lb == nil {
			lb, lbPort = kubeprism.New(log), port

			lbCtx, cancel := context.WithCancel(ctx)
			stop = cancel
			addr := net.JoinHostPort(kubePrismHost, strconv.Itoa(port))

			go func(lb *kubeprism.LB) {
				if err := lb.Serve(lbCtx, addr); err != nil {
					log.Error("KubePrism stopped", zap.String("address", addr), zap.Error(err))
				}
			}(lb)

			log.Info("KubePrism serving", zap.String("address", addr))
		}

		upstreams := make([]string, 0, len(endpoints))
		for _, e := range endpoints {
			upstreams = append(upstreams, net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port))))
		}

		lb.SetUpstreams(upstreams)

		if err = safe.WriterModify(ctx, r, k8s.NewKubePrismStatuses(k8s.NamespaceName, k8s.KubePrismStatusesID), func(res *k8s.KubePrismStatuses) error {
			*res.TypedSpec() = k8s.KubePrismStatusesSpec{Host: net.JoinHostPort(kubePrismHost, strconv.Itoa(port)), Healthy: lb.Healthy()}

			return nil
		}); err != nil {
			return err
		}
	}
}

// endpoints returns KubePrism's port (0: disabled, or no config) and the API servers to
// balance over: this control plane's own first, then the cluster endpoint, then every control
// plane member's address on the endpoint's port.
func (ctrl *KubePrismController) endpoints(ctx context.Context, r controller.Runtime) (int, []k8s.KubePrismEndpoint, error) {
	cfg, err := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID)
	if err != nil {
		if state.IsNotFoundError(err) {
			return 0, nil, nil
		}

		return 0, nil, err
	}

	c := cfg.Config()
	if c.Machine() == nil || c.Cluster() == nil || !c.Machine().Features().KubePrism().Enabled() {
		return 0, nil, nil
	}

	endpoint := c.Cluster().Endpoint()
	if endpoint == nil {
		return 0, nil, fmt.Errorf("KubePrism needs cluster.controlPlane.endpoint")
	}

	port, err := strconv.Atoi(endpoint.Port())
	if err != nil || port == 0 {
		port = 6443
	}

	var out []k8s.KubePrismEndpoint

	add := func(host string, port int) {
		e := k8s.KubePrismEndpoint{Host: host, Port: uint32(port)}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}

	if c.Machine().Type().IsControlPlane() {
		add("localhost", c.Cluster().LocalAPIServerPort())
	}

	add(endpoint.Hostname(), port)

	members, err := safe.ReaderListAll[*cluster.Member](ctx, r)
	if err != nil {
		return 0, nil, err
	}

	// A member's addresses include its CNI interfaces' (flannel.1, cni0): pod and service
	// subnet addresses are no way to a control plane for a node whose pod network is not up.
	var clusterNets []netip.Prefix

	for _, cidr := range slices.Concat(c.Cluster().Network().PodCIDRs(), c.Cluster().Network().ServiceCIDRs()) {
		if p, err := netip.ParsePrefix(cidr); err == nil {
			clusterNets = append(clusterNets, p)
		}
	}

	for m := range members.All() {
		if !m.TypedSpec().MachineType.IsControlPlane() {
			continue
		}

		for _, a := range m.TypedSpec().Addresses {
			if !slices.ContainsFunc(clusterNets, func(p netip.Prefix) bool { return p.Contains(a) }) {
				add(a.String(), port)
			}
		}
	}

	return c.Machine().Features().KubePrism().Port(), out, nil
}
