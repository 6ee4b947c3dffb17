package server

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	clusterres "github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/health"
	"github.com/talos-go/talos/internal/machined/kubeclient"
)

// Cluster serves ClusterService/HealthCheck on a control plane: the checks it can run itself,
// etcd through its own member and Kubernetes through its admin kubeconfig, with upstream's
// progress lines. The checks that call every node's API are run by `talosctl health
// --server=false`.
type Cluster struct {
	clusterapi.UnimplementedClusterServiceServer

	M *Machine
}

// HealthCheck streams each check's progress until all pass or the wait timeout ends.
func (c *Cluster) HealthCheck(req *clusterapi.HealthCheckRequest, srv grpc.ServerStreamingServer[clusterapi.HealthCheckProgress]) error {
	timeout := req.GetWaitTimeout().AsDuration()
	if timeout <= 0 {
		timeout = 20 * time.Minute
	}

	ctx, cancel := context.WithTimeout(srv.Context(), timeout)
	defer cancel()

	if t := c.M.R.MachineType(ctx); !t.IsControlPlane() {
		return status.Errorf(codes.FailedPrecondition, "the health check runs on a control plane node and this node is a %s: pick one with -n", t)
	}

	nodes, err := c.nodes(ctx, req.GetClusterInfo())
	if err != nil {
		return err
	}

	send := func(line string) {
		_ = srv.Send(&clusterapi.HealthCheckProgress{Metadata: c.M.metadata(ctx), Message: line}) // the client went away: ctx ends the checks
	}

	send(fmt.Sprintf("discovered nodes: control plane: %s, worker: %s", list(nodes.ControlPlanes), list(nodes.Workers)))

	checks := c.etcdChecks(nodes)

	if c.M.R.Mode.RunsKubernetes() {
		kube, err := safe.StateGetByID[*secrets.Kubernetes](ctx, c.M.R.State, secrets.KubernetesID)
		if err != nil || kube.TypedSpec().LocalhostAdminKubeconfig == "" {
			return status.Error(codes.Unavailable, "the node's Kubernetes secrets are not generated yet: retry in a few seconds")
		}

		cfg, err := kubeclient.LocalAdmin(kube, 0)
		if err != nil {
			return status.Errorf(codes.Internal, "the node's admin kubeconfig: %v", err)
		}

		nodes.Disabled = health.DisabledComponents(c.M.R.Config()) // this control plane's config stands for the others'

		k8s, err := health.Kubernetes(cfg, nodes)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}

		checks = append(checks, k8s...)
	} else {
		send("the node runs no Kubernetes (process mode, or an image built without it): Kubernetes checks skipped")
	}

	if err := health.Run(ctx, checks, time.Second, send); err != nil {
		return status.Error(codes.DeadlineExceeded, err.Error())
	}

	return nil
}

func list(s []string) string {
	if len(s) == 0 {
		return "none"
	}

	return "[" + strings.Join(s, " ") + "]"
}

// nodes are the request's nodes, or every member discovery knows of, by machine type.
func (c *Cluster) nodes(ctx context.Context, info *clusterapi.ClusterInfo) (health.Nodes, error) {
	if len(info.GetControlPlaneNodes()) > 0 {
		return health.Nodes{ControlPlanes: info.GetControlPlaneNodes(), Workers: info.GetWorkerNodes()}, nil
	}

	members, err := safe.StateListAll[*clusterres.Member](ctx, c.M.R.State)
	if err != nil {
		return health.Nodes{}, status.Errorf(codes.Internal, "listing cluster members: %v", err)
	}

	var nodes health.Nodes

	for m := range members.All() {
		spec := m.TypedSpec()
		if len(spec.Addresses) == 0 {
			continue
		}

		addr := spec.Addresses[0].String()

		if spec.MachineType.IsControlPlane() {
			nodes.ControlPlanes = append(nodes.ControlPlanes, addr)
		} else if spec.MachineType == machinetype.TypeWorker {
			nodes.Workers = append(nodes.Workers, addr)
		}
	}

	if len(nodes.ControlPlanes) == 0 {
		return nodes, status.Error(codes.FailedPrecondition, "no cluster members discovered: name the nodes with --control-plane-nodes and --worker-nodes")
	}

	slices.Sort(nodes.ControlPlanes)
	slices.Sort(nodes.Workers)

	return nodes, nil
}

// etcdChecks: this node's etcd answers without alarms, and the members are exactly the control
// plane nodes, all voting.
func (c *Cluster) etcdChecks(nodes health.Nodes) []health.Check {
	m := c.M.R.Etcd

	return []health.Check{
		{Name: "etcd to be healthy", Run: func(ctx context.Context) error {
			cl, err := m.LocalClient()
			if err != nil {
				return err
			}
			defer cl.Close()

			resp, err := cl.Status(ctx, cl.Endpoints()[0])
			if err != nil {
				return err
			}

			if len(resp.Errors) > 0 {
				return fmt.Errorf("etcd reports: %s", strings.Join(resp.Errors, "; "))
			}

			return nil
		}},
		{Name: "etcd members to be control plane nodes", Run: func(ctx context.Context) error {
			members, err := m.Members(ctx, false)
			if err != nil {
				return err
			}

			var hosts []string

			for _, mem := range members {
				if mem.IsLearner {
					return fmt.Errorf("member %s is still a learner", mem.Name)
				}

				for _, p := range mem.PeerURLs {
					if u, err := url.Parse(p); err == nil {
						hosts = append(hosts, u.Hostname())
					}
				}
			}

			slices.Sort(hosts)

			want := slices.Sorted(slices.Values(nodes.ControlPlanes))
			if !slices.Equal(hosts, want) {
				return fmt.Errorf("etcd members are at %v, control plane nodes are %v", hosts, want)
			}

			return nil
		}},
	}
}
