package server

import "testing"

// TestCRINames: a pod's sandbox is named by the pod ID, its containers "<pod ID>:<name>", as
// upstream's CRI inspector lists them; a container of no pod keeps its own ID.
func TestCRINames(t *testing.T) {
	pod := map[string]string{labelPodNamespace: "kube-system", labelPodName: "coredns-1", labelPodUID: "u1"}

	sandbox := map[string]string{labelCRIKind: "sandbox"}
	container := map[string]string{labelCRIKind: "container", labelContainer: "coredns"}

	for k, v := range pod {
		sandbox[k], container[k] = v, v
	}

	if podID, name, id, isSandbox, ok := criNames(sandbox); !ok || !isSandbox || podID != "kube-system/coredns-1" || name != podID || id != podID {
		t.Errorf("sandbox: %q %q %q %v %v; want the pod ID for all three", podID, name, id, isSandbox, ok)
	}

	if podID, name, id, isSandbox, ok := criNames(container); !ok || isSandbox || podID != "kube-system/coredns-1" || name != "coredns" || id != "kube-system/coredns-1:coredns" {
		t.Errorf("container: %q %q %q %v %v", podID, name, id, isSandbox, ok)
	}

	if _, _, _, _, ok := criNames(map[string]string{}); ok {
		t.Error("a container of no pod is named as one of a pod")
	}
}
