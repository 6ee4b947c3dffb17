package server

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	registryconfig "github.com/containerd/containerd/v2/core/remotes/docker/config"
	"github.com/containerd/errdefs"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/talos-go/talos/internal/machined/services"
	"github.com/talos-go/talos/internal/machined/system/runner"
)

// criNamespace is containerd's namespace for Kubernetes.
const criNamespace = "k8s.io"

// Labels the CRI plugin puts on the containers of pods.
const (
	labelPodName      = "io.kubernetes.pod.name"
	labelPodNamespace = "io.kubernetes.pod.namespace"
	labelPodUID       = "io.kubernetes.pod.uid"
	labelContainer    = "io.kubernetes.container.name"
	labelCRIKind      = "io.cri-containerd.kind" // "sandbox" on a pod's sandbox (pause) container
)

// criNames are how the API names a pod's container, as upstream's CRI inspector: the pod ID
// is "namespace/name"; a sandbox is listed under the pod ID itself (tools find pods by it), a
// container as "<pod ID>:<container name>:<its ID's first 12 characters>" (restarts of one
// container differ by the last part). ok is false for a container of no pod.
func criNames(labels map[string]string, containerID string) (podID, name, id string, sandbox, ok bool) {
	if labels[labelPodName] == "" {
		return "", "", "", false, false
	}

	podID = labels[labelPodNamespace] + "/" + labels[labelPodName]

	if labels[labelCRIKind] == "sandbox" {
		return podID, podID, podID, true, true
	}

	short := containerID
	if len(short) > 12 {
		short = short[:12]
	}

	return podID, labels[labelContainer], podID + ":" + labels[labelContainer] + ":" + short, false, true
}

// criDisplayMatches says whether id, as the API names CRI containers (a pod ID, "<pod
// ID>:<name>" or "<pod ID>:<name>:<part of its ID>", as upstream's inspector takes them), names
// the container with these labels and containerd ID.
func criDisplayMatches(id string, labels map[string]string, containerID string) bool {
	podID, name, _, sandbox, ok := criNames(labels, containerID)
	if !ok {
		return false
	}

	pod, rest, hasName := strings.Cut(id, ":")
	if pod != podID {
		return false
	}

	if !hasName {
		return sandbox
	}

	wantName, part, hasPart := strings.Cut(rest, ":")

	return !sandbox && wantName == name && (!hasPart || (part != "" && strings.Contains(containerID, part)))
}

// criContainerStatus is a pod container's task state in CRI's words (ContainerState), as
// upstream lists them: a container without a task has exited (CRI deletes an exited task).
func criContainerStatus(task string) string {
	switch task {
	case "RUNNING", "PAUSED", "PAUSING":
		return "CONTAINER_RUNNING"
	case "CREATED":
		return "CONTAINER_CREATED"
	case "STOPPED":
		return "CONTAINER_EXITED"
	default:
		return "CONTAINER_UNKNOWN"
	}
}

// containerdClient connects to the node's containerd in a namespace; a node without one (process
// mode, or before containerd runs) answers Unavailable.
func (s *Machine) containerdClient(ns string) (*containerd.Client, error) {
	socket := services.NewContainerdPaths(s.R.Paths).Socket
	if _, err := os.Stat(socket); err != nil {
		return nil, status.Errorf(codes.Unavailable, "containerd is not running on this node (%s): it runs when machined is the node's init (container or metal mode)", socket)
	}

	c, err := containerd.New(socket, containerd.WithDefaultNamespace(ns))
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "connecting to containerd: %v", err)
	}

	return c, nil
}

// requestNamespace maps the API's driver and namespace to containerd's namespace, as upstream:
// the CRI driver means k8s.io, the default is system.
func requestNamespace(driver common.ContainerDriver, ns string) string {
	if driver == common.ContainerDriver_CRI {
		return criNamespace
	}

	if ns == "" {
		return runner.SystemNamespace
	}

	return ns
}

