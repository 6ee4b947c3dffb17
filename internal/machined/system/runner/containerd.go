package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/defaults"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"go.uber.org/zap"
)

// SystemNamespace is containerd's namespace for machined's own services; Kubernetes uses k8s.io.
const SystemNamespace = "system"

// Containerd runs a service as a container of machined's containerd, in the system namespace,
// from an image that is already there or imported from a local OCI archive: nothing is pulled.
type Containerd struct {
	Socket    string // containerd's socket
	Namespace string // default SystemNamespace
	ID        string // container ID (the service ID)
	Image     string // image reference, e.g. registry.local/etcd:v3.6.13
	// Archive, when set, is an OCI (or docker save) archive that holds Image; it is imported
	// when containerd lacks the image.
	Archive string
	// ImageWait, without an Archive, is how long to wait for Image to appear (the node's image
	// cache imports it at boot) before failing.
	ImageWait time.Duration
	Args      []string // process args; default the image's entrypoint and command
	Env       []string
	Mounts    []specs.Mount
	// HostNetwork runs the container in the node's network namespace, as system services do.
	HostNetwork bool
	// HostPID runs the container in the node's PID namespace (kubelet sees the pods' processes).
	HostPID bool
	// Privileged gives the container every capability and the host's devices, as kubelet needs.
	Privileged bool
	// OOMScoreAdj, when set, is the container process's oom_score_adj (the OCI spec's, which
	// runc sets); a negative one only where machined holds CAP_SYS_RESOURCE.
	OOMScoreAdj int
	// Log takes what is worth a debug line only (an oom_score_adj left out).
	Log *zap.Logger
	// MemoryReservation, when set, is the container's soft memory protection (runc writes
	// memory.low on cgroup v2, memory.soft_limit_in_bytes on v1).
	MemoryReservation int64
	// CPUShares, when set, is the container's CPU share (runc writes cpu.shares on cgroup v1,
	// the cpu.weight it maps to on v2).
	CPUShares uint64
	// Cgroup, when set, is made with its figures before the container starts, and the
	// container runs in it (the OCI spec's cgroupsPath) rather than in containerd's default
	// /<namespace>/<id>.
	Cgroup          *Cgroup
	FIFODir         string // where containerd's stdio FIFOs go
	Output          io.Writer
	GracefulTimeout time.Duration
}

func (c *Containerd) String() string { return fmt.Sprintf("Containerd(%q)", c.ID) }

func (c *Containerd) namespace() string {
	if c.Namespace == "" {
		return SystemNamespace
	}

	return c.Namespace
}

// Run creates the container (replacing a leftover of an earlier run), starts its task and
// waits for it. When ctx ends the task gets SIGTERM and, after the graceful timeout, SIGKILL;
// the task, the container and its snapshot are removed.
func (c *Containerd) Run(ctx context.Context) error {
	client, err := containerd.New(c.Socket, containerd.WithDefaultNamespace(c.namespace()), containerd.WithTimeout(10*time.Second))
	if err != nil {
		return fmt.Errorf("connecting to containerd at %s: %w", c.Socket, err)
	}
	defer client.Close()

	// The work outlives ctx: stopping must still reach containerd after ctx is canceled.
	bg := namespaces.WithNamespace(context.Background(), c.namespace())

	img, err := c.image(bg, client)
	if err != nil {
		return err
	}

	removeContainer(bg, client, c.ID)

	out := c.Output
	if out == nil {
		out = io.Discard
	}

	// runc would make a missing cgroup without its parents' figures: they are made first. A
	// node whose cgroups cannot be made runs the container in containerd's default cgroup,
	// said in the service's log, as the process runner does.
	cgroupPath := ""

	if c.Cgroup != nil {
		if _, err = c.Cgroup.Make(); err != nil {
			fmt.Fprintf(out, "cgroup: %v: %s runs in containerd's default cgroup\n", err, c.ID)
		} else {
			cgroupPath = c.Cgroup.Path
		}
	}

	ctr, err := client.NewContainer(bg, c.ID, containerd.WithImage(img), containerd.WithNewSnapshot(c.ID, img), containerd.WithNewSpec(c.specOpts(img, cgroupPath)...))
	if err != nil {
		return fmt.Errorf("creating container %s: %w", c.ID, err)
	}
	defer removeContainer(bg, client, c.ID)

	creator := cio.NewCreator(cio.WithStreams(nil, out, out))
	if c.FIFODir != "" {
		if err = os.MkdirAll(c.FIFODir, 0o700); err != nil {
			return err
		}

		creator = cio.NewCreator(cio.WithStreams(nil, out, out), cio.WithFIFODir(c.FIFODir))
	}

	task, err := ctr.NewTask(bg, creator)
	if err != nil {
		return fmt.Errorf("creating task %s: %w", c.ID, err)
	}

	exited, err := task.Wait(bg)
	if err != nil {
		return err
	}

	if err = task.Start(bg); err != nil {
		return fmt.Errorf("starting task %s: %w", c.ID, err)
	}

	select {
	case st := <-exited:
		code, _, err := st.Result()
		if err != nil {
			return err
		}

		if code != 0 {
			return fmt.Errorf("container %s exited with code %d", c.ID, code)
		}

		return nil
	case <-ctx.Done():
	}

	timeout := c.GracefulTimeout
	if timeout == 0 {
		timeout = DefaultGracefulTimeout
	}

	_ = task.Kill(bg, syscall.SIGTERM)

	select {
	case <-exited:
	case <-time.After(timeout):
		_ = task.Kill(bg, syscall.SIGKILL, containerd.WithKillAll)
		<-exited
	}

	return nil
}

