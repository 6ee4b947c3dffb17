package k8s

import (
	"maps"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"

	"github.com/talos-go/talos/internal/images"
	secretsctrl "github.com/talos-go/talos/internal/machined/controllers/secrets"
)

// secretPath is where a component's secret file is in its container.
func secretPath(component, file string) string {
	return filepath.Join(secretsctrl.ContainerSecretsDir, component, file)
}

func configPath(component, file string) string {
	return filepath.Join(ContainerConfigDir, component, file)
}

// component is what differs between the control plane's pods.
type component struct {
	name      string
	image     string
	command   []any
	env       map[string]string
	volumes   []k8s.ExtraVolume // host folder → container folder
	resources k8s.Resources
	defaults  k8s.Resources // upstream's requests when the config sets none
	probePort int           // the component's secure port, probed at probePath (0: none)
	probePath string        // a path the component serves: /livez, or /healthz where it has no /livez
}

func (ctrl *StaticPodController) apiServerPod(in inputs) map[string]any {
	api := in.api
	dir := secretsctrl.APIServerDir
	args := map[string]string{
		"admission-control-config-file":      configPath(k8s.APIServerID, FileAdmissionConfig),
		"advertise-address":                  api.AdvertisedAddress,
		"allow-privileged":                   "true",
		"api-audiences":                      api.ControlPlaneEndpoint,
		"audit-log-maxage":                   "30",
		"audit-log-maxbackup":                "3",
		"audit-log-maxsize":                  "50",
		"audit-log-path":                     filepath.Join(ContainerAuditDir, "kube-apiserver.log"),
		"audit-policy-file":                  configPath(k8s.APIServerID, FileAuditPolicy),
		"authorization-config":               configPath(k8s.APIServerID, FileAuthorizationConfig),
		"bind-address":                       "0.0.0.0",
		"client-ca-file":                     secretPath(dir, secretsctrl.FileCA),
		"enable-admission-plugins":           "NodeRestriction",
		"enable-aggregator-routing":          "true",
		"enable-bootstrap-token-auth":        "true",
		"encryption-provider-config":         secretPath(dir, secretsctrl.FileEncryptionConfig),
		"etcd-cafile":                        secretPath(dir, secretsctrl.FileEtcdCA),
		"etcd-certfile":                      secretPath(dir, secretsctrl.FileEtcdClientCrt),
		"etcd-keyfile":                       secretPath(dir, secretsctrl.FileEtcdClientKey),
		"etcd-servers":                       join(api.EtcdServers),
		"kubelet-client-certificate":         secretPath(dir, secretsctrl.FileKubeletClientCrt),
		"kubelet-client-key":                 secretPath(dir, secretsctrl.FileKubeletClientKey),
		"kubelet-preferred-address-types":    "InternalIP,ExternalIP,Hostname",
		"profiling":                          "false",
		"proxy-client-cert-file":             secretPath(dir, secretsctrl.FileFrontProxyCrt),
		"proxy-client-key-file":              secretPath(dir, secretsctrl.FileFrontProxyKey),
		"requestheader-allowed-names":        "front-proxy-client",
		"requestheader-client-ca-file":       secretPath(dir, secretsctrl.FileAggregatorCA),
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-username-headers":     "X-Remote-User",
		"secure-port":                        strconv.Itoa(api.LocalPort),
		"service-account-issuer":             api.ControlPlaneEndpoint,
		"service-account-key-file":           secretPath(dir, secretsctrl.FileServiceAccountPub),
		"service-account-signing-key-file":   secretPath(dir, secretsctrl.FileServiceAccountKey),
		"service-cluster-ip-range":           join(api.ServiceCIDRs),
		"tls-cert-file":                      secretPath(dir, secretsctrl.FileAPIServerCrt),
		"tls-min-version":                    "VersionTLS13",
		"tls-private-key-file":               secretPath(dir, secretsctrl.FileAPIServerKey),
	}

	if api.CloudProvider != "" {
		args["cloud-provider"] = api.CloudProvider
	}

	// authorization-mode and authorization-config exclude each other: the config's wins.
	if _, ok := api.ExtraArgs["authorization-mode"]; ok {
		delete(args, "authorization-config")
	}

	env := map[string]string{}
	maps.Copy(env, api.EnvironmentVariables)

	return ctrl.pod(in, component{
		name:    k8s.APIServerID,
		image:   api.Image,
		command: argList(images.KubeBinDir+"/kube-apiserver", args, api.ExtraArgs),
		env:     env,
		volumes: append([]k8s.ExtraVolume{
			{Name: "secrets", HostPath: filepath.Join(ctrl.SecretsDir, dir), MountPath: filepath.Join(secretsctrl.ContainerSecretsDir, dir), ReadOnly: true},
			{Name: "config", HostPath: filepath.Join(ctrl.ConfigDir, k8s.APIServerID), MountPath: filepath.Join(ContainerConfigDir, k8s.APIServerID), ReadOnly: true},
			{Name: "audit", HostPath: ctrl.AuditLogDir, MountPath: ContainerAuditDir},
		}, api.ExtraVolumes...),
		resources: api.Resources,
		defaults:  k8s.Resources{Requests: map[string]string{"cpu": "200m", "memory": "512Mi"}},
		probePort: api.LocalPort,
		probePath: "/livez",
	})
}

