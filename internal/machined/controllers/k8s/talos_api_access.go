package k8s

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	discoveryv1client "k8s.io/client-go/kubernetes/typed/discovery/v1"

	"github.com/talos-go/talos/internal/machined/kubeclient"
)

// TalosAPIAccessController serves machine.features.kubernetesTalosAPIAccess on a control
// plane, as upstream: it installs the CRD serviceaccounts.talos.dev and the Service talos in
// default (port 50000, the control planes' addresses as its endpoints), and for each talos.dev
// ServiceAccount whose namespace and roles are allowed keeps a Secret of the same name, owned
// by it (Kubernetes' garbage collector deletes it with the account), whose key "config" is a
// talosconfig with a client certificate of the OS CA carrying the roles. An account refused
// gets status.failureReason and a Warning event, and no Secret. It looks every few seconds
// (upstream watches; a look is one list).
type TalosAPIAccessController struct {
	// Interval is the wait between looks while the feature is on (default 3s).
	Interval time.Duration
}

var (
	talosSAGVK = schema.GroupVersionKind{Group: constants.ServiceAccountResourceGroup, Version: constants.ServiceAccountResourceVersion, Kind: constants.ServiceAccountResourceKind}
	talosSAGVR = talosSAGVK.GroupVersion().WithResource(constants.ServiceAccountResourcePlural)
	crdGVR     = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// Name implements controller.Controller.
func (ctrl *TalosAPIAccessController) Name() string { return "k8s.TalosAPIAccessController" }

// Inputs implements controller.Controller.
func (ctrl *TalosAPIAccessController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak},
		{Namespace: secrets.NamespaceName, Type: secrets.OSRootType, ID: optional.Some(secrets.OSRootID), Kind: controller.InputWeak},
		{Namespace: secrets.NamespaceName, Type: secrets.KubernetesType, ID: optional.Some(secrets.KubernetesID), Kind: controller.InputWeak},
		{Namespace: k8s.NamespaceName, Type: k8s.NodeIPType, ID: optional.Some(k8s.KubeletID), Kind: controller.InputWeak},
		{Namespace: cluster.NamespaceName, Type: cluster.MemberType, Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *TalosAPIAccessController) Outputs() []controller.Output { return nil }

// Run implements controller.Controller.
func (ctrl *TalosAPIAccessController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	interval := ctrl.Interval
	if interval == 0 {
		interval = 3 * time.Second
	}

	var again <-chan time.Time

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-again:
		}

		again = nil

		on, err := ctrl.reconcile(ctx, r, log)
		if err != nil {
			log.Debug("Talos API access from Kubernetes, will retry", zap.Error(err))
		}

		if on || err != nil {
			again = time.After(interval)
		}
	}
}

// apiAccess is one look's inputs.
type apiAccess struct {
	ca                 *secrets.OSRootSpec
	namespaces, roles  []string
	core               corev1client.CoreV1Interface
	disc               discoveryv1client.DiscoveryV1Interface
	dyn                dynamic.Interface
	endpointsAddresses []netip.Addr
}

// reconcile reports whether the feature is on here (then it looks again after the interval).
func (ctrl *TalosAPIAccessController) reconcile(ctx context.Context, r controller.Runtime, log *zap.Logger) (bool, error) {
	cfg, err := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID)
	if state.IsNotFoundError(err) {
		return false, nil
	} else if err != nil {
		return false, err
	}

	feature := cfg.Config().Machine().Features().KubernetesTalosAPIAccess()
	if !feature.Enabled() || !cfg.Config().Machine().Type().IsControlPlane() {
		return false, nil
	}

	root, err := safe.ReaderGetByID[*secrets.OSRoot](ctx, r, secrets.OSRootID)
	if err != nil {
		return true, fmt.Errorf("OS CA: %w", err)
	}

	if root.TypedSpec().IssuingCA == nil || len(root.TypedSpec().IssuingCA.Key) == 0 {
		return true, fmt.Errorf("machine.ca has no key: this control plane cannot sign Talos API certificates")
	}

	kube, err := kubeclient.Get(ctx, r)
	if err != nil {
		return true, fmt.Errorf("admin kubeconfig: %w", err)
	}

	rc, err := kubeclient.LocalAdmin(kube, 10*time.Second)
	if err != nil {
		return true, err
	}

	a := apiAccess{ca: root.TypedSpec(), namespaces: feature.AllowedKubernetesNamespaces(), roles: feature.AllowedRoles()}

	if a.core, err = corev1client.NewForConfig(rc); err != nil {
		return true, err
	}

	if a.dyn, err = dynamic.NewForConfig(rc); err != nil {
		return true, err
	}

	if a.disc, err = discoveryv1client.NewForConfig(rc); err != nil {
		return true, err
	}

	if a.endpointsAddresses, err = controlPlaneAddresses(ctx, r); err != nil {
		return true, err
	}

	if err = ensureServiceAccountCRD(ctx, a.dyn); err != nil {
		return true, fmt.Errorf("CRD %s.%s: %w", constants.ServiceAccountResourcePlural, constants.ServiceAccountResourceGroup, err)
	}

	if err = ensureTalosService(ctx, a.core, a.disc, a.endpointsAddresses); err != nil {
		return true, fmt.Errorf("service %s/%s: %w", constants.KubernetesTalosAPIServiceNamespace, constants.KubernetesTalosAPIServiceName, err)
	}

	accounts, err := a.dyn.Resource(talosSAGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return true, fmt.Errorf("listing talos.dev ServiceAccounts (the CRD may not be established yet): %w", err)
	}

	var errs []error

	for i := range accounts.Items {
		if err := a.sync(ctx, &accounts.Items[i], log); err != nil {
			errs = append(errs, fmt.Errorf("%s/%s: %w", accounts.Items[i].GetNamespace(), accounts.Items[i].GetName(), err))
		}
	}

	if len(errs) > 0 {
		return true, fmt.Errorf("%v", errs)
	}

	return true, nil
}

