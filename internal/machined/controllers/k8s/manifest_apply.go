package k8s

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/talos-go/talos/internal/machined/kubeclient"
)

// ManifestFieldManager owns the fields the node applies, as upstream's.
const ManifestFieldManager = "talos"

// ManifestApplyController applies every k8s.Manifest's objects to the cluster with server-side
// apply, through the localhost admin kubeconfig of secrets.Kubernetes, once the API server
// answers; it retries until every object is applied and then records the applied manifests in
// ManifestStatus. Namespaces and CRDs go first, so the objects that live in them find them.
type ManifestApplyController struct {
	// RetryInterval is the wait between attempts while the API server is not up (default 5s).
	RetryInterval time.Duration
}

// Name implements controller.Controller.
func (ctrl *ManifestApplyController) Name() string { return "k8s.ManifestApplyController" }

// Inputs implements controller.Controller.
func (ctrl *ManifestApplyController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: k8s.ControlPlaneNamespaceName, Type: k8s.ManifestType, Kind: controller.InputWeak},
		{Namespace: secrets.NamespaceName, Type: secrets.KubernetesType, ID: optional.Some(secrets.KubernetesID), Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *ManifestApplyController) Outputs() []controller.Output {
	return []controller.Output{{Type: k8s.ManifestStatusType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *ManifestApplyController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	interval := ctrl.RetryInterval
	if interval == 0 {
		interval = 5 * time.Second
	}

	var (
		retry   <-chan time.Time
		wait    = interval
		waiting bool // for the API server to be ready
	)

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-retry:
		}

		retry = nil

		err := ctrl.reconcile(ctx, r)

		switch {
		case errors.Is(err, errAPINotReady):
			// Asking a local API server whether it is ready costs nothing: ask every second, so
			// the manifests (the bootstrap token the workers join with among them) are applied
			// as soon as it is, and say so once.
			if !waiting {
				log.Info("waiting for the API server to be ready to apply the manifests", zap.Error(err))
			}

			waiting = true
			retry = time.After(apiReadyPoll)
		case err != nil:
			waiting = false

			log.Warn("applying the manifests, will retry", zap.Error(err), zap.Duration("in", wait))

			// Backing off to a minute: a failing apply is not repeated every 5s.
			retry = time.After(wait)
			wait = min(2*wait, max(interval, time.Minute))
		default:
			waiting = false
			wait = interval
		}
	}
}

// errAPINotReady: the API server does not answer /readyz yet (still starting, or down).
var errAPINotReady = errors.New("the API server is not ready")

// apiReadyPoll is how often a control plane asks its API server whether it is ready.
const apiReadyPoll = time.Second

func (ctrl *ManifestApplyController) reconcile(ctx context.Context, r controller.Runtime) error {
	kube, err := kubeclient.Get(ctx, r)
	if err != nil {
		if state.IsNotFoundError(err) {
			return nil // not a control plane, or its secrets are not there yet
		}

		return err
	}

	manifests, err := safe.ReaderListAll[*k8s.Manifest](ctx, r)
	if err != nil {
		return err
	}

	// Manifests are applied in the order of their IDs (upstream's 00-, 05-, 10- prefixes).
	var ids []string

	for m := range manifests.All() {
		ids = append(ids, m.Metadata().ID())
	}

	slices.Sort(ids)

	if len(ids) == 0 {
		return nil
	}

	var objects []namedObject

	for _, id := range ids {
		m, _ := manifests.Find(func(m *k8s.Manifest) bool { return m.Metadata().ID() == id })
		objects = append(objects, manifestObjects(m)...)
	}

	failed, applyErr := applyObjects(ctx, kube.TypedSpec().LocalhostAdminKubeconfig, objects, func() error {
		// The API server is ready: the status exists from now on (the controller manager's and
		// scheduler's static pods wait for it), the applied manifests are listed after.
		_, err := safe.ReaderGetByID[*k8s.ManifestStatus](ctx, r, k8s.ManifestStatusID)
		if state.IsNotFoundError(err) {
			return safe.WriterModify(ctx, r, k8s.NewManifestStatus(k8s.ControlPlaneNamespaceName), func(*k8s.ManifestStatus) error { return nil })
		}

		return err
	})
	if errors.Is(applyErr, errAPINotReady) {
		return applyErr
	}

	// The status lists the manifests whose every object is applied; the others are retried.
	applied := slices.DeleteFunc(ids, func(id string) bool { return failed[id] })

	if err = safe.WriterModify(ctx, r, k8s.NewManifestStatus(k8s.ControlPlaneNamespaceName), func(res *k8s.ManifestStatus) error {
		res.TypedSpec().ManifestsApplied = applied

		return nil
	}); err != nil {
		return err
	}

	return applyErr
}

