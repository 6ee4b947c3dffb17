package server

import "testing"

// TestCRINames: a pod's sandbox is named by the pod ID, its containers "<pod ID>:<name>:<ID's
// first 12 characters>", as upstream's CRI inspector lists them; a container of no pod keeps its
// own ID.
func TestCRINames(t *testing.T) {
	pod := map[string]string{labelPodNamespace: "kube-system", labelPodName: "coredns-1", labelPodUID: "u1"}

	sandbox := map[string]string{labelCRIKind: "sandbox"}
	container := map[string]string{labelCRIKind: "container", labelContainer: "coredns"}

	for k, v := range pod {
		sandbox[k], container[k] = v, v
	}

	if podID, name, id, isSandbox, ok := criNames(sandbox, "5a1d"); !ok || !isSandbox || podID != "kube-system/coredns-1" || name != podID || id != podID {
		t.Errorf("sandbox: %q %q %q %v %v; want the pod ID for all three", podID, name, id, isSandbox, ok)
	}

	const cid = "3c0b6e8e8b8a77f2d1e0c9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a9f8"
	if podID, name, id, isSandbox, ok := criNames(container, cid); !ok || isSandbox || podID != "kube-system/coredns-1" || name != "coredns" || id != "kube-system/coredns-1:coredns:3c0b6e8e8b8a" {
		t.Errorf("container: %q %q %q %v %v", podID, name, id, isSandbox, ok)
	}

	if _, _, _, _, ok := criNames(map[string]string{}, cid); ok {
		t.Error("a container of no pod is named as one of a pod")
	}

	// The names the API takes back (logs, restart), as upstream's inspector parses them.
	for _, tc := range []struct {
		id          string
		labels      map[string]string
		containerID string
		matches     bool
	}{
		{"kube-system/coredns-1", sandbox, "5a1d", true},
		{"kube-system/coredns-1", container, cid, false},
		{"kube-system/coredns-1:coredns", container, cid, true},
		{"kube-system/coredns-1:coredns:3c0b6e8e8b8a", container, cid, true},
		{"kube-system/coredns-1:coredns:ffff", container, cid, false},
		{"kube-system/coredns-1:coredns:", container, cid, false},
		{"kube-system/coredns-1:other", container, cid, false},
		{"kube-system/coredns-2:coredns", container, cid, false},
		{"kube-system/coredns-1:coredns", sandbox, "5a1d", false},
		{"coredns", map[string]string{}, cid, false},
	} {
		if got := criDisplayMatches(tc.id, tc.labels, tc.containerID); got != tc.matches {
			t.Errorf("%q names %v (%s): %v, want %v", tc.id, tc.labels, tc.containerID, got, tc.matches)
		}
	}
}

// A pod container's task state in CRI's words.
func TestCRIContainerStatus(t *testing.T) {
	for task, want := range map[string]string{
		"RUNNING": "CONTAINER_RUNNING", "PAUSED": "CONTAINER_RUNNING", "CREATED": "CONTAINER_CREATED",
		"STOPPED": "CONTAINER_EXITED", "UNKNOWN": "CONTAINER_UNKNOWN", "": "CONTAINER_UNKNOWN",
	} {
		if got := criContainerStatus(task); got != want {
			t.Errorf("%q: %q, want %q", task, got, want)
		}
	}
}