// sync keeps one ServiceAccount's Secret, or says on the account why it has none.
func (a *apiAccess) sync(ctx context.Context, sa *unstructured.Unstructured, log *zap.Logger) error {
	ns, name := sa.GetNamespace(), sa.GetName()
	secrets := a.core.Secrets(ns)

	secret, err := secrets.Get(ctx, name, metav1.GetOptions{})
	missing := apierrors.IsNotFound(err)

	if err != nil && !missing {
		return err
	}

	if !missing && !metav1.IsControlledBy(secret, sa) {
		return a.fail(ctx, sa, fmt.Sprintf(reasonSecretExists, ns, name), log)
	}

	requested, found, _ := unstructured.NestedStringSlice(sa.Object, "spec", "roles")

	roles, reason := GrantRoles(ns, requested, found, a.namespaces, a.roles)
	if reason != "" {
		return a.fail(ctx, sa, reason, log)
	}

	now := time.Now()

	switch {
	case missing:
		data, err := IssueAPIAccessConfig(a.ca.IssuingCA, name, roles, now)
		if err != nil {
			return err
		}

		owner := metav1.NewControllerRef(sa, talosSAGVK)

		if _, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, OwnerReferences: []metav1.OwnerReference{*owner}},
			Data:       map[string][]byte{constants.TalosconfigFilename: data},
		}, metav1.CreateOptions{}); err != nil {
			return err
		}

		log.Info("Talos API access: secret issued", zap.String("namespace", ns), zap.String("name", name), zap.Strings("roles", roles))

		if err = a.event(ctx, sa, corev1.EventTypeNormal, "Synced", "Synced successfully"); err != nil {
			return err
		}
	default:
		why := APIAccessConfigStale(secret.Data[constants.TalosconfigFilename], a.ca.IssuingCA.Crt, roles, now)
		if why == "" {
			break
		}

		data, err := IssueAPIAccessConfig(a.ca.IssuingCA, name, roles, now)
		if err != nil {
			return err
		}

		if secret.Data == nil {
			secret.Data = map[string][]byte{}
		}

		secret.Data[constants.TalosconfigFilename] = data

		if _, err = secrets.Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
			return err
		}

		log.Info("Talos API access: secret renewed", zap.String("namespace", ns), zap.String("name", name), zap.String("why", why))
	}

	if _, failed, _ := unstructured.NestedString(sa.Object, "status", "failureReason"); failed {
		return a.setReason(ctx, sa, "")
	}

	return nil
}

// fail records why an account has no Secret, once per reason: status.failureReason and a
// Warning event.
func (a *apiAccess) fail(ctx context.Context, sa *unstructured.Unstructured, reason string, log *zap.Logger) error {
	if current, _, _ := unstructured.NestedString(sa.Object, "status", "failureReason"); current == reason {
		return nil
	}

	log.Warn("Talos API access refused", zap.String("namespace", sa.GetNamespace()), zap.String("name", sa.GetName()), zap.String("reason", reason))

	if err := a.setReason(ctx, sa, reason); err != nil {
		return err
	}

	return a.event(ctx, sa, corev1.EventTypeWarning, eventReason(reason), reason)
}

// setReason writes status.failureReason ("" removes it). The CRD has no status subresource
// (as upstream's), so the status goes with a plain update.
func (a *apiAccess) setReason(ctx context.Context, sa *unstructured.Unstructured, reason string) error {
	out := sa.DeepCopy()
	if reason == "" {
		unstructured.RemoveNestedField(out.Object, "status", "failureReason")
	} else if err := unstructured.SetNestedField(out.Object, reason, "status", "failureReason"); err != nil {
		return err
	}

	_, err := a.dyn.Resource(talosSAGVR).Namespace(sa.GetNamespace()).Update(ctx, out, metav1.UpdateOptions{})

	return err
}

// event records an event on the account, for kubectl describe.
func (a *apiAccess) event(ctx context.Context, sa *unstructured.Unstructured, eventType, reason, message string) error {
	now := metav1.Now()

	_, err := a.core.Events(sa.GetNamespace()).Create(ctx, &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", sa.GetName(), now.UnixNano()), Namespace: sa.GetNamespace()},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: talosSAGVK.GroupVersion().String(), Kind: talosSAGVK.Kind,
			Namespace: sa.GetNamespace(), Name: sa.GetName(), UID: sa.GetUID(),
		},
		Reason: reason, Message: message, Type: eventType,
		Source:         corev1.EventSource{Component: "talos-sa-controller"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}, metav1.CreateOptions{})

	return err
}

// eventReason is upstream's event reason for a failure reason.
func eventReason(reason string) string {
	for _, e := range []struct{ prefix, event string }{
		{"Roles not found", "ErrRolesNotFound"},
		{"Namespace is not allowed", "ErrNamespaceNotAllowed"},
		{"Roles not allowed", "ErrRolesNotAllowed"},
		{"Secret already exists", "ErrResourceExists"},
	} {
		if strings.HasPrefix(reason, e.prefix) {
			return e.event
		}
	}

	return "Failed"
}