// Containers lists the containers of a containerd namespace with their tasks.
func (s *Machine) Containers(ctx context.Context, req *machine.ContainersRequest) (*machine.ContainersResponse, error) {
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

	infos := make([]*machine.ContainerInfo, 0, len(ctrs))
	ready := map[string]bool{} // the pod UIDs whose sandbox is ready

	for _, c := range ctrs {
		info, err := c.Info(ctx)
		if err != nil {
			continue // removed while listing
		}

		ci := &machine.ContainerInfo{Namespace: ns, Id: c.ID(), InternalId: c.ID(), Image: info.Image, Status: "STOPPED", Name: c.ID()}

		podID, name, id, sandbox, inPod := criNames(info.Labels, c.ID())
		if inPod {
			ci.PodId, ci.Uid, ci.Name, ci.Id = podID, info.Labels[labelPodUID], name, id
		}

		if task, err := c.Task(ctx, nil); err == nil {
			ci.Pid = task.Pid()

			if st, err := task.Status(ctx); err == nil {
				ci.Status = strings.ToUpper(string(st.Status))
			}
		}

		// A pod's containers in CRI's words, as upstream lists them.
		switch {
		case sandbox && ci.Status == "RUNNING":
			ci.Status = "SANDBOX_READY"
			ready[ci.Uid] = true
		case sandbox:
			ci.Status = "SANDBOX_NOTREADY"
		case inPod:
			ci.Status = criContainerStatus(ci.Status)
		}

		infos = append(infos, ci)
	}

	// Upstream's CRI inspector lists the ready sandboxes only, and the containers of their pods.
	if ns == criNamespace {
		infos = slices.DeleteFunc(infos, func(ci *machine.ContainerInfo) bool {
			return ci.PodId != "" && !ready[ci.Uid]
		})
	}

	slices.SortFunc(infos, func(a, b *machine.ContainerInfo) int {
		if a.Id < b.Id {
			return -1
		}

		if a.Id > b.Id {
			return 1
		}

		return 0
	})

	return &machine.ContainersResponse{Messages: []*machine.Container{{Metadata: s.metadata(ctx), Containers: infos}}}, nil
}

// ImageList streams the images of a containerd namespace.
func (s *Machine) ImageList(req *machine.ImageListRequest, srv grpc.ServerStreamingServer[machine.ImageListResponse]) error {
	ns := runner.SystemNamespace
	if req.Namespace == common.ContainerdNamespace_NS_CRI {
		ns = criNamespace
	}

	client, err := s.containerdClient(ns)
	if err != nil {
		return err
	}
	defer client.Close()

	ctx := srv.Context()

	imgs, err := client.ImageService().List(ctx)
	if err != nil {
		return status.Errorf(codes.Internal, "listing images: %v", err)
	}

	md := s.metadata(ctx)

	for _, img := range imgs {
		size, err := containerd.NewImage(client, img).Size(ctx)
		if err != nil && !errdefs.IsNotFound(err) {
			return status.Errorf(codes.Internal, "image %s: %v", img.Name, err)
		}

		if err = srv.Send(&machine.ImageListResponse{Metadata: md, Name: img.Name, Digest: img.Target.Digest.String(), Size: size, CreatedAt: timestamppb.New(img.CreatedAt)}); err != nil {
			return err
		}
	}

	return nil
}

// ImagePull imports nothing from the internet by itself: a pull goes to the registry the
// reference names (through its machine.registries mirrors, as CRI's pulls), and fails with the
// reason when the node cannot reach it.
func (s *Machine) ImagePull(ctx context.Context, req *machine.ImagePullRequest) (*machine.ImagePullResponse, error) {
	if req.Reference == "" {
		return nil, status.Error(codes.InvalidArgument, "reference is empty: give an image reference like registry.local/etcd:v3.6.13")
	}

	ns := runner.SystemNamespace
	if req.Namespace == common.ContainerdNamespace_NS_CRI {
		ns = criNamespace
	}

	client, err := s.containerdClient(ns)
	if err != nil {
		return nil, err
	}
	defer client.Close()

	hosts := registryconfig.ConfigureHosts(ctx, registryconfig.HostOptions{
		HostDir: registryconfig.HostDirFromRoot(services.NewContainerdPaths(s.R.Paths).RegistryHosts),
	})
	resolver := docker.NewResolver(docker.ResolverOptions{Hosts: hosts})

	if _, err = client.Pull(ctx, req.Reference, containerd.WithPullUnpack, containerd.WithResolver(resolver)); err != nil {
		if errors.Is(err, context.Canceled) {
			return nil, status.FromContextError(err).Err()
		}

		return nil, status.Errorf(codes.Unavailable, "pulling %s: %v (the node pulls only from registries it can reach; images also come from the node image's cache)", req.Reference, err)
	}

	return &machine.ImagePullResponse{Messages: []*machine.ImagePull{{Metadata: s.metadata(ctx)}}}, nil
}
