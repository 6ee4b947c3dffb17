// Package sensitive decides which resources hold secrets and so are readable by os:admin only.
// It is the one rule for every reader: apid applies it to a COSI request before forwarding it,
// machined to every read of its State API, and `talosctl support` to what it collects.
//
// It names types as strings rather than importing the machinery resource packages, so that
// apid stays small; its test checks the list against machinery's own definitions.
package sensitive

import (
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// secretsNamespace holds the node's keys and tokens, whatever their type.
const secretsNamespace = "secrets"

// types are the resource types holding secrets outside what the namespace already covers.
var types = map[string]bool{
	// Every machinery v1.11.0 type whose definition is meta.Sensitive.
	"VolumeConfigs.block.talos.dev":                    true,
	"DiscoveryConfigs.cluster.talos.dev":               true, // the discovery service's encryption key
	"MachineConfigs.config.talos.dev":                  true, // the machine config: every key and token
	"AuditPolicyConfigs.kubernetes.talos.dev":          true,
	"NodeAnnotationSpecs.k8s.talos.dev":                true,
	"NodeCordonedSpecs.k8s.talos.dev":                  true,
	"NodeLabelSpecs.k8s.talos.dev":                     true,
	"NodeTaintSpecs.k8s.talos.dev":                     true,
	"KubeSpanConfigs.kubespan.talos.dev":               true, // the KubeSpan shared secret
	"KubeSpanIdentities.kubespan.talos.dev":            true, // the KubeSpan private key
	"DeviceConfigSpecs.net.talos.dev":                  true,
	"LinkSpecs.net.talos.dev":                          true, // WireGuard private keys
	"OperatorSpecs.net.talos.dev":                      true,
	"ApiCertificates.secrets.talos.dev":                true,
	"CertSANs.secrets.talos.dev":                       true,
	"EncryptionSalts.secrets.talos.dev":                true,
	"EtcdSecrets.secrets.talos.dev":                    true,
	"EtcdRootSecrets.secrets.talos.dev":                true,
	"KubeletSecrets.secrets.talos.dev":                 true,
	"KubernetesSecrets.secrets.talos.dev":              true,
	"KubernetesDynamicCerts.secrets.talos.dev":         true,
	"KubernetesRootSecrets.secrets.talos.dev":          true,
	"MaintenanceServiceCertificates.secrets.talos.dev": true,
	"MaintenanceRootSecrets.secrets.talos.dev":         true,
	"OSRootSecrets.secrets.talos.dev":                  true,
	"TrustdCertificates.secrets.talos.dev":             true,
	"SiderolinkConfigs.siderolink.talos.dev":           true,
	"SiderolinkTunnels.siderolink.talos.dev":           true,

	// Not marked by machinery, but secret here: the rendered bootstrap manifests carry the
	// kubelet bootstrap token as a Secret (and any Secret of cluster.inlineManifests), and the
	// extra manifests config carries inline manifests and the extraHeaders of their URLs
	// (often an Authorization header).
	"Manifests.kubernetes.talos.dev":             true,
	"ExtraManifestsConfigs.kubernetes.talos.dev": true,
}

// Resource reports whether reading resources of typ in namespace may expose secrets.
func Resource(namespace, typ string) bool {
	return namespace == secretsNamespace || types[typ]
}

// Authorize returns nil when roles may read resources of typ in namespace, and otherwise a
// PermissionDenied error naming the type and the role it needs.
func Authorize(namespace, typ string, roles role.Set) error {
	if !Resource(namespace, typ) || roles.Includes(role.Admin) {
		return nil
	}

	return status.Errorf(codes.PermissionDenied, "reading %s (namespace %s) requires role %s: it holds secrets", typ, namespace, role.Admin)
}
