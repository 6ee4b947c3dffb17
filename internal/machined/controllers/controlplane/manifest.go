package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
	"gopkg.in/yaml.v3"
)

// obj is one Kubernetes object, or a part of one, as an unstructured map.
type obj = map[string]any

// ManifestController renders the bootstrap manifests (k8s.Manifest, controlplane namespace)
// on control planes, each a list of unstructured objects the apply controller server-side
// applies: the bootstrap token and the RBAC of node bootstrap and CSR approval, the API
// server's access to kubelets, kube-proxy, CoreDNS and flannel as BootstrapManifestsConfig
// enables them, then cluster.inlineManifests.
type ManifestController struct{}

// Name implements controller.Controller.
func (ctrl *ManifestController) Name() string { return "controlplane.ManifestController" }

// Inputs implements controller.Controller.
func (ctrl *ManifestController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: k8s.ControlPlaneNamespaceName, Type: k8s.BootstrapManifestsConfigType, ID: optional.Some(k8s.BootstrapManifestsConfigID), Kind: controller.InputWeak},
		{Namespace: secrets.NamespaceName, Type: secrets.KubernetesRootType, ID: optional.Some(secrets.KubernetesRootID), Kind: controller.InputWeak},
		{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *ManifestController) Outputs() []controller.Output {
	return []controller.Output{{Type: k8s.ManifestType, Kind: controller.OutputShared}}
}

// Run implements controller.Controller.
func (ctrl *ManifestController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		if err := ctrl.reconcile(ctx, r); err != nil {
			log.Error("rendering the bootstrap manifests", zap.Error(err))
		}
	}
}

func (ctrl *ManifestController) reconcile(ctx context.Context, r controller.Runtime) error {
	r.StartTrackingOutputs()

	manifests, err := ctrl.render(ctx, r)
	if err != nil {
		return err
	}

	for _, m := range manifests {
		if err = writeManifest(ctx, r, m.id, m.objects); err != nil {
			return err
		}
	}

	return safe.CleanupOutputs[*k8s.Manifest](ctx, r)
}

// writeManifest writes the objects as the manifest id, each as plain JSON values.
func writeManifest(ctx context.Context, r controller.Runtime, id string, objects []obj) error {
	items := make([]k8s.SingleManifest, 0, len(objects))

	for _, o := range objects {
		u, err := unstructured(o)
		if err != nil {
			return fmt.Errorf("manifest %s: %w", id, err)
		}

		items = append(items, k8s.SingleManifest{Object: u})
	}

	if err := safe.WriterModify(ctx, r, k8s.NewManifest(k8s.ControlPlaneNamespaceName, id), func(res *k8s.Manifest) error {
		res.TypedSpec().Items = items

		return nil
	}); err != nil {
		return fmt.Errorf("writing manifest %s: %w", id, err)
	}

	return nil
}

type manifest struct {
	id      string
	objects []obj
}

// render is every manifest for the current inputs; none while any input is missing.
func (ctrl *ManifestController) render(ctx context.Context, r controller.Reader) ([]manifest, error) {
	cfgRes, err := safe.ReaderGetByID[*k8s.BootstrapManifestsConfig](ctx, r, k8s.BootstrapManifestsConfigID)
	if err != nil {
		return nil, ignoreNotFound(err)
	}

	root, err := safe.ReaderGetByID[*secrets.KubernetesRoot](ctx, r, secrets.KubernetesRootID)
	if err != nil {
		return nil, ignoreNotFound(err)
	}

	machineCfg, err := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID)
	if err != nil {
		return nil, ignoreNotFound(err)
	}

	spec := cfgRes.TypedSpec()
	rs := root.TypedSpec()

	out := []manifest{
		{"00-kubelet-bootstrapping-token", []obj{bootstrapToken(rs.BootstrapTokenID, rs.BootstrapTokenSecret)}},
		{"01-csr-node-bootstrap", []obj{groupBinding("system-bootstrap-node-bootstrapper", "system:node-bootstrapper", "system:bootstrappers")}},
		{"01-csr-approver-role-binding", []obj{groupBinding("system-bootstrap-approve-node-client-csr", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", "system:bootstrappers")}},
		{"01-csr-renewal-role-binding", []obj{groupBinding("system-bootstrap-node-renewal", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes")}},
		{"11-kubelet-api-access", []obj{kubeletAPIAccess()}},
	}

	if spec.FlannelEnabled {
		out = append(out, manifest{"05-flannel", flannel(spec)})
	}

	if spec.ProxyEnabled {
		proxy, err := kubeProxy(spec)
		if err != nil {
			return nil, err
		}

		out = append(out, manifest{"10-kube-proxy", proxy})
	}

	if spec.CoreDNSEnabled {
		out = append(out, manifest{"11-core-dns", coreDNS(spec)}, manifest{"11-core-dns-svc", []obj{coreDNSService(spec)}})
	}

	if cluster := machineCfg.Config().Cluster(); cluster != nil {
		for _, im := range cluster.InlineManifests() {
			objects, err := decodeYAML(im.Contents())
			if err != nil {
				return nil, fmt.Errorf("cluster.inlineManifests %q: %w", im.Name(), err)
			}

			out = append(out, manifest{"99-" + im.Name(), objects})
		}
	}

	return out, nil
}

// decodeYAML reads the objects of a multi-document YAML manifest, skipping empty documents.
func decodeYAML(contents string) ([]obj, error) {
	dec := yaml.NewDecoder(bytes.NewReader([]byte(contents)))

	var out []obj

	for {
		var o obj

		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return out, nil
		}

		if err != nil {
			return nil, err
		}

		if len(o) == 0 {
			continue
		}

		if o["apiVersion"] == nil || o["kind"] == nil {
			return nil, fmt.Errorf("an object without apiVersion or kind")
		}

		out = append(out, o)
	}
}

// unstructured turns o into plain JSON values (maps, []any, strings, int64, float64, bools),
// the form Kubernetes' unstructured objects hold.
func unstructured(o obj) (obj, error) {
	data, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}

	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()

	var out any
	if err = dec.Decode(&out); err != nil {
		return nil, err
	}

	return numbers(out).(obj), nil //nolint:forcetypeassert // an object encodes to an object
}

func numbers(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = numbers(x)
		}
	case []any:
		for i, x := range v {
			v[i] = numbers(x)
		}
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}

		f, _ := v.Float64()

		return f
	}

	return v
}

func ignoreNotFound(err error) error {
	if state.IsNotFoundError(err) {
		return nil
	}

	return err
}
