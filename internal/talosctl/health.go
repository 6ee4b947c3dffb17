package talosctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clusterres "github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/emptypb"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/talos-go/talos/internal/health"
	"github.com/talos-go/talos/internal/provision"
)

func healthCmd(g *Global) *cobra.Command {
	var (
		server, runE2E          bool
		waitTimeout             time.Duration
		controlPlanes, workers  []string
		initNode, forceEndpoint string
	)

	cmd := &cobra.Command{
		Use:   "health",
		Short: "Check cluster health",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			check := func(ctx context.Context, s *session) error {
				ctx, cancel := context.WithTimeout(ctx, waitTimeout)
				defer cancel()

				progress := cmd.ErrOrStderr()
				report := func(line string) { fmt.Fprintln(progress, line) }

				// The checks cover the named cluster nodes when given, else every member the
				// node knows of (discovery), else -n, as upstream's checks do.
				nodes := health.Nodes{ControlPlanes: slices.Concat(nonEmpty(initNode), controlPlanes), Workers: workers}
				if len(nodes.All()) == 0 && !s.local {
					nodes = memberNodes(ctx, s)
					if all := nodes.All(); len(all) > 0 {
						fmt.Fprintf(progress, "discovered %d cluster members: %s\n", len(all), strings.Join(all, ", "))
					}
				}

				checked := *s
				if all := nodes.All(); len(all) > 0 && !s.local {
					checked.nodes = all
				}

				if server {
					ran, err := serverHealth(ctx, s, nodes, waitTimeout, report)
					if err != nil || ran {
						if err == nil {
							// The server checks etcd and Kubernetes; every node's API is checked from here.
							err = health.Run(ctx, apiChecks(&checked), time.Second, report)
						}

						return err
					}

					report("the node has no server-side health check: running the client-side checks")
				}

				checks := apiChecks(&checked)

				k8s, err := kubernetesChecks(ctx, s, &checked, nodes, forceEndpoint)
				if err != nil {
					return err
				}

				if err = health.Run(ctx, append(checks, k8s...), time.Second, report); err != nil {
					return fmt.Errorf("%w (raise --wait-timeout, or look at `talosctl services` and `talosctl logs <service>`)", err)
				}

				return nil
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				if err := check(ctx, s); err != nil || !runE2E {
					return err
				}

				return quickE2E(ctx, cmd.OutOrStdout(), s)
			})
		},
	}

	f := cmd.Flags()
	f.BoolVar(&server, "server", true, "run server-side check")
	f.BoolVar(&runE2E, "run-e2e", false, "run Kubernetes e2e test")
	f.DurationVar(&waitTimeout, "wait-timeout", 20*time.Minute, "timeout to wait for the cluster to be ready")
	f.StringSliceVar(&controlPlanes, "control-plane-nodes", nil, "specify IPs of control plane nodes")
	f.StringSliceVar(&workers, "worker-nodes", nil, "specify IPs of worker nodes")
	f.StringVar(&initNode, "init-node", "", "specify IPs of init node")
	f.StringVar(&forceEndpoint, "k8s-endpoint", "", "use endpoint instead of kubeconfig default")

	return cmd
}

// serverHealth runs ClusterService/HealthCheck on the session's node and prints its progress;
// ran is false when the node does not serve it.
func serverHealth(ctx context.Context, s *session, nodes health.Nodes, waitTimeout time.Duration, report func(string)) (ran bool, err error) {
	ctx, err = s.single(ctx, "server-side health check")
	if err != nil {
		return false, err
	}

	stream, err := s.c.ClusterHealthCheck(ctx, waitTimeout, &clusterapi.ClusterInfo{
		ControlPlaneNodes: nodes.ControlPlanes,
		WorkerNodes:       nodes.Workers,
	})
	if err != nil {
		return false, fmt.Errorf("starting the health check: %w%s", err, hint(err))
	}

	for first := true; ; first = false {
		msg, err := stream.Recv()
		if first && client.StatusCode(err) == codes.Unimplemented {
			return false, nil
		}

		if errors.Is(err, io.EOF) {
			return true, nil
		}

		if err != nil {
			return true, fmt.Errorf("healthcheck error: %w%s", err, hint(err))
		}

		if e := msg.GetMetadata().GetError(); e != "" {
			return true, fmt.Errorf("healthcheck error: %s", e)
		}

		report(msg.GetMessage())
	}
}

