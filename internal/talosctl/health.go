package talosctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clusterres "github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talos-go/talos/internal/provision"
)

func healthCmd(g *Global) *cobra.Command {
	var (
		server                  bool
		waitTimeout             time.Duration
		controlPlanes, workers  []string
		initNode, forceEndpoint string
	)

	cmd := &cobra.Command{
		Use:   "health",
		Short: "Check cluster health",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, s *session) error {
				// The client-side checks cover the named cluster nodes when given, else -n, else
				// every member the node knows of (discovery), as upstream's checks do.
				checked := *s
				if named := slices.Concat(nonEmpty(initNode), controlPlanes, workers); len(named) > 0 && !s.local {
					checked.nodes = named
				} else if len(g.Nodes) == 0 && !s.local {
					if members := memberAddresses(ctx, s); len(members) > 0 {
						fmt.Fprintf(cmd.ErrOrStderr(), "discovered %d cluster members: %s\n", len(members), strings.Join(members, ", "))
						checked.nodes = members
					}
				}

				if !server {
					return clientHealth(ctx, cmd.ErrOrStderr(), &checked, waitTimeout)
				}

				outer := ctx

				ctx, err := s.single(ctx, "server-side health check")
				if err != nil {
					return err
				}

				controlPlanes = slices.Concat(nonEmpty(initNode), controlPlanes)

				stream, err := s.c.ClusterHealthCheck(ctx, waitTimeout, &clusterapi.ClusterInfo{
					ControlPlaneNodes: controlPlanes,
					WorkerNodes:       workers,
					ForceEndpoint:     forceEndpoint,
				})
				if err != nil {
					return fmt.Errorf("starting the health check: %w%s", err, hint(err))
				}

				for first := true; ; first = false {
					msg, err := stream.Recv()
					if first && client.StatusCode(err) == codes.Unimplemented {
						// Our nodes do not serve the server-side check yet: run the same checks
						// from here rather than failing.
						fmt.Fprintln(cmd.ErrOrStderr(), "the node has no server-side health check: running the client-side checks")

						return clientHealth(outer, cmd.ErrOrStderr(), &checked, waitTimeout)
					}

					if errors.Is(err, io.EOF) || client.StatusCode(err) == codes.Canceled {
						return nil
					}

					if err != nil {
						return fmt.Errorf("health check: %w%s", err, hint(err))
					}

					if e := msg.GetMetadata().GetError(); e != "" {
						return fmt.Errorf("health check failed: %s", e)
					}

					fmt.Fprintln(cmd.ErrOrStderr(), msg.GetMessage())
				}
			})
		},
	}

	f := cmd.Flags()
	f.BoolVar(&server, "server", true, "run server-side check (on the node); --server=false runs the client-side checks that exist so far")
	f.DurationVar(&waitTimeout, "wait-timeout", 20*time.Minute, "timeout to wait for the cluster to be ready")
	f.StringSliceVar(&controlPlanes, "control-plane-nodes", nil, "specify IPs of control plane nodes")
	f.StringSliceVar(&workers, "worker-nodes", nil, "specify IPs of worker nodes")
	f.StringVar(&initNode, "init-node", "", "specify IPs of init node")
	f.StringVar(&forceEndpoint, "k8s-endpoint", "", "use endpoint instead of kubeconfig default")

	return cmd
}

// clientHealth checks from the client what exists so far: every node answers, and all of its
// services are running and healthy. It retries until waitTimeout.
func clientHealth(ctx context.Context, progress io.Writer, s *session, waitTimeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()

	checks := []struct {
		name string
		run  func(context.Context) error
	}{
		{"all nodes to answer the API", func(ctx context.Context) error {
			_, err := client.FilterMessages(s.c.MachineClient.Version(s.ctx(ctx), &emptypb.Empty{}))

			return err
		}},
		{"all services to be healthy", func(ctx context.Context) error {
			resp, err := s.c.ServiceList(s.ctx(ctx))
			if err != nil {
				return err
			}

			return provision.Unhealthy(resp)
		}},
	}

	for _, check := range checks {
		fmt.Fprintf(progress, "waiting for %s: ", check.name)

		var last error

		for {
			if last = check.run(ctx); last == nil {
				fmt.Fprintln(progress, "OK")

				break
			}

			select {
			case <-ctx.Done():
				fmt.Fprintln(progress, "FAIL")

				return fmt.Errorf("waiting for %s: %w (raise --wait-timeout, or look at `talosctl services` and `talosctl logs <service>`)", check.name, last)
			case <-time.After(time.Second):
			}
		}
	}

	return nil
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}

	return []string{s}
}

// memberAddresses lists the first address of every cluster member the session's node knows of;
// none when it cannot tell.
func memberAddresses(ctx context.Context, s *session) []string {
	members, err := safe.StateListAll[*clusterres.Member](s.nodeCtx(ctx, s.nodes[0]), s.c.COSI)
	if err != nil {
		return nil
	}

	var addrs []string

	for m := range members.All() {
		if a := m.TypedSpec().Addresses; len(a) > 0 {
			addrs = append(addrs, a[0].String())
		}
	}

	slices.Sort(addrs)

	return addrs
}
