package controlplane

import (
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"

	"github.com/talos-go/talos/internal/images"
)

// kubeProxy is kube-proxy on every node: its service account bound to system:node-proxier, the
// in-cluster kubeconfig it reads (the endpoint, the service account's CA and token) and its
// DaemonSet, on the host network.
func kubeProxy(spec *k8s.BootstrapManifestsConfigSpec) []obj {
	inCluster := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: %s
    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
users:
- name: service-account
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
contexts:
- name: default
  context:
    cluster: local
    user: service-account
current-context: default
`, spec.Server)

	labels := obj{"tier": "node", "k8s-app": "kube-proxy"}
	args := make([]any, 0, len(spec.ProxyArgs)+1)
	args = append(args, images.KubeBinDir+"/kube-proxy")

	for _, a := range spec.ProxyArgs {
		args = append(args, a)
	}

	return []obj{
		serviceAccount("kube-proxy"),
		serviceAccountBinding("kube-proxy", "system:node-proxier", "kube-proxy"),
		{
			"apiVersion": "v1",
			"kind":       "ConfigMap",
			"metadata":   meta("kubeconfig-in-cluster", "kube-system", nil),
			"data":       obj{"kubeconfig": inCluster},
		},
		{
			"apiVersion": "apps/v1",
			"kind":       "DaemonSet",
			"metadata":   meta("kube-proxy", "kube-system", labels),
			"spec": obj{
				"selector":       obj{"matchLabels": labels},
				"updateStrategy": obj{"type": "RollingUpdate"},
				"template": obj{
					"metadata": obj{"labels": labels},
					"spec": obj{
						"hostNetwork":        true,
						"priorityClassName":  "system-node-critical",
						"serviceAccountName": "kube-proxy",
						"tolerations":        []obj{{"operator": "Exists"}},
						"containers": []obj{{
							"name":            "kube-proxy",
							"image":           spec.ProxyImage,
							"imagePullPolicy": "IfNotPresent",
							"command":         args,
							"env":             []obj{envFrom("NODE_NAME", "spec.nodeName"), envFrom("POD_IP", "status.podIP")},
							"securityContext": obj{"privileged": true},
							"volumeMounts": []obj{
								{"name": "lib-modules", "mountPath": "/lib/modules", "readOnly": true},
								{"name": "xtables-lock", "mountPath": "/run/xtables.lock"},
								{"name": "kubeconfig", "mountPath": "/etc/kubernetes"},
							},
						}},
						"volumes": []obj{
							hostPathVolume("lib-modules", "/lib/modules", ""),
							hostPathVolume("xtables-lock", "/run/xtables.lock", "FileOrCreate"),
							{"name": "kubeconfig", "configMap": obj{"name": "kubeconfig-in-cluster"}},
						},
					},
				},
			},
		},
	}
}