// apiChecks: every node answers its API, and all of its services are running and healthy.
func apiChecks(s *session) []health.Check {
	return []health.Check{
		{Name: "all nodes to answer the API", Run: func(ctx context.Context) error {
			_, err := client.FilterMessages(s.c.MachineClient.Version(s.ctx(ctx), &emptypb.Empty{}))

			return err
		}},
		{Name: "all services to be healthy", Run: func(ctx context.Context) error {
			resp, err := s.c.ServiceList(s.ctx(ctx))
			if err != nil {
				return err
			}

			return provision.Unhealthy(resp)
		}},
	}
}

// kubernetesChecks are the Kubernetes checks run from here with the admin kubeconfig of the
// first control plane, when the nodes run kubelet; none otherwise (process-mode nodes run no
// Kubernetes).
func kubernetesChecks(ctx context.Context, s, checked *session, nodes health.Nodes, endpoint string) ([]health.Check, error) {
	resp, err := s.c.ServiceList(checked.ctx(ctx))
	if err != nil || !slices.ContainsFunc(resp.Messages, func(m *machine.ServiceList) bool {
		return slices.ContainsFunc(m.Services, func(svc *machine.ServiceInfo) bool { return svc.Id == "kubelet" })
	}) {
		return nil, nil //nolint:nilerr // the API checks report a node that does not answer
	}

	if len(nodes.ControlPlanes) == 0 {
		return nil, errors.New("the Kubernetes checks need the control plane nodes: pass --control-plane-nodes and --worker-nodes")
	}

	data, err := s.c.Kubeconfig(s.nodeCtx(ctx, nodes.ControlPlanes[0]))
	if err != nil {
		return nil, fmt.Errorf("downloading the kubeconfig from %s: %w%s", nodes.ControlPlanes[0], err, hint(err))
	}

	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		return nil, fmt.Errorf("the node's kubeconfig: %w", err)
	}

	if endpoint != "" {
		cfg.Host = "https://" + net.JoinHostPort(endpoint, "6443")
	}

	// The components that control plane's config disables are not waited for; unread, all are.
	if mc, err := safe.StateGet[*configres.MachineConfig](s.nodeCtx(ctx, nodes.ControlPlanes[0]), s.c.COSI,
		resource.NewMetadata(configres.NamespaceName, configres.MachineConfigType, configres.ActiveID, resource.VersionUndefined)); err == nil {
		nodes.Disabled = health.DisabledComponents(mc.Provider())
	}

	return health.Kubernetes(cfg, nodes)
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}

	return []string{s}
}

// memberNodes lists the first address of every cluster member the session's node knows of,
// by machine type; none when it cannot tell.
func memberNodes(ctx context.Context, s *session) health.Nodes {
	var nodes health.Nodes

	members, err := safe.StateListAll[*clusterres.Member](s.nodeCtx(ctx, s.nodes[0]), s.c.COSI)
	if err != nil {
		return nodes
	}

	for m := range members.All() {
		spec := m.TypedSpec()
		if len(spec.Addresses) == 0 {
			continue
		}

		if spec.MachineType.IsControlPlane() {
			nodes.ControlPlanes = append(nodes.ControlPlanes, spec.Addresses[0].String())
		} else {
			nodes.Workers = append(nodes.Workers, spec.Addresses[0].String())
		}
	}

	slices.Sort(nodes.ControlPlanes)
	slices.Sort(nodes.Workers)

	return nodes
}
