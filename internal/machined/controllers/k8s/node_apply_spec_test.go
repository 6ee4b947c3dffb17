package k8s_test

import (
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	k8sctrl "github.com/talos-go/talos/internal/machined/controllers/k8s"
)

// TestApplyNodeSpecOwnership: config keys are set and listed as owned; a key dropped from the
// config goes, a key someone else set (or set to another value) is never touched; taints the
// same way by key.
func TestApplyNodeSpecOwnership(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Labels: map[string]string{"by/kubectl": "x", "clash": "theirs", "same": "v"},
	}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "their-taint", Effect: corev1.TaintEffectNoSchedule}}}}

	spec := k8sctrl.NodeSpec{
		Labels:      map[string]string{"a": "1", "b": "2", "clash": "ours", "same": "v"},
		Annotations: map[string]string{"note": "n1"},
		Taints:      []k8s.NodeTaintSpecSpec{{Key: "t1", Value: "v", Effect: "NoSchedule"}, {Key: "their-taint", Effect: "NoExecute"}},
	}

	changed, err := k8sctrl.ApplyNodeSpec(node, spec, true)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, map[string]string{"by/kubectl": "x", "clash": "theirs", "same": "v", "a": "1", "b": "2"}, node.Labels)
	assert.JSONEq(t, `["a","b","same"]`, node.Annotations[constants.AnnotationOwnedLabels])
	assert.Equal(t, "n1", node.Annotations["note"])
	assert.JSONEq(t, `["note"]`, node.Annotations[constants.AnnotationOwnedAnnotations])
	assert.Equal(t, []corev1.Taint{{Key: "their-taint", Effect: corev1.TaintEffectNoSchedule}, {Key: "t1", Value: "v", Effect: corev1.TaintEffectNoSchedule}}, node.Spec.Taints)
	assert.JSONEq(t, `["t1"]`, node.Annotations[constants.AnnotationOwnedTaints])

	changed, err = k8sctrl.ApplyNodeSpec(node, spec, true)
	require.NoError(t, err)
	assert.False(t, changed, "a second apply changes nothing")

	// Change a, drop b and same, the annotation and the taint.
	spec = k8sctrl.NodeSpec{Labels: map[string]string{"a": "3", "clash": "ours"}}
	_, err = k8sctrl.ApplyNodeSpec(node, spec, true)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"by/kubectl": "x", "clash": "theirs", "a": "3"}, node.Labels)
	assert.JSONEq(t, `["a"]`, node.Annotations[constants.AnnotationOwnedLabels])
	assert.NotContains(t, node.Annotations, "note")
	assert.NotContains(t, node.Annotations, constants.AnnotationOwnedAnnotations)
	assert.NotContains(t, node.Annotations, constants.AnnotationOwnedTaints)
	assert.Equal(t, []corev1.Taint{{Key: "their-taint", Effect: corev1.TaintEffectNoSchedule}}, node.Spec.Taints)

	// Without taints (a worker's credentials), the taints stay as they are.
	_, err = k8sctrl.ApplyNodeSpec(node, k8sctrl.NodeSpec{Taints: []k8s.NodeTaintSpecSpec{{Key: "t2", Effect: "NoSchedule"}}}, false)
	require.NoError(t, err)
	assert.Len(t, node.Spec.Taints, 1)

	node.Annotations[constants.AnnotationOwnedLabels] = "not json"
	_, err = k8sctrl.ApplyNodeSpec(node, spec, true)
	assert.ErrorContains(t, err, constants.AnnotationOwnedLabels)
}

// TestApplyNodeSpecCordon: Talos's cordon carries the marker and only that one is ended, and
// only once the node may be uncordoned; an admin's cordon stays.
func TestApplyNodeSpecCordon(t *testing.T) {
	node := &corev1.Node{}

	_, err := k8sctrl.ApplyNodeSpec(node, k8sctrl.NodeSpec{Cordon: true}, true)
	require.NoError(t, err)
	assert.True(t, node.Spec.Unschedulable)
	assert.Equal(t, constants.AnnotationCordonedValue, node.Annotations[constants.AnnotationCordonedKey])
	assert.True(t, k8sctrl.CordonPending(node))

	changed, err := k8sctrl.ApplyNodeSpec(node, k8sctrl.NodeSpec{}, true) // booted, kubelet not Ready yet
	require.NoError(t, err)
	assert.False(t, changed)
	assert.True(t, node.Spec.Unschedulable)

	_, err = k8sctrl.ApplyNodeSpec(node, k8sctrl.NodeSpec{Uncordon: true}, true)
	require.NoError(t, err)
	assert.False(t, node.Spec.Unschedulable)
	assert.NotContains(t, node.Annotations, constants.AnnotationCordonedKey)

	admin := &corev1.Node{Spec: corev1.NodeSpec{Unschedulable: true}}

	_, err = k8sctrl.ApplyNodeSpec(admin, k8sctrl.NodeSpec{Cordon: true}, true)
	require.NoError(t, err)
	assert.NotContains(t, admin.Annotations, constants.AnnotationCordonedKey, "an admin's cordon is not Talos's")

	_, err = k8sctrl.ApplyNodeSpec(admin, k8sctrl.NodeSpec{Uncordon: true}, true)
	require.NoError(t, err)
	assert.True(t, admin.Spec.Unschedulable, "an admin's cordon stays")
}

// TestReadySince: a Ready status from before machined started is the previous kubelet's.
func TestReadySince(t *testing.T) {
	start := time.Now()
	node := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(start.Add(-time.Minute)),
	}}}}

	assert.False(t, k8sctrl.ReadySince(node, start))

	node.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(start.Truncate(time.Second))
	assert.True(t, k8sctrl.ReadySince(node, start))

	node.Status.Conditions[0].Status = corev1.ConditionFalse
	assert.False(t, k8sctrl.ReadySince(node, start))
}
