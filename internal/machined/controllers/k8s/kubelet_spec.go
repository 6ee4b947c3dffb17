package k8s

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/controller/generic/transform"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/gen/xerrors"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"go.uber.org/zap"
)

// Kubelet's files, as it sees them in its container: upstream's paths.
const (
	KubeletConfigFile      = constants.KubernetesConfigBaseDir + "/kubelet.yaml"
	KubeletKubeconfig      = constants.KubeletKubeconfig
	KubeletBootstrapConfig = constants.KubeletBootstrapKubeconfig
	KubeletCAFile          = constants.KubernetesConfigBaseDir + "/pki/ca.crt"
	KubeletCertDir         = constants.KubeletPKIDir
	KubeletManifestsDir    = constants.ManifestsDirectory
	// One containerd serves both the system and k8s.io namespaces here (upstream runs a second,
	// CRI-only one at /run/containerd): kubelet gets its socket bound in at the same path.
	ContainerdSocketEndpoint = "unix://" + ContainerdSocketDir + "/containerd.sock"
	ContainerdSocketDir      = "/system/run/containerd"
)

// KubeletSpecController publishes what kubelet runs with (k8s.KubeletSpec).
type KubeletSpecController = transform.Controller[*k8s.KubeletConfig, *k8s.KubeletSpec]

// NewKubeletSpecController declares KubeletSpec from KubeletConfig, the node's name and IPs:
// the image, upstream's arguments (the bootstrap kubeconfig, the config file, the node's name
// and IPs) with machine.kubelet.extraArgs over them, the extra mounts, and the
// KubeletConfiguration document (cgroupfs driver, webhook authentication against the cluster
// CA, the static pods from the static pod server's URL once it serves) with
// machine.kubelet.extraConfig over it.
func NewKubeletSpecController() *KubeletSpecController {
	return transform.NewController(
		transform.Settings[*k8s.KubeletConfig, *k8s.KubeletSpec]{
			Name: "k8s.KubeletSpecController",
			MapMetadataOptionalFunc: func(c *k8s.KubeletConfig) optional.Optional[*k8s.KubeletSpec] {
				if c.Metadata().ID() != k8s.KubeletID {
					return optional.None[*k8s.KubeletSpec]()
				}

				return optional.Some(k8s.NewKubeletSpec(k8s.NamespaceName, k8s.KubeletID))
			},
			TransformFunc: func(ctx context.Context, r controller.Reader, _ *zap.Logger, c *k8s.KubeletConfig, out *k8s.KubeletSpec) error {
				nodename, err := safe.ReaderGetByID[*k8s.Nodename](ctx, r, k8s.NodenameID)
				if err != nil {
					return xerrors.NewTaggedf[transform.SkipReconcileTag]("waiting for the node name: %v", err)
				}

				nodeIP, err := safe.ReaderGetByID[*k8s.NodeIP](ctx, r, k8s.KubeletID)
				if err != nil {
					return xerrors.NewTaggedf[transform.SkipReconcileTag]("waiting for the node IPs: %v", err)
				}

				cs := c.TypedSpec()
				name := nodename.TypedSpec().Nodename

				config, err := plain(KubeletConfiguration(cs))
				if err != nil {
					return fmt.Errorf("machine.kubelet.extraConfig: %w", err)
				}

				*out.TypedSpec() = k8s.KubeletSpecSpec{
					Image:                    cs.Image,
					Args:                     KubeletArgs(cs, name, nodeIP.TypedSpec().Addresses),
					ExtraMounts:              cs.ExtraMounts,
					ExpectedNodename:         name,
					Config:                   config,
					CredentialProviderConfig: cs.CredentialProviderConfig,
				}

				return nil
			},
		},
		transform.WithExtraInputs(
			controller.Input{Namespace: k8s.NamespaceName, Type: k8s.NodenameType, ID: optional.Some(k8s.NodenameID), Kind: controller.InputWeak},
			controller.Input{Namespace: k8s.NamespaceName, Type: k8s.NodeIPType, ID: optional.Some(k8s.KubeletID), Kind: controller.InputWeak},
		),
	)
}

