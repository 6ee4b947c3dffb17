package container

// cluster.discovery.registries: with the discovery service registry off and the Kubernetes
// registry on, the members come from the Nodes' annotations. Named to run before
// cluster_test.go, whose tests reset and destroy the worker.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/talos-go/talos/internal/testenv"
)

// discoveryRegistries sets both nodes' registries, without a reboot.
func discoveryRegistries(t *testing.T, kubernetes, service bool) {
	t.Helper()

	for _, node := range []string{cp, w} {
		must(t, "-n", node, "patch", "machineconfig", "--mode", "no-reboot", "-p", fmt.Sprintf(
			`{"cluster": {"discovery": {"registries": {"kubernetes": {"disabled": %t}, "service": {"disabled": %t}}}}}`, !kubernetes, !service))
	}
}

// TestKubernetesDiscoveryRegistry: the worker writes its affiliate onto its Node, and the
// control plane, whose raw affiliates then come from the Kubernetes registry alone, lists
// every node in its members. The worker's own list of the Nodes is refused since Kubernetes
// 1.32 (AuthorizeNodeWithSelectors), as upstream's: the control plane's members are asserted.
func TestKubernetesDiscoveryRegistry(t *testing.T) {
	cs, _ := kube(t)

	discoveryRegistries(t, true, false)
	t.Cleanup(func() { discoveryRegistries(t, false, true) })

	testenv.WaitFor(t, "the worker's node id on its Node", 2*time.Minute, func() error {
		n, err := cs.CoreV1().Nodes().Get(t.Context(), clusterName+"-worker-1", metav1.GetOptions{})
		if err != nil {
			return err
		}

		if n.Annotations["cluster.talos.dev/node-id"] == "" || !strings.Contains(n.Annotations["networking.talos.dev/self-ips"], w) {
			return fmt.Errorf("annotations %v", n.Annotations)
		}

		return nil
	})

	testenv.WaitFor(t, "the control plane's raw affiliates from the Kubernetes registry alone", 2*time.Minute, func() error {
		out := must(t, "-n", cp, "get", "affiliates", "--namespace", "cluster-raw")
		if !strings.Contains(out, "k8s/") || strings.Contains(out, "service/") {
			return fmt.Errorf("raw affiliates:\n%s", out)
		}

		return nil
	})

	testenv.WaitFor(t, "every node in the members", 2*time.Minute, func() error {
		out := must(t, "-n", cp, "get", "members")

		for _, host := range []string{clusterName + "-controlplane-1", clusterName + "-worker-1"} {
			if !strings.Contains(out, host) {
				return fmt.Errorf("members lack %s:\n%s", host, out)
			}
		}

		return nil
	})
}