func (ctrl *StaticPodController) controllerManagerPod(in inputs) map[string]any {
	cm := in.cm
	dir := secretsctrl.ControllerManagerDir
	kubeconfig := secretPath(dir, secretsctrl.FileKubeconfig)
	args := map[string]string{
		"allocate-node-cidrs":              "true",
		"authentication-kubeconfig":        kubeconfig,
		"authorization-kubeconfig":         kubeconfig,
		"bind-address":                     "127.0.0.1",
		"cluster-cidr":                     join(cm.PodCIDRs),
		"cluster-signing-cert-file":        secretPath(dir, secretsctrl.FileCA),
		"cluster-signing-key-file":         secretPath(dir, secretsctrl.FileCAKey),
		"configure-cloud-routes":           "false",
		"controllers":                      "*,tokencleaner",
		"kubeconfig":                       kubeconfig,
		"leader-elect":                     "true",
		"profiling":                        "false",
		"root-ca-file":                     secretPath(dir, secretsctrl.FileCA),
		"service-account-private-key-file": secretPath(dir, secretsctrl.FileServiceAccountKey),
		"service-cluster-ip-range":         join(cm.ServiceCIDRs),
		"tls-min-version":                  "VersionTLS13",
		"use-service-account-credentials":  "true",
	}

	if cm.CloudProvider != "" {
		args["cloud-provider"] = cm.CloudProvider
	}

	return ctrl.pod(in, component{
		name:    k8s.ControllerManagerID,
		image:   cm.Image,
		command: argList(images.KubeBinDir+"/kube-controller-manager", args, cm.ExtraArgs),
		env:     cm.EnvironmentVariables,
		volumes: append([]k8s.ExtraVolume{
			{Name: "secrets", HostPath: filepath.Join(ctrl.SecretsDir, dir), MountPath: filepath.Join(secretsctrl.ContainerSecretsDir, dir), ReadOnly: true},
		}, cm.ExtraVolumes...),
		resources: cm.Resources,
		defaults:  k8s.Resources{Requests: map[string]string{"cpu": "50m", "memory": "256Mi"}},
		probePort: 10257,
		// kube-controller-manager serves /healthz, not /livez (a 404 there had kubelet kill it
		// every ~90 s); as upstream Talos's pod.
		probePath: "/healthz",
	})
}

