package k8s

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// NodeSpec is what Talos wants on its Node.
type NodeSpec struct {
	Labels      map[string]string
	Annotations map[string]string
	Taints      []k8s.NodeTaintSpecSpec
	// Cordon: a drain is under way (NodeCordonedSpec).
	Cordon bool
	// Uncordon: the node runs again and its kubelet reported Ready since it started, so a
	// cordon Talos made (its marker annotation) may end.
	Uncordon bool
}

// ApplyNodeSpec changes node to carry spec, as upstream's node-apply controller: the keys Talos
// set are listed in the talos.dev/owned-{labels,annotations,taints} annotations, so a key
// dropped from the config is removed from the Node, while a key someone else set (not listed)
// is never changed or removed; a key the config names that already has the same value is
// taken over. A cordon Talos makes carries talos.dev/cordoned, and only such a cordon is
// ended. With taints false the Node's taints are left alone (a worker's own credentials may
// not change them). It reports whether node changed.
func ApplyNodeSpec(node *corev1.Node, spec NodeSpec, taints bool) (bool, error) {
	before := node.DeepCopy()

	if node.Labels == nil {
		node.Labels = map[string]string{}
	}

	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}

	if err := applyOwned(node.Labels, node.Annotations, constants.AnnotationOwnedLabels, spec.Labels); err != nil {
		return false, err
	}

	if err := applyOwned(node.Annotations, node.Annotations, constants.AnnotationOwnedAnnotations, spec.Annotations); err != nil {
		return false, err
	}

	if taints {
		if err := applyTaints(node, spec.Taints); err != nil {
			return false, err
		}
	}

	_, marked := node.Annotations[constants.AnnotationCordonedKey]

	switch {
	case spec.Cordon && !node.Spec.Unschedulable:
		node.Spec.Unschedulable = true
		node.Annotations[constants.AnnotationCordonedKey] = constants.AnnotationCordonedValue
	case !spec.Cordon && spec.Uncordon && node.Spec.Unschedulable && marked:
		node.Spec.Unschedulable = false

		delete(node.Annotations, constants.AnnotationCordonedKey)
	case !spec.Cordon && !node.Spec.Unschedulable && marked: // uncordoned by someone: the marker is stale
		delete(node.Annotations, constants.AnnotationCordonedKey)
	}

	return !equality.Semantic.DeepEqual(before, node), nil
}

// CordonPending reports a Node that Talos cordoned and has not uncordoned yet.
func CordonPending(node *corev1.Node) bool {
	_, marked := node.Annotations[constants.AnnotationCordonedKey]

	return marked && node.Spec.Unschedulable
}

// applyOwned sets want in current (labels or annotations), tracking the keys it owns in the
// annotation key of annotations.
func applyOwned(current, annotations map[string]string, key string, want map[string]string) error {
	owned, err := ownedKeys(annotations, key)
	if err != nil {
		return err
	}

	for k, v := range want {
		cur, exists := current[k]

		switch {
		case !exists || cur == v:
			owned[k] = struct{}{}
		case !isOwned(owned, k): // someone else's value: theirs to keep
			continue
		}

		current[k] = v
	}

	for k := range owned {
		if _, wanted := want[k]; !wanted {
			delete(current, k)
			delete(owned, k)
		}
	}

	return setOwned(annotations, key, owned)
}

func applyTaints(node *corev1.Node, want []k8s.NodeTaintSpecSpec) error {
	owned, err := ownedKeys(node.Annotations, constants.AnnotationOwnedTaints)
	if err != nil {
		return err
	}

	wanted := map[string]struct{}{}

	for _, t := range want {
		wanted[t.Key] = struct{}{}
		effect := corev1.TaintEffect(t.Effect)

		i := slices.IndexFunc(node.Spec.Taints, func(n corev1.Taint) bool { return n.Key == t.Key })

		switch {
		case i < 0:
			node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: effect})
			owned[t.Key] = struct{}{}
		case isOwned(owned, t.Key):
			node.Spec.Taints[i].Value, node.Spec.Taints[i].Effect = t.Value, effect
		case node.Spec.Taints[i].Value == t.Value && node.Spec.Taints[i].Effect == effect:
			owned[t.Key] = struct{}{}
		}
	}

	node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(n corev1.Taint) bool {
		_, keep := wanted[n.Key]

		return isOwned(owned, n.Key) && !keep
	})

	for k := range owned {
		if _, keep := wanted[k]; !keep {
			delete(owned, k)
		}
	}

	return setOwned(node.Annotations, constants.AnnotationOwnedTaints, owned)
}

func isOwned(owned map[string]struct{}, k string) bool {
	_, ok := owned[k]

	return ok
}

// ownedKeys reads an owned-keys annotation: a JSON list of keys.
func ownedKeys(annotations map[string]string, key string) (map[string]struct{}, error) {
	owned := map[string]struct{}{}

	raw, ok := annotations[key]
	if !ok || raw == "" {
		return owned, nil
	}

	var keys []string
	if err := json.Unmarshal([]byte(raw), &keys); err != nil {
		return nil, fmt.Errorf("the Node's annotation %s is not a JSON list of keys (fix or remove it): %w", key, err)
	}

	for _, k := range keys {
		owned[k] = struct{}{}
	}

	return owned, nil
}

func setOwned(annotations map[string]string, key string, owned map[string]struct{}) error {
	if len(owned) == 0 {
		delete(annotations, key)

		return nil
	}

	data, err := json.Marshal(slices.Sorted(maps.Keys(owned)))
	if err != nil {
		return err
	}

	annotations[key] = string(data)

	return nil
}
