package server

import (
	"context"
	"syscall"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/typeurl/v2"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Stats reports the memory (working set) and CPU time of each running container of a
// containerd namespace, from its task's cgroup.
func (s *Machine) Stats(ctx context.Context, req *machine.StatsRequest) (*machine.StatsResponse, error) {
	ns := requestNamespace(req.Driver, req.Namespace)

	client, err := s.containerdClient(ns)
	if err != nil {
		return nil, err
	}
	defer client.Close()

	ctrs, err := client.Containers(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "listing containers: %v", err)
	}

	var stats []*machine.Stat

	for _, c := range ctrs {
		info, err := c.Info(ctx)
		if err != nil {
			continue // removed while listing
		}

		task, err := c.Task(ctx, nil)
		if err != nil {
			continue // no task: nothing runs, nothing to measure
		}

		m, err := task.Metrics(ctx)
		if err != nil {
			continue // the task ended meanwhile
		}

		data, err := typeurl.UnmarshalAny(m.Data)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "metrics of %s: %v", c.ID(), err)
		}

		st := &machine.Stat{Namespace: ns, Id: c.ID(), Name: c.ID()}

		if podID, name, id, _, ok := criNames(info.Labels, c.ID()); ok {
			st.PodId, st.Name, st.Id = podID, name, id
		}

		// The working set, as upstream and kubelet count it: usage less inactive file pages.
		switch d := data.(type) {
		case *v1.Metrics:
			st.CpuUsage = d.GetCPU().GetUsage().GetTotal()
			st.MemoryUsage = workingSet(d.GetMemory().GetUsage().GetUsage(), d.GetMemory().GetTotalInactiveFile())
		case *v2.Metrics:
			st.CpuUsage = d.GetCPU().GetUsageUsec() * 1000
			st.MemoryUsage = workingSet(d.GetMemory().GetUsage(), d.GetMemory().GetInactiveFile())
		default:
			return nil, status.Errorf(codes.Internal, "metrics of %s: unknown type %T", c.ID(), data)
		}

		stats = append(stats, st)
	}

	return &machine.StatsResponse{Messages: []*machine.Stats{{Metadata: s.metadata(ctx), Stats: stats}}}, nil
}

func workingSet(usage, inactiveFile uint64) uint64 {
	if inactiveFile > usage {
		return 0
	}

	return usage - inactiveFile
}

// Restart restarts a container as upstream: a system container is restarted by the supervisor
// (its service); a CRI container's task is stopped with SIGTERM, and kubelet starts it again.
func (s *Machine) Restart(ctx context.Context, req *machine.RestartRequest) (*machine.RestartResponse, error) {
	if req.Id == "" {
		return nil, status.Error(codes.InvalidArgument, "id is empty: give a container ID from `talosctl containers`")
	}

	ns := requestNamespace(req.Driver, req.Namespace)

	client, err := s.containerdClient(ns)
	if err != nil {
		return nil, err
	}
	defer client.Close()

	c, err := s.findContainer(ctx, client, req.Id)
	if err != nil {
		return nil, err
	}

	if s.R.Supervisor != nil && ns != criNamespace && s.isService(c.ID()) {
		if _, err = s.ServiceRestart(ctx, &machine.ServiceRestartRequest{Id: c.ID()}); err != nil {
			return nil, err
		}
	} else {
		task, err := c.Task(ctx, nil)
		if err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "container %s is not running: %v", req.Id, err)
		}

		if err = task.Kill(ctx, syscall.SIGTERM, containerd.WithKillAll); err != nil {
			return nil, status.Errorf(codes.Internal, "stopping container %s: %v", req.Id, err)
		}
	}

	return &machine.RestartResponse{Messages: []*machine.Restart{{Metadata: s.metadata(ctx)}}}, nil
}

// findContainer finds a container by containerd ID or by the pod-namespace/pod:container ID
// that `containers -k` shows.
func (s *Machine) findContainer(ctx context.Context, client *containerd.Client, id string) (containerd.Container, error) {
	ctrs, err := client.Containers(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "listing containers: %v", err)
	}

	for _, c := range ctrs {
		if c.ID() == id {
			return c, nil
		}

		labels, err := c.Labels(ctx)
		if err == nil && criDisplayMatches(id, labels, c.ID()) {
			return c, nil
		}
	}

	return nil, status.Errorf(codes.NotFound, "container %q not found: see `talosctl containers -k`", id)
}

func (s *Machine) isService(id string) bool {
	_, ok := s.R.Supervisor.Get(id)

	return ok
}
