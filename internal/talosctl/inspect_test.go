package talosctl

import (
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/inspect"
)

func TestDependencyGraph(t *testing.T) {
	edge := func(ctrl string, typ inspect.DependencyEdgeType, ns, rtype, id string) *inspect.ControllerDependencyEdge {
		return &inspect.ControllerDependencyEdge{ControllerName: ctrl, EdgeType: typ, ResourceNamespace: ns, ResourceType: rtype, ResourceId: id}
	}

	g := dependencyGraph([]*inspect.ControllerDependencyEdge{
		edge("network.HostnameStatusController", inspect.DependencyEdgeType_INPUT_STRONG, "network", "HostnameSpecs.net.talos.dev", ""),
		edge("network.HostnameStatusController", inspect.DependencyEdgeType_OUTPUT_EXCLUSIVE, "network", "HostnameStatuses.net.talos.dev", ""),
		edge("secrets.APIController", inspect.DependencyEdgeType_INPUT_WEAK, "network", "HostnameStatuses.net.talos.dev", "hostname"),
		edge("secrets.APIController", inspect.DependencyEdgeType_INPUT_DESTROY_READY, "secrets", "CertSANs.secrets.talos.dev", ""),
		edge("secrets.APIController", inspect.DependencyEdgeType_OUTPUT_SHARED, "secrets", "ApiCertificates.secrets.talos.dev", ""),
	})

	golden(t, "inspect-dependencies.dot", g.String()+"\n")
}

// checkInspect reads the controller graph of a running node (called from the machined-socket
// integration test, which owns the node).
func checkInspect(t *testing.T, sock []string) {
	t.Helper()

	out, _ := runUntil(t, ok, append(sock, "inspect", "dependencies")...)
	if !strings.HasPrefix(out, "digraph") {
		t.Fatalf("not a Graphviz digraph:\n%s", out)
	}

	mustContain(t, out, "network.Hostname", `"network\nHostnameStatuses.net.talos.dev"`, "style=\"bold\"")

	out, _ = runUntil(t, ok, append(sock, "inspect", "dependencies", "--with-resources")...)
	mustContain(t, out, `label="hostname",shape="note"`)
}
