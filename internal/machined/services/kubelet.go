package services

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"gopkg.in/yaml.v3"

	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
	"github.com/talos-go/talos/internal/machined/runtime"
	"github.com/talos-go/talos/internal/machined/system"
	"github.com/talos-go/talos/internal/machined/system/runner"
	"github.com/talos-go/talos/internal/machined/userfiles"
)

// kubeletImageWait is how long kubelet waits for its image, which the image cache service
// imports at boot while kubelet starts.
const kubeletImageWait = 2 * time.Minute

// KubeletServiceID is the supervisor ID of kubelet.
const KubeletServiceID = "kubelet"

// KubeletHealthzURL is kubelet's health endpoint: its default healthz address and port, in the
// node's network namespace, where kubelet runs with the host's network.
const KubeletHealthzURL = "http://127.0.0.1:10248/healthz"

// kubeletConfigName is kubelet's config file in its folder (the spec's --config points there).
const kubeletConfigName = "kubelet.yaml"

// Kubelet (listed by For only where containerd runs) runs kubelet as a privileged container of
// the system namespace with the host's network and PIDs, from the KubeletSpec's image of the
// image cache, once the spec exists: its config file is written from the spec before each run.
func Kubelet(r *runtime.Runtime) *system.Service {
	specPtr := k8s.NewKubeletSpec(k8s.NamespaceName, k8s.KubeletID).Metadata()

	return &system.Service{
		ID:                   KubeletServiceID,
		DependsOn:            []string{ContainerdServiceID},
		Restart:              system.RestartAlways,
		ConditionDescription: "time sync, kubelet spec (and, before a worker's first join, the API server)",
		Condition: func(ctx context.Context) error {
			if err := waitTimeSync(ctx, r); err != nil {
				return err
			}

			if err := waitResource(ctx, r.State, specPtr); err != nil {
				return err
			}

			return waitAPIServerBeforeJoin(ctx, r)
		},
		Runner: func() (system.Runner, error) {
			spec, err := safe.StateGetByID[*k8s.KubeletSpec](context.Background(), r.State, k8s.KubeletID)
			if err != nil {
				return nil, fmt.Errorf("reading the kubelet spec: %w", err)
			}

			dir := r.Paths.KubernetesConfig()
			if err = writeKubeletConfig(dir, spec.TypedSpec().Config); err != nil {
				return nil, err
			}

			mounts := KubeletMounts(r.Paths)

			// A bind mount needs its source: kubelet's folders are made on first start.
			for _, m := range mounts {
				if _, err := os.Stat(m.Source); err == nil {
					continue
				}

				if m.Type == "bind" {
					if err = os.MkdirAll(m.Source, 0o755); err != nil {
						return nil, err
					}
				}
			}

			out, err := r.Logs.Writer(KubeletServiceID)
			if err != nil {
				return nil, err
			}

			return &runner.Containerd{
				Socket:      NewContainerdPaths(r.Paths).Socket,
				ID:          KubeletServiceID,
				Image:       spec.TypedSpec().Image,
				ImageWait:   kubeletImageWait,
				Args:        append([]string{"/usr/local/bin/kubelet"}, spec.TypedSpec().Args...),
				Mounts:      append(mounts, spec.TypedSpec().ExtraMounts...),
				HostNetwork: true,
				HostPID:     true,
				Privileged:  true,
				OOMScoreAdj: oomScoreKubelet,
				// Upstream's kubelet container runs in /podruntime/kubelet, the cgroup its
				// kubeletCgroups names, with memory kept for it.
				Cgroup: cgroupOf(r, kubeletCgroup),
				Log:    r.Log,
				Output: out,
				Env:    userfiles.Env(r.Config()),
			}, nil
		},
		HealthFunc: func(ctx context.Context) error { return KubeletHealth(ctx, KubeletHealthzURL) },
		// As upstream: kubelet takes a moment to serve healthz.
		HealthSettings: system.HealthSettings{InitialDelay: 2 * time.Second},
	}
}

// KubeletHealth asks kubelet's healthz endpoint at url, as upstream's kubelet health check:
// healthy is 200 OK.
func KubeletHealth(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}

	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()

	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))

		return fmt.Errorf("kubelet healthz: %s: %s", resp.Status, body)
	}

	return nil
}

// writeKubeletConfig writes kubelet's config file (it holds no secrets, but kubelet's folder
// does: 0600 as the rest).
func writeKubeletConfig(dir string, config map[string]any) error {
	data, err := yaml.Marshal(config)
	if err != nil {
		return fmt.Errorf("encoding kubelet's config: %w", err)
	}

	if err = os.MkdirAll(dir, 0o700); err != nil {
		return err
	}

	tmp := filepath.Join(dir, "."+kubeletConfigName)
	if err = os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}

	return os.Rename(tmp, filepath.Join(dir, kubeletConfigName))
}

// KubeletMounts are the host folders kubelet works in, as upstream mounts them: devices,
// sysfs and cgroups, its state (rshared, so the pods' volume mounts reach the host), the pods'
// logs, its config and certificates, CNI, containerd's socket and the volume plugins.
func KubeletMounts(p runtime.Paths) []specs.Mount {
	bind := func(host, ctr string, opts ...string) specs.Mount {
		return specs.Mount{Type: "bind", Source: filepath.Join(p.Root, host), Destination: ctr, Options: append([]string{"rbind"}, opts...)}
	}

	return []specs.Mount{
		bind("/dev", "/dev", "rshared", "rw"),
		// The node's own /sys, bound: the default spec's sysfs mount is replaced, as a second
		// sysfs on /sys in the host's network namespace fails (EBUSY).
		bind("/sys", "/sys", "ro"),
		bind("/sys/fs/cgroup", "/sys/fs/cgroup", "rshared", "rw"),
		bind("/etc/kubernetes", "/etc/kubernetes", "rshared", "rw"),
		bind("/etc/cni", "/etc/cni", "rshared", "rw"),
		bind("/opt/cni", "/opt/cni", "rshared", "rw"),
		bind("/usr/libexec/kubernetes", "/usr/libexec/kubernetes", "rshared", "rw"),
		bind("/run", "/run", "rshared", "rw"),
		bind(k8sctrl.ContainerdSocketDir, k8sctrl.ContainerdSocketDir, "rw"),
		bind("/var/lib", "/var/lib", "rshared", "rw"),
		bind("/var/lib/kubelet", "/var/lib/kubelet", "rshared", "rw"),
		bind("/var/log/containers", "/var/log/containers", "rshared", "rw"),
		bind("/var/log/pods", "/var/log/pods", "rshared", "rw"),
		// The pods' resolv.conf (network.ResolverController writes it).
		bind("/system/resolved", "/system/resolved", "ro"),
		// The node's identity: kubelet reports it as the node's OS image.
		bind("/etc/os-release", "/etc/os-release", "ro"),
	}
}
