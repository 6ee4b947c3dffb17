// Package kubernetes is the Kubernetes discovery registry (cluster.discovery.registries.
// kubernetes), whose store is the Node objects themselves: each node writes its affiliate onto
// its own Node as annotations (upstream's names and formats, lists joined by commas,
// KubernetesPushController) and reads the others' from theirs, with what the Node already says
// (name, hostname, OS image, control plane role) filling the rest (KubernetesPullController).
package kubernetes

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	corev1 "k8s.io/api/core/v1"
)

// NodeAnnotations are the annotations that carry id's affiliate spec; an empty value means the
// annotation is removed (the affiliate has no such field).
func NodeAnnotations(id string, spec *cluster.AffiliateSpec) map[string]string {
	var ksAddress, apiPort string

	if spec.KubeSpan.Address.IsValid() {
		ksAddress = spec.KubeSpan.Address.String()
	}

	if spec.ControlPlane != nil {
		apiPort = strconv.Itoa(spec.ControlPlane.APIServerPort)
	}

	return map[string]string{
		constants.ClusterNodeIDAnnotation:            id,
		constants.NetworkSelfIPsAnnotation:           join(spec.Addresses),
		constants.NetworkAPIServerPortAnnotation:     apiPort,
		constants.KubeSpanIPAnnotation:               ksAddress,
		constants.KubeSpanPublicKeyAnnotation:        spec.KubeSpan.PublicKey,
		constants.KubeSpanAssignedPrefixesAnnotation: join(spec.KubeSpan.AdditionalAddresses),
		constants.KubeSpanKnownEndpointsAnnotation:   join(spec.KubeSpan.Endpoints),
	}
}

// NodeAffiliate reads the affiliate a Node carries; nil for a Node without a node id
// annotation (not a node taking part in discovery). A value that does not parse is left out,
// as upstream does: one node's bad annotation must not hide the rest.
func NodeAffiliate(node *corev1.Node) *cluster.AffiliateSpec {
	id := node.Annotations[constants.ClusterNodeIDAnnotation]
	if id == "" {
		return nil
	}

	spec := &cluster.AffiliateSpec{
		NodeID:          id,
		Nodename:        node.Name,
		Addresses:       split(node.Annotations[constants.NetworkSelfIPsAnnotation], netip.ParseAddr),
		OperatingSystem: node.Status.NodeInfo.OSImage,
		MachineType:     machine.TypeWorker,
	}

	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeHostName {
			spec.Hostname = a.Address

			break
		}
	}

	if _, ok := node.Labels[constants.LabelNodeRoleControlPlane]; ok {
		spec.MachineType = machine.TypeControlPlane
	}

	spec.KubeSpan.PublicKey = node.Annotations[constants.KubeSpanPublicKeyAnnotation]
	spec.KubeSpan.Address, _ = netip.ParseAddr(node.Annotations[constants.KubeSpanIPAnnotation]) // none, or one that does not parse: the zero address
	spec.KubeSpan.AdditionalAddresses = split(node.Annotations[constants.KubeSpanAssignedPrefixesAnnotation], netip.ParsePrefix)
	spec.KubeSpan.Endpoints = split(node.Annotations[constants.KubeSpanKnownEndpointsAnnotation], netip.ParseAddrPort)

	if port, err := strconv.Atoi(node.Annotations[constants.NetworkAPIServerPortAnnotation]); err == nil {
		spec.ControlPlane = &cluster.ControlPlane{APIServerPort: port}
	}

	return spec
}

func join[T interface{ String() string }](items []T) string {
	s := make([]string, 0, len(items))
	for _, item := range items {
		s = append(s, item.String())
	}

	return strings.Join(s, ",")
}

func split[T any](s string, parse func(string) (T, error)) []T {
	var out []T

	for item := range strings.SplitSeq(s, ",") {
		if v, err := parse(item); err == nil {
			out = append(out, v)
		}
	}

	return out
}
