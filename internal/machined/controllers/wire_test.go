package controllers_test

import (
	"testing"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/protobuf"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
)

// assertOnTheWire checks that every resource of the Kubernetes types encodes as upstream
// talosctl reads it: protobuf (the State API) and YAML (`get -o yaml`), and decodes back.
func assertOnTheWire(t *testing.T, env *ctest.Env) {
	t.Helper()

	kinds := []resource.Resource{
		k8s.NewStaticPod(k8s.NamespaceName, ""), k8s.NewKubeletSpec(k8s.NamespaceName, ""), k8s.NewKubeletConfig(k8s.NamespaceName, ""),
		k8s.NewNodename(k8s.NamespaceName, ""), k8s.NewNodeIP(k8s.NamespaceName, ""), k8s.NewNodeIPConfig(k8s.NamespaceName, ""),
		k8s.NewManifest(k8s.ControlPlaneNamespaceName, ""), k8s.NewAPIServerConfig(), k8s.NewControllerManagerConfig(), k8s.NewSchedulerConfig(),
		k8s.NewAdmissionControlConfig(), k8s.NewAuditPolicyConfig(), k8s.NewAuthorizationConfig(), k8s.NewBootstrapManifestsConfig(),
		secrets.NewKubernetesRoot(""), secrets.NewKubernetes(), secrets.NewKubernetesDynamicCerts(), secrets.NewKubelet(""),
	}

	total := 0

	for _, kind := range kinds {
		list, err := env.State.List(env.Ctx, kind.Metadata())
		require.NoError(t, err)
		require.NotEmpty(t, list.Items, "no %s", kind.Metadata().Type())

		for _, r := range list.Items {
			p, err := protobuf.FromResource(r)
			require.NoError(t, err, "%s to protobuf", r.Metadata())

			_, err = protobuf.UnmarshalResource(p)
			require.NoError(t, err, "%s from protobuf", r.Metadata())

			_, err = yaml.Marshal(r.Spec())
			require.NoError(t, err, "%s to YAML", r.Metadata())

			total++
		}
	}

	t.Logf("%d resources encode both ways", total)
}
