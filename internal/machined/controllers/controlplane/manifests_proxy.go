package controlplane

import (
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/talos-go/talos/internal/images"
	"github.com/talos-go/talos/internal/kubeconfig"
)

// serviceAccountDir is where a pod finds its service account's CA and token.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// kubeProxy is kube-proxy on every node: its service account bound to system:node-proxier, the
// in-cluster kubeconfig it reads (the endpoint, the service account's CA and token) and its
// DaemonSet, on the host network.
func kubeProxy(spec *k8s.BootstrapManifestsConfigSpec) ([]obj, error) {
	inCluster, err := kubeconfig.Single{
		ClusterName: "local",
		Cluster:     clientcmdapi.Cluster{Server: spec.Server, CertificateAuthority: serviceAccountDir + "/ca.crt"},
		UserName:    "service-account",
		User:        clientcmdapi.AuthInfo{TokenFile: serviceAccountDir + "/token"},
		ContextName: "default",
	}.Encode()
	if err != nil {
		return nil, err
	}

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
			"data":       obj{"kubeconfig": string(inCluster)},
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
	}, nil
}