// ApplyManifests applies the manifests' objects once with the kubeconfig, as the controller
// does; the error names every object that failed.
func ApplyManifests(ctx context.Context, kubeconfig string, manifests ...*k8s.Manifest) error {
	var objects []namedObject

	for _, m := range manifests {
		objects = append(objects, manifestObjects(m)...)
	}

	_, err := applyObjects(ctx, kubeconfig, objects, nil)

	return err
}

func manifestObjects(m *k8s.Manifest) []namedObject {
	var out []namedObject

	for _, item := range m.TypedSpec().Items {
		// Applying only reads the object: the resource's spec is not changed.
		out = append(out, namedObject{manifest: m.Metadata().ID(), obj: &unstructured.Unstructured{Object: item.Object}})
	}

	return out
}

// namedObject is one object of a manifest, with the manifest's ID for errors.
type namedObject struct {
	manifest string
	obj      *unstructured.Unstructured
}

// applyRank puts namespaces, then CRDs, then everything else.
func applyRank(o namedObject) int {
	switch o.obj.GroupVersionKind().GroupKind().String() {
	case "Namespace":
		return 0
	case "CustomResourceDefinition.apiextensions.k8s.io":
		return 1
	default:
		return 2
	}
}

// applyObjects server-side applies the objects with the kubeconfig, namespaces and CRDs first;
// it returns the manifests with an object that failed, and errors naming manifest, kind and name.
func applyObjects(ctx context.Context, kubeconfig string, objects []namedObject, onReady func() error) (map[string]bool, error) {
	failed := map[string]bool{}
	for _, o := range objects {
		failed[o.manifest] = true
	}

	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(kubeconfig))
	if err != nil {
		return failed, fmt.Errorf("reading the admin kubeconfig: %w", err)
	}

	cfg.Timeout = 30 * time.Second

	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return failed, err
	}

	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return failed, err
	}

	// /readyz answers OK once the API server's start hooks are done (its RBAC roles and priority
	// classes exist): applying before that fails object by object.
	readyCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()

	if _, err = dc.RESTClient().Get().AbsPath("/readyz").DoRaw(readyCtx); err != nil {
		return failed, fmt.Errorf("%w: %w", errAPINotReady, err)
	}

	if onReady != nil {
		if err = onReady(); err != nil {
			return failed, err
		}
	}

	clear(failed)

	cached := memory.NewMemCacheClient(dc)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cached)

	slices.SortStableFunc(objects, func(a, b namedObject) int { return applyRank(a) - applyRank(b) })

	var errs []error

	for _, o := range objects {
		err = applyOne(ctx, dyn, mapper, o.obj)
		if err != nil && meta.IsNoMatchError(err) {
			// A CRD applied just before may be new to the discovery cache.
			mapper.Reset()
			err = applyOne(ctx, dyn, mapper, o.obj)
		}

		if err != nil {
			failed[o.manifest] = true
			errs = append(errs, fmt.Errorf("manifest %q: %s %q: %w", o.manifest, o.obj.GetKind(), o.obj.GetName(), err))
		}
	}

	return failed, errors.Join(errs...)
}

func applyOne(ctx context.Context, dyn dynamic.Interface, mapper meta.RESTMapper, obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()

	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return err
	}

	data, err := obj.MarshalJSON()
	if err != nil {
		return err
	}

	var client dynamic.ResourceInterface = dyn.Resource(mapping.Resource)

	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := obj.GetNamespace()
		if ns == "" {
			ns = metav1.NamespaceDefault
		}

		client = dyn.Resource(mapping.Resource).Namespace(ns)
	}

	force := true

	_, err = client.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: ManifestFieldManager, Force: &force})

	return err
}
