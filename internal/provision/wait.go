package provision

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/talos-go/talos/internal/health"
)

// Client connects to the cluster through its control planes' apid.
func (c *Cluster) Client(ctx context.Context, cfg *clientconfig.Config) (*client.Client, error) {
	var eps []string

	for _, n := range c.Nodes {
		if n.IsControlPlane() {
			eps = append(eps, n.Address)
		}
	}

	return client.New(ctx, client.WithConfig(cfg), client.WithEndpoints(eps...), client.WithDefaultGRPCDialOptions())
}

// Step retries fn every interval until it succeeds or ctx ends, printing what it waits for.
func Step(ctx context.Context, progress io.Writer, what string, fn func(ctx context.Context) error) error {
	start := time.Now()
	fmt.Fprintf(progress, "waiting for %s\n", what)

	var last error

	for {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		last = fn(callCtx)
		cancel()

		if last == nil {
			fmt.Fprintf(progress, "  %s: OK (%s)\n", what, time.Since(start).Round(10*time.Millisecond))

			return nil
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out waiting for %s: %w (node logs are in the cluster folder)", what, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// controlPlanes returns the cluster's control-plane nodes, the first one first.
func (c *Cluster) controlPlanes() []Node {
	var cps []Node

	for _, n := range c.Nodes {
		if n.IsControlPlane() {
			cps = append(cps, n)
		}
	}

	return cps
}

// Bootstrap waits for apid on the first control plane and bootstraps etcd there (a node that
// is bootstrapped already counts as done). It reports false when the nodes serve no etcd.
func Bootstrap(ctx context.Context, c *Cluster, cfg *clientconfig.Config, progress io.Writer) (bool, error) {
	cps := c.controlPlanes()
	if len(cps) == 0 {
		return false, fmt.Errorf("cluster %s has no control plane to bootstrap", c.Name)
	}

	cl, err := c.Client(ctx, cfg)
	if err != nil {
		return false, err
	}
	defer cl.Close()

	if err = Step(ctx, progress, "apid on "+cps[0].Name, func(ctx context.Context) error {
		_, err := cl.Version(client.WithNode(ctx, cps[0].Address))

		return err
	}); err != nil {
		return false, err
	}

	etcd := true

	if cps[0].Type == TypeInit {
		fmt.Fprintf(progress, "etcd bootstraps itself on the init node %s\n", cps[0].Name)

		return etcd, nil
	}

	err = Step(ctx, progress, "etcd bootstrap on "+cps[0].Name, func(ctx context.Context) error {
		err := cl.Bootstrap(client.WithNode(ctx, cps[0].Address), &machine.BootstrapRequest{})

		switch status.Code(err) {
		case codes.OK, codes.AlreadyExists:
			return nil
		case codes.Unimplemented:
			etcd = false

			return nil
		case codes.FailedPrecondition:
			if strings.Contains(err.Error(), "already") {
				return nil
			}
		}

		return err
	})

	return etcd, err
}

// WaitOptions are how far Wait follows the cluster.
type WaitOptions struct {
	// SkipNodeReadiness stops the Kubernetes checks once the control plane's components are
	// ready (upstream's --skip-k8s-node-readiness-check): nodes need not be Ready.
	SkipNodeReadiness bool
}

// Wait bootstraps etcd (see Bootstrap) and follows the cluster to health: apid answers on every
// node, every control plane is a voting etcd member, every service is healthy, and, when the
// nodes run kubelet, upstream's Kubernetes checks pass. It returns the admin kubeconfig then
// (nil when the cluster runs no Kubernetes).
func Wait(ctx context.Context, c *Cluster, cfg *clientconfig.Config, progress io.Writer, opts WaitOptions) ([]byte, error) {
	etcd, err := Bootstrap(ctx, c, cfg, progress)
	if err != nil {
		return nil, err
	}

	cl, err := c.Client(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer cl.Close()

	cps := c.controlPlanes()

	for _, n := range c.Nodes {
		if n.Name == cps[0].Name {
			continue // Bootstrap waited for it
		}

		if err = Step(ctx, progress, "apid on "+n.Name, func(ctx context.Context) error {
			_, err := cl.Version(client.WithNode(ctx, n.Address))

			return err
		}); err != nil {
			return nil, err
		}
	}

	if !etcd {
		fmt.Fprintln(progress, "  etcd is not served by this build: skipping bootstrap")
	} else if err = Step(ctx, progress, fmt.Sprintf("%d voting etcd members", len(cps)), func(ctx context.Context) error {
		resp, err := cl.EtcdMemberList(client.WithNode(ctx, cps[0].Address), &machine.EtcdMemberListRequest{})
		if err != nil {
			return err
		}

		voters := 0

		for _, msg := range resp.Messages {
			for _, m := range msg.Members {
				if !m.IsLearner {
					voters++
				}
			}
		}

		if voters != len(cps) {
			return fmt.Errorf("%d of %d members are voters", voters, len(cps))
		}

		return nil
	}); err != nil {
		return nil, err
	}

	kubelet := false

	for _, n := range c.Nodes {
		if err = Step(ctx, progress, "services on "+n.Name, func(ctx context.Context) error {
			resp, err := cl.MachineClient.ServiceList(client.WithNode(ctx, n.Address), &emptypb.Empty{})
			if err != nil {
				return err
			}

			for _, msg := range resp.Messages {
				for _, svc := range msg.Services {
					kubelet = kubelet || svc.Id == "kubelet"
				}
			}

			return Unhealthy(resp)
		}); err != nil {
			return nil, err
		}
	}

	if !kubelet {
		return nil, nil // process mode, or an image without Kubernetes
	}

	return waitKubernetes(ctx, c, cl, progress, opts)
}

// waitKubernetes follows Kubernetes to health with upstream's checks, through the admin
// kubeconfig of the first control plane.
func waitKubernetes(ctx context.Context, c *Cluster, cl *client.Client, progress io.Writer, opts WaitOptions) ([]byte, error) {
	var (
		cps   = c.controlPlanes()
		data  []byte
		nodes health.Nodes
	)

	if err := Step(ctx, progress, "the kubeconfig from "+cps[0].Name, func(ctx context.Context) (err error) {
		data, err = cl.Kubeconfig(client.WithNode(ctx, cps[0].Address))

		return err
	}); err != nil {
		return nil, err
	}

	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		return nil, fmt.Errorf("the node's kubeconfig: %w", err)
	}

	for _, n := range c.Nodes {
		if n.IsControlPlane() {
			nodes.ControlPlanes = append(nodes.ControlPlanes, n.Address)
		} else {
			nodes.Workers = append(nodes.Workers, n.Address)
		}
	}

	// Components the control planes' config turns off are not waited for (a config the cluster
	// folder does not hold, with --skip-injecting-config, waits for all).
	if loaded, err := configloader.NewFromFile(cps[0].Config); err == nil {
		nodes.Disabled = health.DisabledComponents(loaded)
	}

	checks, err := health.Kubernetes(cfg, nodes)
	if err != nil {
		return nil, err
	}

	if opts.SkipNodeReadiness {
		checks = health.ComponentsOnly(checks)
	}

	if err = health.Run(ctx, checks, time.Second, func(line string) { fmt.Fprintln(progress, "  "+line) }); err != nil {
		return nil, fmt.Errorf("%w (node logs are in the cluster folder; `talosctl logs kubelet` and `talosctl containers -k` tell more)", err)
	}

	return data, nil
}

// Unhealthy fails when a service of any node in resp is neither running (with a passing or not
// yet known health check), finished nor skipped (e.g. etcd on a worker).
func Unhealthy(resp *machine.ServiceListResponse) error {
	var bad []string

	for _, msg := range resp.Messages {
		for _, svc := range msg.Services {
			switch svc.State {
			case "Skipped", "Finished":
				continue
			case "Running":
				if svc.Health == nil || svc.Health.Unknown || svc.Health.Healthy {
					continue
				}
			}

			bad = append(bad, fmt.Sprintf("%s: %s (%s)", msg.GetMetadata().GetHostname(), svc.Id, svc.State))
		}
	}

	if len(bad) > 0 {
		return fmt.Errorf("services not healthy: %s", strings.Join(bad, ", "))
	}

	return nil
}
