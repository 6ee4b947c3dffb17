package services

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"

	"github.com/talos-go/talos/internal/machined/controllers/cri"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/system"
	"github.com/talos-go/talos/internal/machined/system/runner"
	"github.com/talos-go/talos/internal/machined/userfiles"
)

// ContainerdServiceID is the supervisor ID of the containerd service.
const ContainerdServiceID = "containerd"

// ContainerdPaths are where containerd keeps its socket, state and data on a node.
type ContainerdPaths struct {
	Socket string // /system/run/containerd/containerd.sock
	State  string // /system/run/containerd/state
	Root   string // /var/lib/containerd
	Config string // /system/etc/containerd/config.toml, written by machined
	FIFO   string // stdio FIFOs of the system containers
	// RegistryHosts is CRI's registry config folder (certs.d layout), written by machined.
	RegistryHosts string
	// CRIParts is the folder of CRI config parts (/system/etc/cri/conf.d, upstream's
	// /etc/cri/conf.d): merged into Config at each start.
	CRIParts string
	// RestrictOOMScoreAdj makes CRI clamp a container's OOM score adjustment to containerd's
	// own: without CAP_SYS_RESOURCE (some VM sandboxes withhold it even from root) the kernel
	// refuses the negative scores kubelet asks for and every pod sandbox fails to start.
	RestrictOOMScoreAdj bool
	// BaseRuntimeSpec is the base OCI runtime spec file of CRI's runc runtime
	// (machine.baseRuntimeSpecOverrides merged into containerd's default); "": containerd's
	// default.
	BaseRuntimeSpec string
}

// NewContainerdPaths returns the containerd paths of a node's state folder.
func NewContainerdPaths(p runtime.Paths) ContainerdPaths {
	run := filepath.Join(p.System(), "run", "containerd")

	return ContainerdPaths{
		Socket: filepath.Join(run, "containerd.sock"),
		State:  filepath.Join(run, "state"),
		Root:   filepath.Join(p.Ephemeral(), "lib", "containerd"),
		Config: filepath.Join(p.System(), "etc", "containerd", "config.toml"),
		FIFO:   filepath.Join(run, "fifo"),

		RegistryHosts: filepath.Join(p.System(), "etc", "containerd", "certs.d"),
		CRIParts:      filepath.Join(p.System(), "etc", "cri", "conf.d"),

		RestrictOOMScoreAdj: !runner.MayLowerOOMScoreAdj(),
	}
}

// SandboxImage is the pause image of CRI's pod sandboxes: it is in the node image's cache and
// pinned, so it is neither pulled nor garbage collected.
const SandboxImage = "registry.k8s.io/pause:3.10"

// ContainerdConfig is containerd's config (version 3): the node's socket and folders; CRI on for
// the k8s.io namespace with the image's CNI folders, the cached pause image, and runc with the
// cgroupfs driver (the node has no systemd) and the base runtime spec p names, if any. Registry hosts come only from the node's own
// certs.d folder (machined's, empty by default): nothing is pulled implicitly, and a pull goes
// only to the registry its reference names.
func ContainerdConfig(p ContainerdPaths) string {
	baseSpec := ""
	if p.BaseRuntimeSpec != "" {
		baseSpec = fmt.Sprintf("\n  base_runtime_spec = %q", p.BaseRuntimeSpec)
	}

	return fmt.Sprintf(`version = 3
root = %q
state = %q

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = %q

[plugins."io.containerd.cri.v1.images".registry]
  config_path = %q

[plugins."io.containerd.cri.v1.runtime"]
  tolerate_missing_hugetlb_controller = true
  restrict_oom_score_adj = %t

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["/opt/cni/bin"]
  conf_dir = "/etc/cni/net.d"

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"%s

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  SystemdCgroup = false

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`, p.Root, p.State, p.Socket, p.Socket+".ttrpc", SandboxImage, p.RegistryHosts, p.RestrictOOMScoreAdj, baseSpec)
}

// Containerd is the containerd service: it runs when machined is the node's init (container
// and metal modes), with namespaces system (machined's services) and k8s.io (CRI). A node
// process on a shared host (process mode) has no containerd and says so.
func Containerd(r *runtime.Runtime) *system.Service {
	paths := NewContainerdPaths(r.Paths)

	return &system.Service{
		ID:                   ContainerdServiceID,
		ConditionDescription: "machined is the node's init",
		Condition: func(context.Context) error {
			if !r.Mode.PID1 {
				return errors.New("containerd runs only when machined is the node's init (container or metal mode), not in process mode")
			}

			return nil
		},
		Runner: func() (system.Runner, error) {
			// PID 1 may start without PATH: the node image's place comes first.
			bin := "/usr/bin/containerd"
			if _, err := os.Stat(bin); err != nil {
				if bin, err = exec.LookPath("containerd"); err != nil {
					return nil, fmt.Errorf("containerd is neither at /usr/bin/containerd (the node image's place) nor on PATH: %w", err)
				}
			}

			// CRI reads credentials and its base runtime spec only at its start:
			// machine.registries.config auth and machine.baseRuntimeSpecOverrides go into this
			// start's config (a change of them needs a reboot, as upstream says).
			var (
				regs      talosconfig.Registries
				overrides map[string]any
			)

			if cfg := r.Config(); cfg != nil && cfg.Machine() != nil {
				regs, overrides = cfg.Machine().Registries(), cfg.Machine().BaseRuntimeSpecOverrides()
			}

			if err := cri.WriteAuthPart(paths.CRIParts, regs); err != nil {
				return nil, err
			}

			p := paths

			var err error
			if p.BaseRuntimeSpec, err = cri.WriteBaseRuntimeSpec(p.CRIParts, overrides); err != nil {
				return nil, err
			}

			if err = WriteContainerdConfig(p); err != nil {
				return nil, err
			}

			out, err := r.Logs.Writer(ContainerdServiceID)
			if err != nil {
				return nil, err
			}

			return &runner.Process{
				Args: []string{bin, "--config", paths.Config}, Output: out, Env: userfiles.Env(r.Config()),
				OOMScoreAdj: oomScoreContainerd, Cgroup: cgroupOf(r, containerdCgroup), Log: r.Log,
			}, nil
		},
		HealthFunc: func(ctx context.Context) error { return ContainerdHealth(ctx, paths.Socket) },
		HealthSettings: system.HealthSettings{
			InitialDelay: 500 * time.Millisecond,
			Period:       5 * time.Second,
			Timeout:      3 * time.Second,
		},
	}
}

// WriteContainerdConfig writes the config, with the CRI parts of machine.files merged in, and
// makes containerd's folders.
func WriteContainerdConfig(p ContainerdPaths) error {
	for _, dir := range []string{filepath.Dir(p.Socket), p.State, p.Root, filepath.Dir(p.Config), p.RegistryHosts} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
	}

	cfg, err := userfiles.MergeCRIParts(ContainerdConfig(p), p.CRIParts)
	if err != nil {
		return err
	}

	return os.WriteFile(p.Config, []byte(cfg), 0o600)
}

// ContainerdHealth asks containerd for its version and makes sure both namespaces exist.
func ContainerdHealth(ctx context.Context, socket string) error {
	client, err := containerd.New(socket, containerd.WithTimeout(2*time.Second))
	if err != nil {
		return err
	}
	defer client.Close()

	if _, err = client.Version(ctx); err != nil {
		return err
	}

	for _, ns := range []string{runner.SystemNamespace, "k8s.io"} {
		if err = client.NamespaceService().Create(ctx, ns, nil); err != nil && !errdefs.IsAlreadyExists(err) {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
	}

	return nil
}
