package controlplane

import (
	"encoding/json"
	"net/netip"

	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"

	"github.com/talos-go/talos/internal/images"
)

// flannelCNIConf is the CNI config flannel installs on each node, as upstream: the `flannel`
// plugin, which delegates to `bridge` with `host-local` addresses from the node's pod subnet,
// then `portmap` for host ports.
const flannelCNIConf = `{
  "name": "cbr0",
  "cniVersion": "1.0.0",
  "plugins": [
    {
      "type": "flannel",
      "delegate": {
        "hairpinMode": true,
        "isDefaultGateway": true
      }
    },
    {
      "type": "portmap",
      "capabilities": {
        "portMappings": true
      }
    }
  ]
}
`

// flannelNetConf is flannel's network: the pod subnets, VXLAN on its IANA port.
func flannelNetConf(podCIDRs []string) string {
	conf := obj{"Backend": obj{"Type": "vxlan", "Port": 4789}}

	for _, c := range podCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			continue // validated with the config
		}

		if p.Addr().Is4() {
			conf["Network"] = c
		} else {
			conf["EnableIPv6"] = true
			conf["IPv6Network"] = c
		}
	}

	if _, ok := conf["Network"]; !ok {
		conf["EnableIPv4"] = false
	}

	out, _ := json.MarshalIndent(conf, "", "  ") //nolint:errchkjson // plain values

	return string(out)
}

// flannel is the default CNI: its RBAC, its config and the kube-flannel DaemonSet on every node,
// whose init container installs the CNI config into /etc/cni/net.d.
func flannel(spec *k8s.BootstrapManifestsConfigSpec) []obj {
	labels := obj{"tier": "node", "k8s-app": "flannel", "app": "flannel"}

	command := []any{images.FlanneldPath, "--ip-masq", "--kube-subnet-mgr"}
	for _, a := range spec.FlannelExtraArgs {
		command = append(command, a)
	}

	env := []obj{
		envFrom("POD_NAME", "metadata.name"),
		envFrom("POD_NAMESPACE", "metadata.namespace"),
		{"name": "EVENT_QUEUE_DEPTH", "value": "5000"},
	}

	if spec.FlannelKubeServiceHost != "" {
		env = append(env,
			obj{"name": "KUBERNETES_SERVICE_HOST", "value": spec.FlannelKubeServiceHost},
			obj{"name": "KUBERNETES_SERVICE_PORT", "value": spec.FlannelKubeServicePort},
		)
	}

	return []obj{
		clusterRole("flannel",
			rule([]string{""}, []string{"pods"}, []string{"get"}),
			rule([]string{""}, []string{"nodes"}, []string{"get", "list", "watch"}),
			rule([]string{""}, []string{"nodes/status"}, []string{"patch"}),
		),
		serviceAccountBinding("flannel", "flannel", "flannel"),
		serviceAccount("flannel"),
		{
			"apiVersion": "v1",
			"kind":       "ConfigMap",
			"metadata":   meta("kube-flannel-cfg", "kube-system", obj{"tier": "node", "k8s-app": "flannel", "app": "flannel"}),
			"data":       obj{"cni-conf.json": flannelCNIConf, "net-conf.json": flannelNetConf(spec.PodCIDRs)},
		},
		{
			"apiVersion": "apps/v1",
			"kind":       "DaemonSet",
			"metadata":   meta("kube-flannel", "kube-system", labels),
			"spec": obj{
				"selector": obj{"matchLabels": obj{"app": "flannel"}},
				"template": obj{
					"metadata": obj{"labels": labels},
					"spec": obj{
						"affinity": obj{"nodeAffinity": obj{"requiredDuringSchedulingIgnoredDuringExecution": obj{
							"nodeSelectorTerms": []obj{{"matchExpressions": []obj{{"key": "kubernetes.io/os", "operator": "In", "values": []string{"linux"}}}}},
						}}},
						"hostNetwork":        true,
						"priorityClassName":  "system-node-critical",
						"serviceAccountName": "flannel",
						"tolerations":        []obj{{"operator": "Exists", "effect": "NoSchedule"}, {"operator": "Exists", "effect": "NoExecute"}},
						"initContainers": []obj{{
							"name":         "install-config",
							"image":        spec.FlannelImage,
							"command":      []string{"cp", "-f", "/etc/kube-flannel/cni-conf.json", "/etc/cni/net.d/10-flannel.conflist"},
							"volumeMounts": []obj{{"name": "cni", "mountPath": "/etc/cni/net.d"}, {"name": "flannel-cfg", "mountPath": "/etc/kube-flannel/"}},
						}},
						"containers": []obj{{
							"name":      "kube-flannel",
							"image":     spec.FlannelImage,
							"command":   command,
							"resources": obj{"requests": obj{"cpu": "100m", "memory": "50Mi"}},
							"securityContext": obj{
								"privileged":   false,
								"capabilities": obj{"add": []string{"NET_ADMIN", "NET_RAW"}},
							},
							"env": env,
							"volumeMounts": []obj{
								{"name": "run", "mountPath": "/run/flannel"},
								{"name": "flannel-cfg", "mountPath": "/etc/kube-flannel/"},
								{"name": "xtables-lock", "mountPath": "/run/xtables.lock"},
							},
						}},
						"volumes": []obj{
							hostPathVolume("run", "/run/flannel", ""),
							hostPathVolume("cni", "/etc/cni/net.d", ""),
							{"name": "flannel-cfg", "configMap": obj{"name": "kube-flannel-cfg"}},
							hostPathVolume("xtables-lock", "/run/xtables.lock", "FileOrCreate"),
						},
					},
				},
			},
		},
	}
}