// specOpts are the container's OCI spec: the image's config, the service's environment,
// mounts and arguments, and the host namespaces, privileges and resources it asks for.
func (c *Containerd) specOpts(img containerd.Image, cgroupPath string) []oci.SpecOpts {
	opts := []oci.SpecOpts{oci.WithImageConfig(img), oci.WithEnv(c.Env), oci.WithMounts(c.Mounts)}
	if len(c.Args) > 0 {
		opts = append(opts, oci.WithProcessArgs(c.Args...))
	}

	if c.HostNetwork {
		opts = append(opts, oci.WithHostNamespace(specs.NetworkNamespace), oci.WithHostHostsFile, oci.WithHostResolvconf)
	}

	if c.HostPID {
		opts = append(opts, oci.WithHostNamespace(specs.PIDNamespace))
	}

	if c.Privileged {
		opts = append(opts, oci.WithPrivileged, oci.WithAllDevicesAllowed, oci.WithHostDevices, oci.WithWriteableCgroupfs, oci.WithWriteableSysfs)
	}

	oomScoreAdj := c.OOMScoreAdj
	if oomScoreAdj < 0 && !MayLowerOOMScoreAdj() {
		// runc would fail to start the container: it keeps the shim's score instead.
		if c.Log != nil {
			c.Log.Debug("oom_score_adj not set: lowering it needs CAP_SYS_RESOURCE", zap.String("container", c.ID), zap.Int("oom_score_adj", oomScoreAdj))
		}

		oomScoreAdj = 0
	}

	if oomScoreAdj != 0 || c.MemoryReservation > 0 {
		opts = append(opts, withResources(oomScoreAdj, c.MemoryReservation))
	}

	if c.CPUShares > 0 {
		opts = append(opts, oci.WithCPUShares(c.CPUShares))
	}

	if cgroupPath != "" {
		opts = append(opts, oci.WithCgroup(cgroupPath))
	}

	if slices.ContainsFunc(c.Mounts, func(m specs.Mount) bool { return slices.Contains(m.Options, "rshared") }) {
		// An rshared bind propagates back to the node only when the container's root is
		// rshared too (runc otherwise makes it rslave first): kubelet's volume mounts must
		// reach containerd, which mounts them into the pods (as CRI does for Bidirectional).
		opts = append(opts, withRootfsPropagation("rshared"))
	}

	return opts
}

// image returns the service's image, importing it from the archive when containerd lacks it,
// and makes sure it is unpacked.
func (c *Containerd) image(ctx context.Context, client *containerd.Client) (containerd.Image, error) {
	img, err := client.GetImage(ctx, c.Image)

	for deadline := time.Now().Add(c.ImageWait); errdefs.IsNotFound(err) && c.Archive == "" && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}

		img, err = client.GetImage(ctx, c.Image)
	}

	if errdefs.IsNotFound(err) {
		if c.Archive == "" {
			return nil, fmt.Errorf("image %s is not in containerd's %s namespace and no archive holds it: images come from the node image's cache or a file, nothing is pulled", c.Image, c.namespace())
		}

		// The image cache may import the same image at the same time: it is there then.
		if _, err = ImportArchive(ctx, client, c.Archive); err != nil && !errdefs.IsAlreadyExists(err) {
			return nil, err
		}

		img, err = client.GetImage(ctx, c.Image)
		if errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("archive %s does not hold image %s", c.Archive, c.Image)
		}
	}

	if err != nil {
		return nil, fmt.Errorf("image %s: %w", c.Image, err)
	}

	if ok, _ := img.IsUnpacked(ctx, defaults.DefaultSnapshotter); !ok {
		if err = img.Unpack(ctx, defaults.DefaultSnapshotter); err != nil {
			return nil, fmt.Errorf("unpacking image %s: %w", c.Image, err)
		}
	}

	return img, nil
}

// ImportArchive imports an OCI or docker-save archive into the client's namespace and returns
// the names of the images it held.
func ImportArchive(ctx context.Context, client *containerd.Client, path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening image archive: %w", err)
	}
	defer f.Close()

	imgs, err := client.Import(ctx, f, containerd.WithAllPlatforms(false))
	if err != nil {
		return nil, fmt.Errorf("importing %s: %w", path, err)
	}

	names := make([]string, 0, len(imgs))
	for _, img := range imgs {
		names = append(names, img.Name)
	}

	if len(names) == 0 {
		return nil, errors.New("importing " + path + ": the archive names no image")
	}

	return names, nil
}

// removeContainer kills and deletes a container and its snapshot, if it exists.
func removeContainer(ctx context.Context, client *containerd.Client, id string) {
	ctr, err := client.LoadContainer(ctx, id)
	if err != nil {
		return
	}

	if task, err := ctr.Task(ctx, nil); err == nil {
		_ = task.Kill(ctx, syscall.SIGKILL, containerd.WithKillAll)
		_, _ = task.Delete(ctx, containerd.WithProcessKill)
	}

	_ = ctr.Delete(ctx, containerd.WithSnapshotCleanup)
}

func withRootfsPropagation(p string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if s.Linux == nil {
			s.Linux = &specs.Linux{}
		}

		s.Linux.RootfsPropagation = p

		return nil
	}
}

// withResources sets the process's oom_score_adj and the container's memory reservation (each
// when not zero).
func withResources(oomScoreAdj int, reservation int64) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if oomScoreAdj != 0 {
			s.Process.OOMScoreAdj = &oomScoreAdj
		}

		if reservation > 0 {
			if s.Linux == nil {
				s.Linux = &specs.Linux{}
			}

			if s.Linux.Resources == nil {
				s.Linux.Resources = &specs.LinuxResources{}
			}

			if s.Linux.Resources.Memory == nil {
				s.Linux.Resources.Memory = &specs.LinuxMemory{}
			}

			s.Linux.Resources.Memory.Reservation = &reservation
		}

		return nil
	}
}
