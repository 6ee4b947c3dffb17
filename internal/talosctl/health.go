package talosctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/emptypb"
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
				if !server {
					return clientHealth(ctx, cmd.ErrOrStderr(), s, waitTimeout)
				}

				ctx, err := s.single(ctx, "server-side health check")
				if err != nil {
					return err
				}

				if initNode != "" {
					controlPlanes = append([]string{initNode}, controlPlanes...)
				}

				stream, err := s.c.ClusterHealthCheck(ctx, waitTimeout, &clusterapi.ClusterInfo{
					ControlPlaneNodes: controlPlanes,
					WorkerNodes:       workers,
					ForceEndpoint:     forceEndpoint,
				})
				if err != nil {
					return fmt.Errorf("starting the health check: %w%s", err, hint(err))
				}

				for {
					msg, err := stream.Recv()
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

			return unhealthyServices(resp)
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

// unhealthyServices fails for the first service that is not running or whose health check fails.
func unhealthyServices(resp *machineapi.ServiceListResponse) error {
	for _, msg := range resp.GetMessages() {
		for _, svc := range msg.GetServices() {
			if svc.GetState() != "Running" && svc.GetState() != "Finished" {
				return fmt.Errorf("%s: service %s is %s", msg.GetMetadata().GetHostname(), svc.GetId(), svc.GetState())
			}

			if h := svc.GetHealth(); h != nil && !h.GetUnknown() && !h.GetHealthy() {
				return fmt.Errorf("%s: service %s is unhealthy: %s", msg.GetMetadata().GetHostname(), svc.GetId(), h.GetLastMessage())
			}
		}
	}

	return nil
}
