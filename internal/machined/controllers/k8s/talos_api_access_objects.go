package k8s

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	discoveryv1client "k8s.io/client-go/kubernetes/typed/discovery/v1"
)

// The cluster objects Talos API access needs besides the Secrets: the CRD and the Service.

// controlPlaneAddresses are where the talos Service sends pods: this node's Kubernetes
// address and the control planes discovery knows.
func controlPlaneAddresses(ctx context.Context, r controller.Runtime) ([]netip.Addr, error) {
	var out []netip.Addr

	ip, err := safe.ReaderGetByID[*k8s.NodeIP](ctx, r, k8s.KubeletID)
	if err != nil && !state.IsNotFoundError(err) {
		return nil, err
	} else if err == nil {
		out = append(out, ip.TypedSpec().Addresses...)
	}

	members, err := safe.ReaderListAll[*cluster.Member](ctx, r)
	if err != nil {
		return nil, err
	}

	for m := range members.All() {
		if m.TypedSpec().MachineType.IsControlPlane() && len(m.TypedSpec().Addresses) > 0 {
			out = append(out, m.TypedSpec().Addresses[0])
		}
	}

	slices.SortFunc(out, netip.Addr.Compare)

	return slices.Compact(out), nil
}

// ensureTalosService keeps the Service talos in default (port 50000, no selector) and its
// endpoints on the control planes' (IPv4) addresses.
func ensureTalosService(ctx context.Context, core corev1client.CoreV1Interface, disc discoveryv1client.DiscoveryV1Interface, addrs []netip.Addr) error {
	name, ns := constants.KubernetesTalosAPIServiceName, constants.KubernetesTalosAPIServiceNamespace
	port := corev1.ServicePort{Name: "apid", Protocol: corev1.ProtocolTCP, Port: constants.ApidPort, TargetPort: intstr.FromInt32(constants.ApidPort)}

	if _, err := core.Services(ns).Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if _, err = core.Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"provider": constants.KubernetesTalosProvider}},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{port}},
		}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	} else if err != nil {
		return err
	}

	if len(addrs) == 0 {
		return nil
	}

	// An EndpointSlice where upstream writes core/v1 Endpoints, deprecated since Kubernetes
	// 1.33 (kube-proxy reads slices either way).
	client := disc.EndpointSlices(ns)
	want := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "talos.dev",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &port.Name, Port: &port.Port, Protocol: &port.Protocol}},
	}

	for _, a := range addrs {
		if a.Is4() {
			want.Endpoints = append(want.Endpoints, discoveryv1.Endpoint{Addresses: []string{a.String()}})
		}
	}

	have, err := client.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = client.Create(ctx, want, metav1.CreateOptions{})

		return err
	} else if err != nil {
		return err
	}

	if sliceAddresses(have) == sliceAddresses(want) {
		return nil
	}

	have.Endpoints, have.Ports, have.Labels = want.Endpoints, want.Ports, want.Labels
	_, err = client.Update(ctx, have, metav1.UpdateOptions{})

	return err
}

// ensureServiceAccountCRD creates serviceaccounts.talos.dev if missing: spec.roles and
// status.failureReason, as upstream's.
func ensureServiceAccountCRD(ctx context.Context, dyn dynamic.Interface) error {
	name := constants.ServiceAccountResourcePlural + "." + constants.ServiceAccountResourceGroup

	if _, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{}); err == nil || !apierrors.IsNotFound(err) {
		return err
	}

	str := map[string]any{"type": "string"}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"group": constants.ServiceAccountResourceGroup,
			"scope": "Namespaced",
			"names": map[string]any{
				"kind":       constants.ServiceAccountResourceKind,
				"plural":     constants.ServiceAccountResourcePlural,
				"singular":   constants.ServiceAccountResourceSingular,
				"shortNames": []any{constants.ServiceAccountResourceShortName},
			},
			"versions": []any{map[string]any{
				"name": constants.ServiceAccountResourceVersion, "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object",
					"properties": map[string]any{
						"spec": map[string]any{"type": "object", "properties": map[string]any{
							"roles": map[string]any{"type": "array", "items": str},
						}},
						"status": map[string]any{"type": "object", "properties": map[string]any{
							"failureReason": str,
						}},
					},
				}},
			}},
		},
	}}

	_, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}

	return err
}

// sliceAddresses sums up what an EndpointSlice routes to, for comparing ours with the API's.
func sliceAddresses(s *discoveryv1.EndpointSlice) string {
	var out []string

	for _, e := range s.Endpoints {
		out = append(out, e.Addresses...)
	}

	for _, p := range s.Ports {
		if p.Port != nil {
			out = append(out, fmt.Sprint(*p.Port))
		}
	}

	return fmt.Sprint(out)
}
