package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	clientset "k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/talos-go/talos/internal/machined/kubeclient"
)

// KubernetesPullRawPrefix starts the IDs of the raw affiliates the Kubernetes registry
// publishes: k8s/<node id>, as upstream.
const KubernetesPullRawPrefix = "k8s/"

// KubernetesPullController publishes the affiliates the other nodes wrote onto their
// Kubernetes Nodes (NodeAffiliate) as raw affiliates (namespace cluster-raw, ID
// k8s/<node id>), as upstream: it watches the Nodes while cluster.Config has the Kubernetes
// registry enabled, drops an affiliate whose Node goes, and all of them when the registry is
// disabled. It reads with the node's own credentials (kubeclient.ForNode): a control plane's
// admin, a worker's kubelet; since Kubernetes 1.32 the API server lets a kubelet read its own
// Node only (AuthorizeNodeWithSelectors), so on a worker the list is refused, as upstream's,
// unless RBAC grants group system:nodes list and watch on nodes, and the warning says so.
type KubernetesPullController struct {
	// KubeletCert is kubelet's client certificate and key file, a worker's credentials.
	KubeletCert string
	// RetryInterval is the wait between attempts (default DefaultKubernetesRetry).
	RetryInterval time.Duration
}

// Name implements controller.Controller.
func (ctrl *KubernetesPullController) Name() string { return "cluster.KubernetesPullController" }

// Inputs implements controller.Controller.
func (ctrl *KubernetesPullController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: config.NamespaceName, Type: cluster.ConfigType, ID: optional.Some(cluster.ConfigID), Kind: controller.InputWeak},
		{Namespace: k8s.NamespaceName, Type: k8s.NodenameType, ID: optional.Some(k8s.NodenameID), Kind: controller.InputWeak},
		{Namespace: secrets.NamespaceName, Type: secrets.KubernetesType, ID: optional.Some(secrets.KubernetesID), Kind: controller.InputWeak},
		{Namespace: secrets.NamespaceName, Type: secrets.KubeletType, ID: optional.Some(secrets.KubeletID), Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller: shared with the other registries writing raw
// affiliates.
func (ctrl *KubernetesPullController) Outputs() []controller.Output {
	return []controller.Output{{Type: cluster.AffiliateType, Kind: controller.OutputShared}}
}

// nodeWatch is a running informer on the Nodes, with the credentials it was started with.
type nodeWatch struct {
	creds  string
	stop   context.CancelFunc
	done   func()
	nodes  listersv1.NodeLister
	synced cache.InformerSynced
}

func (w *nodeWatch) close() {
	w.stop()
	w.done()
}

// Run implements controller.Controller.
func (ctrl *KubernetesPullController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	interval := ctrl.RetryInterval
	if interval == 0 {
		interval = DefaultKubernetesRetry
	}

	var (
		watch *nodeWatch
		retry <-chan time.Time
	)

	notify := make(chan struct{}, 1)

	defer func() {
		if watch != nil {
			watch.close()
		}
	}()

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-notify:
		case <-retry:
		}

		retry = nil

		var err error
		if watch, err = ctrl.pull(ctx, r, log, watch, notify); err != nil {
			if !errors.Is(err, errKubernetesNotYet) {
				log.Debug("reading the affiliates from the Kubernetes Nodes, will retry", zap.Error(err))
			}

			retry = time.After(interval)
		}
	}
}