// KubeletArgs are kubelet's command-line arguments, sorted, machine.kubelet.extraArgs winning.
func KubeletArgs(cs *k8s.KubeletConfigSpec, nodename string, ips []netip.Addr) []string {
	args := map[string]string{
		"bootstrap-kubeconfig": KubeletBootstrapConfig,
		"kubeconfig":           KubeletKubeconfig,
		"cert-dir":             KubeletCertDir,
		"config":               KubeletConfigFile,
		"hostname-override":    nodename,
	}

	if len(ips) > 0 {
		s := make([]string, 0, len(ips))
		for _, ip := range ips {
			s = append(s, ip.String())
		}

		args["node-ip"] = strings.Join(s, ",")
	}

	if cs.CloudProviderExternal {
		args["cloud-provider"] = "external"
	}

	maps.Copy(args, cs.ExtraArgs)

	out := make([]string, 0, len(args))
	for _, k := range slices.Sorted(maps.Keys(args)) {
		out = append(out, "--"+k+"="+args[k])
	}

	return out
}

// KubeletConfiguration is kubelet's config file as upstream fills it, then
// machine.kubelet.extraConfig over it.
func KubeletConfiguration(cs *k8s.KubeletConfigSpec) map[string]any {
	cfg := map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"address":                  "0.0.0.0",
		"port":                     int64(10250),
		"authentication":           map[string]any{"anonymous": map[string]any{"enabled": false}, "webhook": map[string]any{"enabled": true}, "x509": map[string]any{"clientCAFile": KubeletCAFile}},
		"authorization":            map[string]any{"mode": "Webhook"},
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               "/",
		"systemCgroups":            "/system",
		"kubeletCgroups":           "/podruntime/kubelet",
		"containerRuntimeEndpoint": ContainerdSocketEndpoint,
		"clusterDNS":               cs.ClusterDNS,
		"clusterDomain":            cs.ClusterDomain,
		"rotateCertificates":       true,
		"serializeImagePulls":      false,
		"failSwapOn":               false,
		// Upstream sets it with the KSPP sysctls machined applies on its own kernel; our nodes
		// share the host's kernel (container platform) and set none, so kubelet would refuse to
		// start. It returns with the metal mode's kernel parameters.
		"protectKernelDefaults":           false,
		"tlsMinVersion":                   "VersionTLS13",
		"shutdownGracePeriod":             "30s",
		"shutdownGracePeriodCriticalPods": "10s",
		"registerNode":                    !cs.SkipNodeRegistration,
		"seccompDefault":                  cs.DefaultRuntimeSeccompEnabled,
		// The pods' resolv.conf, as upstream's: the host DNS's pod address with
		// machine.features.hostDNS.forwardKubeDNSToHost, the node's resolvers otherwise.
		"resolvConf":     constants.PodResolvConfPath,
		"systemReserved": map[string]any{"cpu": "50m", "memory": "192Mi", "pid": "100", "ephemeral-storage": "256Mi"},
		"logging":        map[string]any{"format": "json"},
		// A control plane's kubelet registers as soon as the API server it runs answers, before
		// the API server has made its priority classes, so its first mirror pods are refused;
		// kubelet tries again at its next sync: every 10 s rather than every minute.
		"syncFrequency": "10s",
	}

	// The static pods: the static pod server's URL once it serves, and the manifests folder
	// unless machine.kubelet.disableManifestsDirectory.
	if cs.StaticPodListURL != "" {
		cfg["staticPodURL"] = cs.StaticPodListURL
		// The server is on loopback: polling it every 5 s rather than kubelet's 20 s starts
		// the control plane (and a changed static pod) up to 15 s sooner.
		cfg["httpCheckFrequency"] = "5s"
	}

	if !cs.DisableManifestsDirectory {
		cfg["staticPodPath"] = KubeletManifestsDir
	}

	// machine.features.diskQuotaSupport: kubelet measures the pods' ephemeral storage with
	// project quotas where the filesystem has them (XFS with prjquota), by walking it otherwise.
	if cs.EnableFSQuotaMonitoring {
		cfg["featureGates"] = map[string]any{"LocalStorageCapacityIsolationFSQuotaMonitoring": true}
	}

	maps.Copy(cfg, cs.ExtraConfig)

	return cfg
}
