package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/talos-go/talos/internal/machined/kubeclient"
)

// DefaultKubernetesRetry is the wait of the Kubernetes registry's controllers between attempts
// while the API, the credentials or this node's Node are not there yet.
const DefaultKubernetesRetry = 5 * time.Second

// errKubernetesNotYet is an attempt that has to wait (no credentials yet, no Node yet).
var errKubernetesNotYet = errors.New("not yet")

// KubernetesPushController writes this node's affiliate (namespace cluster, ID the node id)
// onto its own Kubernetes Node as annotations (NodeAnnotations), while cluster.Config has the
// Kubernetes registry enabled, as upstream. It writes with the node's own credentials
// (kubeclient.ForNode); the API server lets a kubelet change its own Node.
type KubernetesPushController struct {
	// KubeletCert is kubelet's client certificate and key file, a worker's credentials.
	KubeletCert string
	// RetryInterval is the wait between attempts (default DefaultKubernetesRetry).
	RetryInterval time.Duration

	nodeID string // the local affiliate input's ID
}

// Name implements controller.Controller.
func (ctrl *KubernetesPushController) Name() string { return "cluster.KubernetesPushController" }

// Inputs implements controller.Controller; the local affiliate's is added once the node id is
// known.
func (ctrl *KubernetesPushController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: config.NamespaceName, Type: cluster.ConfigType, ID: optional.Some(cluster.ConfigID), Kind: controller.InputWeak},
		{Namespace: cluster.NamespaceName, Type: cluster.IdentityType, ID: optional.Some(cluster.LocalIdentity), Kind: controller.InputWeak},
		{Namespace: secrets.NamespaceName, Type: secrets.KubernetesType, ID: optional.Some(secrets.KubernetesID), Kind: controller.InputWeak},
		{Namespace: secrets.NamespaceName, Type: secrets.KubeletType, ID: optional.Some(secrets.KubeletID), Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller: the output is the Node, outside the node's state.
func (ctrl *KubernetesPushController) Outputs() []controller.Output { return nil }

// Run implements controller.Controller.
func (ctrl *KubernetesPushController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	interval := ctrl.RetryInterval
	if interval == 0 {
		interval = DefaultKubernetesRetry
	}

	var retry <-chan time.Time

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-retry:
		}

		retry = nil

		if err := ctrl.push(ctx, r); err != nil {
			if !errors.Is(err, errKubernetesNotYet) {
				log.Debug("writing this node's affiliate onto its Node, will retry", zap.Error(err))
			}

			retry = time.After(interval)
		}
	}
}

func (ctrl *KubernetesPushController) push(ctx context.Context, r controller.Runtime) error {
	if enabled, err := kubernetesRegistryEnabled(ctx, r); err != nil || !enabled {
		return err
	}

	identity, err := safe.ReaderGetByID[*cluster.Identity](ctx, r, cluster.LocalIdentity)
	if state.IsNotFoundError(err) {
		return nil
	} else if err != nil {
		return err
	}

	if id := identity.TypedSpec().NodeID; id != ctrl.nodeID {
		ctrl.nodeID = id

		if err = r.UpdateInputs(append(ctrl.Inputs(), controller.Input{
			Namespace: cluster.NamespaceName, Type: cluster.AffiliateType, ID: optional.Some(id), Kind: controller.InputWeak,
		})); err != nil {
			return err
		}
	}

	affiliate, err := safe.ReaderGet[*cluster.Affiliate](ctx, r, cluster.NewAffiliate(cluster.NamespaceName, ctrl.nodeID).Metadata())
	if state.IsNotFoundError(err) {
		return nil
	} else if err != nil {
		return err
	}

	nodename := affiliate.TypedSpec().Nodename
	if nodename == "" {
		return nil // no Node of its own (no kubelet registered, or registration skipped)
	}

	creds, _, err := kubeclient.ForNode(ctx, r, ctrl.KubeletCert, 10*time.Second)
	if err != nil || creds == nil {
		return errors.Join(errKubernetesNotYet, err)
	}

	client, err := corev1client.NewForConfig(creds)
	if err != nil {
		return err
	}

	// A JSON merge patch of the annotations alone: null removes one, and nothing else of the
	// Node (the kubelet's status, the labels) is read or written.
	annotations := map[string]*string{}

	for k, v := range NodeAnnotations(ctrl.nodeID, affiliate.TypedSpec()) {
		if v != "" {
			annotations[k] = &v
		} else {
			annotations[k] = nil
		}
	}

	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}

	if _, err = client.Nodes().Patch(ctx, nodename, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("annotating node %s: %w", nodename, err)
	}

	return nil
}

// kubernetesRegistryEnabled reads cluster.Config: false while there is none.
func kubernetesRegistryEnabled(ctx context.Context, r controller.Reader) (bool, error) {
	cfg, err := safe.ReaderGetByID[*cluster.Config](ctx, r, cluster.ConfigID)
	if state.IsNotFoundError(err) {
		return false, nil
	} else if err != nil {
		return false, err
	}

	return cfg.TypedSpec().RegistryKubernetesEnabled, nil
}
