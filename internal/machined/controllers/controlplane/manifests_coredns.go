package controlplane

import (
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
)

var coreDNSLabels = obj{"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}

// corefile is CoreDNS's config: the cluster's domain from the API, the rest forwarded to the
// node's resolvers, as upstream.
func corefile(domain string) string {
	return fmt.Sprintf(`.:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    log . {
        class error
    }
    prometheus :9153
    kubernetes %s in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30 {
        denial 9984 30
    }
    loop
    reload
    loadbalance
}
`, domain)
}

// coreDNS is the cluster's DNS: its service account and RBAC, the Corefile and a Deployment of
// two replicas that tolerate control planes.
func coreDNS(spec *k8s.BootstrapManifestsConfigSpec) []obj {
	selector := obj{"k8s-app": "kube-dns"}
	port := func(name string, p int, proto string) obj {
		return obj{"name": name, "containerPort": p, "protocol": proto}
	}

	return []obj{
		serviceAccount("coredns"),
		clusterRole("system:coredns",
			rule([]string{""}, []string{"endpoints", "services", "pods", "namespaces"}, []string{"list", "watch"}),
			rule([]string{"discovery.k8s.io"}, []string{"endpointslices"}, []string{"list", "watch"}),
		),
		serviceAccountBinding("system:coredns", "system:coredns", "coredns"),
		{
			"apiVersion": "v1",
			"kind":       "ConfigMap",
			"metadata":   meta("coredns", "kube-system", nil),
			"data":       obj{"Corefile": corefile(spec.ClusterDomain)},
		},
		{
			"apiVersion": "apps/v1",
			"kind":       "Deployment",
			"metadata":   meta("coredns", "kube-system", coreDNSLabels),
			"spec": obj{
				"replicas": 2,
				"strategy": obj{"type": "RollingUpdate", "rollingUpdate": obj{"maxUnavailable": 1}},
				"selector": obj{"matchLabels": selector},
				"template": obj{
					"metadata": obj{"labels": selector},
					"spec": obj{
						"priorityClassName":  "system-cluster-critical",
						"serviceAccountName": "coredns",
						"nodeSelector":       obj{"kubernetes.io/os": "linux"},
						"tolerations": []obj{
							{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
							{"key": "node.cloudprovider.kubernetes.io/uninitialized", "operator": "Exists", "effect": "NoSchedule"},
						},
						"containers": []obj{{
							"name":            "coredns",
							"image":           spec.CoreDNSImage,
							"imagePullPolicy": "IfNotPresent",
							"args":            []string{"-conf", "/etc/coredns/Corefile"},
							"resources": obj{
								"limits":   obj{"memory": "170Mi"},
								"requests": obj{"cpu": "100m", "memory": "70Mi"},
							},
							"ports": []obj{port("dns", 53, "UDP"), port("dns-tcp", 53, "TCP"), port("metrics", 9153, "TCP")},
							"securityContext": obj{
								"allowPrivilegeEscalation": false,
								"readOnlyRootFilesystem":   true,
								"capabilities":             obj{"add": []string{"NET_BIND_SERVICE"}, "drop": []string{"ALL"}},
							},
							"livenessProbe": obj{
								"httpGet":             obj{"path": "/health", "port": 8080, "scheme": "HTTP"},
								"initialDelaySeconds": 60, "timeoutSeconds": 5, "successThreshold": 1, "failureThreshold": 5,
							},
							// Probed every 2 s, not kubelet's default 10 s: CoreDNS's first probe
							// comes before its Kubernetes plugin has synced, and the next one is
							// what a new cluster waits for to answer DNS (up to 10 s of idle wait
							// in create's breakdown, docs/performance.md).
							"readinessProbe": obj{"httpGet": obj{"path": "/ready", "port": 8181, "scheme": "HTTP"}, "periodSeconds": 2},
							"volumeMounts":   []obj{{"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": true}},
						}},
						"dnsPolicy": "Default",
						"volumes": []obj{{
							"name":      "config-volume",
							"configMap": obj{"name": "coredns", "items": []obj{{"key": "Corefile", "path": "Corefile"}}},
						}},
					},
				},
			},
		},
	}
}

// coreDNSService is the kube-dns Service at the DNS service IP (the tenth of the service subnet).
func coreDNSService(spec *k8s.BootstrapManifestsConfigSpec) obj {
	svc := obj{
		"selector": obj{"k8s-app": "kube-dns"},
		"ports": []obj{
			{"name": "dns", "port": 53, "targetPort": 53, "protocol": "UDP"},
			{"name": "dns-tcp", "port": 53, "targetPort": 53, "protocol": "TCP"},
			{"name": "metrics", "port": 9153, "targetPort": 9153, "protocol": "TCP"},
		},
	}

	var ips []string

	for _, ip := range []string{spec.DNSServiceIP, spec.DNSServiceIPv6} {
		if ip != "" {
			ips = append(ips, ip)
		}
	}

	if len(ips) > 0 {
		svc["clusterIP"] = ips[0]
		svc["clusterIPs"] = ips
	}

	if len(ips) > 1 {
		svc["ipFamilyPolicy"] = "RequireDualStack"
	}

	return obj{
		"apiVersion": "v1",
		"kind":       "Service",
		"metadata": obj{
			"name": "kube-dns", "namespace": "kube-system",
			"labels":      obj{"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"},
			"annotations": obj{"prometheus.io/port": "9153", "prometheus.io/scrape": "true"},
		},
		"spec": svc,
	}
}