// pull brings the raw affiliates in line with the Nodes, starting, restarting or stopping the
// watch as the config and the credentials say; it returns the watch now running.
func (ctrl *KubernetesPullController) pull(ctx context.Context, r controller.Runtime, log *zap.Logger, watch *nodeWatch, notify chan struct{}) (*nodeWatch, error) {
	stop := func() {
		if watch != nil {
			watch.close()
			watch = nil
		}
	}

	enabled, err := kubernetesRegistryEnabled(ctx, r)
	if err != nil {
		return watch, err
	}

	if !enabled {
		stop()

		return nil, ctrl.keepOnly(ctx, r, nil)
	}

	nodename, err := safe.ReaderGetByID[*k8s.Nodename](ctx, r, k8s.NodenameID)
	if state.IsNotFoundError(err) {
		return watch, nil
	} else if err != nil {
		return watch, err
	}

	creds, _, err := kubeclient.ForNode(ctx, r, ctrl.KubeletCert, 10*time.Second)
	if err != nil || creds == nil {
		stop()

		return nil, errors.Join(errKubernetesNotYet, err)
	}

	if key := credsKey(creds); watch == nil || watch.creds != key {
		stop()

		if watch, err = startNodeWatch(creds, key, log, notify); err != nil {
			return nil, err
		}
	}

	if !watch.synced() {
		return watch, nil // the first list is not in yet: its sync signals
	}

	nodes, err := watch.nodes.List(labels.Everything())
	if err != nil {
		return watch, err
	}

	keep := map[resource.ID]bool{}

	for _, node := range nodes {
		if node.Name == nodename.TypedSpec().Nodename {
			continue // this node is the local affiliate already
		}

		spec := NodeAffiliate(node)
		if spec == nil {
			continue
		}

		id := KubernetesPullRawPrefix + spec.NodeID
		keep[id] = true

		if err = safe.WriterModify(ctx, r, cluster.NewAffiliate(cluster.RawNamespaceName, id), func(a *cluster.Affiliate) error {
			*a.TypedSpec() = *spec

			return nil
		}); err != nil {
			return watch, err
		}
	}

	return watch, ctrl.keepOnly(ctx, r, keep)
}

// keepOnly destroys the raw affiliates this controller published that are not in keep.
func (ctrl *KubernetesPullController) keepOnly(ctx context.Context, r controller.Runtime, keep map[resource.ID]bool) error {
	list, err := safe.ReaderList[*cluster.Affiliate](ctx, r, cluster.NewAffiliate(cluster.RawNamespaceName, "").Metadata())
	if err != nil {
		return err
	}

	for a := range list.All() {
		if a.Metadata().Owner() == ctrl.Name() && !keep[a.Metadata().ID()] {
			if err = r.Destroy(ctx, a.Metadata()); err != nil {
				return err
			}
		}
	}

	return nil
}

// credsKey tells one set of credentials from another: a renewed admin kubeconfig or a node
// turning from kubelet's to the admin's restarts the watch.
func credsKey(c *rest.Config) string {
	return fmt.Sprintf("%s|%s|%x|%s", c.Host, c.CertFile, c.CertData, c.BearerToken)
}

// startNodeWatch starts an informer on the Nodes that signals notify on every change.
func startNodeWatch(creds *rest.Config, key string, log *zap.Logger, notify chan struct{}) (*nodeWatch, error) {
	client, err := clientset.NewForConfig(creds)
	if err != nil {
		return nil, err
	}

	factory := informers.NewSharedInformerFactory(client, 0)
	informer := factory.Core().V1().Nodes()

	signal := func() {
		select {
		case notify <- struct{}{}:
		default:
		}
	}

	var warned atomic.Bool

	if err = informer.Informer().SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		if apierrors.IsForbidden(err) && !warned.Swap(true) {
			log.Warn("cluster.discovery.registries.kubernetes: the API server refuses this node a list of the Nodes "+
				"(since Kubernetes 1.32 a kubelet may read its own Node only, AuthorizeNodeWithSelectors): "+
				"grant group system:nodes list and watch on nodes with RBAC, or use the discovery service registry", zap.Error(err))

			return
		}

		log.Debug("watching the Kubernetes Nodes", zap.Error(err))
	}); err != nil {
		return nil, err
	}

	if _, err = informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { signal() },
		UpdateFunc: func(any, any) { signal() },
		DeleteFunc: func(any) { signal() },
	}); err != nil {
		return nil, err
	}

	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())

	// The informer's sync is its own event: an empty list adds nothing to signal.
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), informer.Informer().HasSynced) {
			signal()
		}
	}()

	return &nodeWatch{creds: key, stop: cancel, done: factory.Shutdown, nodes: informer.Lister(), synced: informer.Informer().HasSynced}, nil
}