func (ctrl *StaticPodController) schedulerPod(in inputs) map[string]any {
	s := in.sched
	dir := secretsctrl.SchedulerDir
	kubeconfig := secretPath(dir, secretsctrl.FileKubeconfig)
	args := map[string]string{
		"authentication-kubeconfig": kubeconfig,
		"authorization-kubeconfig":  kubeconfig,
		"bind-address":              "127.0.0.1",
		"config":                    configPath(k8s.SchedulerID, FileSchedulerConfig),
		"leader-elect":              "true",
		"profiling":                 "false",
		"tls-min-version":           "VersionTLS13",
	}

	return ctrl.pod(in, component{
		name:    k8s.SchedulerID,
		image:   s.Image,
		command: argList(images.KubeBinDir+"/kube-scheduler", args, s.ExtraArgs),
		env:     s.EnvironmentVariables,
		volumes: append([]k8s.ExtraVolume{
			{Name: "secrets", HostPath: filepath.Join(ctrl.SecretsDir, dir), MountPath: filepath.Join(secretsctrl.ContainerSecretsDir, dir), ReadOnly: true},
			{Name: "config", HostPath: filepath.Join(ctrl.ConfigDir, k8s.SchedulerID), MountPath: filepath.Join(ContainerConfigDir, k8s.SchedulerID), ReadOnly: true},
		}, s.ExtraVolumes...),
		resources: s.Resources,
		defaults:  k8s.Resources{Requests: map[string]string{"cpu": "10m", "memory": "64Mi"}},
		probePort: 10259,
		probePath: "/livez",
	})
}

// pod is the static pod of c: kube-system, host network, critical, tolerating everything, its
// folders mounted, and its secrets' version as an annotation.
func (ctrl *StaticPodController) pod(in inputs, c component) map[string]any {
	env := []any{map[string]any{"name": "POD_IP", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "status.podIP"}}}}
	for _, k := range slices.Sorted(maps.Keys(c.env)) {
		env = append(env, map[string]any{"name": k, "value": c.env[k]})
	}

	var mounts, volumes []any

	for _, v := range c.volumes {
		mounts = append(mounts, map[string]any{"name": v.Name, "mountPath": v.MountPath, "readOnly": v.ReadOnly})
		volumes = append(volumes, map[string]any{"name": v.Name, "hostPath": map[string]any{"path": v.HostPath}})
	}

	container := map[string]any{
		"name":         c.name,
		"image":        c.image,
		"command":      c.command,
		"env":          env,
		"volumeMounts": mounts,
		"resources":    podResources(c.resources, c.defaults),
	}

	if c.probePort != 0 {
		container["livenessProbe"] = map[string]any{
			"httpGet":             map[string]any{"host": "localhost", "path": c.probePath, "port": int64(c.probePort), "scheme": "HTTPS"},
			"initialDelaySeconds": int64(15),
			"timeoutSeconds":      int64(15),
			"failureThreshold":    int64(8),
		}
	}

	return map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata": map[string]any{
			"name":        c.name,
			"namespace":   "kube-system",
			"labels":      map[string]any{"tier": "control-plane", "k8s-app": c.name},
			"annotations": map[string]any{SecretsVersionAnnotation: in.secretsVer},
		},
		"spec": map[string]any{
			"priorityClassName": "system-cluster-critical",
			"hostNetwork":       true,
			"tolerations":       []any{map[string]any{"operator": "Exists"}},
			"securityContext":   map[string]any{"seccompProfile": map[string]any{"type": "RuntimeDefault"}},
			"containers":        []any{container},
			"volumes":           volumes,
		},
	}
}

func podResources(set, defaults k8s.Resources) map[string]any {
	out := map[string]any{}

	for key, m := range map[string][2]map[string]string{"requests": {defaults.Requests, set.Requests}, "limits": {defaults.Limits, set.Limits}} {
		merged := map[string]any{}

		for _, src := range m {
			for k, v := range src {
				merged[k] = v
			}
		}

		if len(merged) > 0 {
			out[key] = merged
		}
	}

	return out
}
