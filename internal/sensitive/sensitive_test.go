package sensitive

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/siderolabs/talos/pkg/machinery/resources/siderolink"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/machined/resources"
)

func TestAuthorize(t *testing.T) {
	for _, tc := range []struct {
		class, namespace, typ string
		sensitive             bool
	}{
		{"secrets namespace, a type the list does not name", "secrets", "SomethingNew.secrets.talos.dev", true},
		{"machinery Sensitive, secrets", secrets.NamespaceName, secrets.OSRootType, true},
		{"machinery Sensitive, outside secrets", network.NamespaceName, network.LinkSpecType, true},
		{"machinery Sensitive, KubeSpan identity", kubespan.NamespaceName, kubespan.IdentityType, true},
		{"machine config", config.NamespaceName, config.MachineConfigType, true},
		{"manifests (bootstrap token)", k8s.ControlPlaneNamespaceName, k8s.ManifestType, true},
		{"extra manifests config", k8s.ControlPlaneNamespaceName, k8s.ExtraManifestsConfigType, true},
		{"not sensitive: link status", network.NamespaceName, network.LinkStatusType, false},
		{"not sensitive: manifest status", k8s.ControlPlaneNamespaceName, k8s.ManifestStatusType, false},
		{"not sensitive: machine type", config.NamespaceName, config.MachineTypeType, false},
	} {
		if got := Resource(tc.namespace, tc.typ); got != tc.sensitive {
			t.Errorf("%s: Resource(%s, %s) = %v, want %v", tc.class, tc.namespace, tc.typ, got, tc.sensitive)
		}

		if err := Authorize(tc.namespace, tc.typ, role.MakeSet(role.Admin)); err != nil {
			t.Errorf("%s: admin refused: %v", tc.class, err)
		}

		for _, r := range []role.Role{role.Reader, role.Operator, role.EtcdBackup} {
			err := Authorize(tc.namespace, tc.typ, role.MakeSet(r))

			switch {
			case !tc.sensitive && err != nil:
				t.Errorf("%s: %s refused: %v", tc.class, r, err)
			case tc.sensitive && (status.Code(err) != codes.PermissionDenied ||
				!strings.Contains(err.Error(), tc.typ) || !strings.Contains(err.Error(), "requires role os:admin")):
				t.Errorf("%s: %s: want PermissionDenied naming %s and os:admin, got %v", tc.class, r, tc.typ, err)
			}
		}
	}
}

// machinerySensitive are machinery's types marked meta.Sensitive (v1.11.0).
var machinerySensitive = []meta.ResourceWithRD{
	&block.VolumeConfig{}, &cluster.Config{}, &config.MachineConfig{},
	&k8s.AuditPolicyConfig{}, &k8s.NodeAnnotationSpec{}, &k8s.NodeCordonedSpec{}, &k8s.NodeLabelSpec{}, &k8s.NodeTaintSpec{},
	&kubespan.Config{}, &kubespan.Identity{},
	&network.DeviceConfigSpec{}, &network.LinkSpec{}, &network.OperatorSpec{},
	&secrets.API{}, &secrets.CertSAN{}, &secrets.EncryptionSalt{}, &secrets.Etcd{}, &secrets.EtcdRoot{}, &secrets.Kubelet{},
	&secrets.Kubernetes{}, &secrets.KubernetesDynamicCerts{}, &secrets.KubernetesRoot{}, &secrets.MaintenanceServiceCerts{},
	&secrets.MaintenanceRoot{}, &secrets.OSRoot{}, &secrets.Trustd{},
	&siderolink.Config{}, &siderolink.Tunnel{},
}

// TestMachinerySensitive: the rule covers every type machinery marks Sensitive. The list above
// holds only Sensitive types, and as many as machinery's sources mark, so it is all of them: a
// machinery upgrade that marks another type fails here.
func TestMachinerySensitive(t *testing.T) {
	for _, r := range machinerySensitive {
		spec := r.ResourceDefinition()
		if spec.Sensitivity != meta.Sensitive {
			t.Errorf("%s is not Sensitive in machinery: take it off the list", spec.Type)
		}

		if !Resource(spec.DefaultNamespace, spec.Type) {
			t.Errorf("%s is Sensitive in machinery but not in the rule", spec.Type)
		}
	}

	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/siderolabs/talos/pkg/machinery").Output()
	if err != nil {
		t.Fatalf("locating machinery's sources: %v", err)
	}

	marked := regexp.MustCompile(`Sensitivity:\s+meta\.Sensitive`)
	count := 0

	err = filepath.WalkDir(filepath.Join(strings.TrimSpace(string(out)), "resources"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}

		data, err := os.ReadFile(path)
		count += len(marked.FindAll(data, -1))

		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	if count != len(machinerySensitive) {
		t.Errorf("machinery marks %d types Sensitive, the list has %d: add the new ones here and to the rule", count, len(machinerySensitive))
	}
}

// TestServedDefinitions: every type machined serves whose definition is Sensitive, or whose
// home is the secrets namespace, is covered.
func TestServedDefinitions(t *testing.T) {
	for _, r := range resources.Definitions {
		spec := r.ResourceDefinition()
		if (spec.Sensitivity == meta.Sensitive || spec.DefaultNamespace == secrets.NamespaceName) && !Resource(spec.DefaultNamespace, spec.Type) {
			t.Errorf("machined serves %s (namespace %s) marked sensitive, but the rule lets non-admins read it", spec.Type, spec.DefaultNamespace)
		}
	}
}
