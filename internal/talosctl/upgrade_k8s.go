package talosctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"

	"github.com/talos-go/talos/internal/configpatch"
	"github.com/talos-go/talos/internal/images"
)

// upgradeK8sFlags are upstream's flags of upgrade-k8s.
type upgradeK8sFlags struct {
	from, to, endpoint                                      string
	apiServer, controllerManager, scheduler, proxy, kubelet string
	dryRun, prePull, upgradeKubelet                         bool
	withDocs, withExamples                                  bool
}

func upgradeK8sCmd(g *Global) *cobra.Command {
	var f upgradeK8sFlags

	cmd := &cobra.Command{
		Use:   "upgrade-k8s",
		Short: "Upgrade Kubernetes control plane components and kubelets in the cluster",
		Long: `Upgrades Kubernetes as upstream's upgrade-k8s does, one component at a time through the
machine config of each node (no reboot): first the images are checked (pre-pulled) on every
node, then kube-apiserver, kube-controller-manager and kube-scheduler on each control plane,
kube-proxy, and each node's kubelet, each waited for. -n names one control plane node.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.to == "" {
				return errors.New("--to is required: the Kubernetes version to upgrade to, e.g. --to " + images.KubernetesVersion)
			}

			return g.run(cmd, func(ctx context.Context, s *session) error {
				return upgradeK8s(ctx, cmd.OutOrStdout(), s, &f)
			})
		},
	}

	fl := cmd.Flags()
	fl.StringVar(&f.from, "from", "", "the Kubernetes version to upgrade from (the API server's version when empty)")
	fl.StringVar(&f.to, "to", images.KubernetesVersion, "the Kubernetes version to upgrade to")
	fl.StringVar(&f.endpoint, "endpoint", "", "the cluster control plane endpoint (host or host:port; the kubeconfig's when empty)")
	fl.StringVar(&f.apiServer, "apiserver-image", images.KubeAPIServerName, "kube-apiserver image to use")
	fl.StringVar(&f.controllerManager, "controller-manager-image", images.KubeControllerManagerName, "kube-controller-manager image to use")
	fl.StringVar(&f.scheduler, "scheduler-image", images.KubeSchedulerName, "kube-scheduler image to use")
	fl.StringVar(&f.proxy, "proxy-image", images.KubeProxyName, "kube-proxy image to use")
	fl.StringVar(&f.kubelet, "kubelet-image", images.KubeletName, "kubelet image to use")
	fl.BoolVar(&f.dryRun, "dry-run", false, "skip the actual upgrade and show the upgrade plan instead")
	fl.BoolVar(&f.prePull, "pre-pull-images", true, "pre-pull images before the upgrade")
	fl.BoolVar(&f.upgradeKubelet, "upgrade-kubelet", true, "upgrade the kubelet service")
	fl.BoolVar(&f.withDocs, "with-docs", true, "patch all machine configs adding the documentation for each field (ours keep the config as it is)")
	fl.BoolVar(&f.withExamples, "with-examples", true, "patch all machine configs with the commented examples (ours keep the config as it is)")

	return cmd
}

// k8sNode is a node of the cluster as Kubernetes knows it.
type k8sNode struct {
	name, address string
	controlPlane  bool
}

// component is one thing upgrade-k8s moves to the new version: where its image is in the
// machine config, and on which nodes it runs.
type component struct {
	name, image, configPath string
	controlPlaneOnly        bool
	namespace               common.ContainerdNamespace
}

func upgradeK8s(ctx context.Context, out io.Writer, s *session, f *upgradeK8sFlags) error {
	cfg, _, err := kubeClient(ctx, s, "upgrade-k8s")
	if err != nil {
		return err
	}

	if f.endpoint != "" {
		host := f.endpoint
		if _, _, splitErr := net.SplitHostPort(host); splitErr != nil {
			host = net.JoinHostPort(host, "6443")
		}

		cfg.Host = "https://" + strings.TrimPrefix(host, "https://")
	}

	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}

	from, to, err := upgradePath(cs, f.from, f.to)
	if err != nil {
		return err
	}

	if f.from == "" {
		fmt.Fprintf(out, "automatically detected the Kubernetes version %s\n", from)
	}

	nodes, err := clusterNodes(ctx, cs)
	if err != nil {
		return err
	}

	tag := ":v" + to.String()
	components := []component{
		{"kube-apiserver", f.apiServer + tag, "cluster.apiServer.image", true, common.ContainerdNamespace_NS_CRI},
		{"kube-controller-manager", f.controllerManager + tag, "cluster.controllerManager.image", true, common.ContainerdNamespace_NS_CRI},
		{"kube-scheduler", f.scheduler + tag, "cluster.scheduler.image", true, common.ContainerdNamespace_NS_CRI},
		{"kube-proxy", f.proxy + tag, "cluster.proxy.image", false, common.ContainerdNamespace_NS_CRI},
	}

	if f.upgradeKubelet {
		components = append(components, component{"kubelet", f.kubelet + tag, "machine.kubelet.image", false, common.ContainerdNamespace_NS_SYSTEM})
	}

	fmt.Fprintf(out, "upgrading Kubernetes from %s to %s on %d nodes\n", from, to, len(nodes))

	if f.prePull {
		if err = prePullImages(ctx, out, s, nodes, components); err != nil {
			return fmt.Errorf("%w; nothing was changed", err)
		}
	}

	for _, c := range components {
		for _, n := range nodes {
			if c.controlPlaneOnly && !n.controlPlane {
				continue
			}

			if err = upgradeComponent(ctx, out, s, cs, n, c, to.String(), f.dryRun); err != nil {
				return fmt.Errorf("%s on %s: %w", c.name, n.name, err)
			}
		}

		if c.name == "kube-proxy" && !f.dryRun {
			if err = waitDaemonSetImage(ctx, out, cs, "kube-proxy", c.image); err != nil {
				return err
			}
		}
	}

	if f.dryRun {
		fmt.Fprintln(out, "dry run: nothing was changed")
	} else {
		fmt.Fprintln(out, "upgrade done: machined applies the bootstrap manifests of the new config itself")
	}

	return nil
}

// upgradePath parses the versions and refuses a downgrade or a skipped minor version.
func upgradePath(cs kubernetes.Interface, fromFlag, toFlag string) (from, to *version.Version, err error) {
	if fromFlag == "" {
		v, err := cs.Discovery().ServerVersion()
		if err != nil {
			return nil, nil, fmt.Errorf("asking the API server its version: %w (pass --from)", err)
		}

		fromFlag = v.GitVersion
	}

	if from, err = version.ParseSemantic(fromFlag); err != nil {
		return nil, nil, fmt.Errorf("--from %q: %w (a version like v1.34.0)", fromFlag, err)
	}

	if to, err = version.ParseSemantic(toFlag); err != nil {
		return nil, nil, fmt.Errorf("--to %q: %w (a version like v1.34.0)", toFlag, err)
	}

	switch {
	case to.LessThan(from):
		return nil, nil, fmt.Errorf("--to %s is older than the running %s: downgrades are not supported", to, from)
	case to.Major() != from.Major() || to.Minor() > from.Minor()+1:
		return nil, nil, fmt.Errorf("upgrade from %s to %s skips a minor version: upgrade one minor version at a time", from, to)
	}

	return from, to, nil
}

// clusterNodes lists the Kubernetes nodes with the address the Talos API reaches them at.
func clusterNodes(ctx context.Context, cs kubernetes.Interface) ([]k8sNode, error) {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the cluster's nodes: %w", err)
	}

	var nodes []k8sNode

	for _, n := range list.Items {
		node := k8sNode{name: n.Name}
		_, node.controlPlane = n.Labels["node-role.kubernetes.io/control-plane"]

		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && node.address == "" {
				node.address = a.Address
			}
		}

		if node.address == "" {
			return nil, fmt.Errorf("node %s reports no InternalIP address to reach its Talos API at", n.Name)
		}

		nodes = append(nodes, node)
	}

	if len(nodes) == 0 {
		return nil, errors.New("the cluster has no nodes")
	}

	return nodes, nil
}

// prePullImages makes sure every node has the images it will run: images already in the node's
// store are kept, others pulled; a node that cannot get one stops the upgrade before anything
// changed.
func prePullImages(ctx context.Context, out io.Writer, s *session, nodes []k8sNode, components []component) error {
	for _, n := range nodes {
		nctx := client.WithNode(ctx, n.address)
		have := map[common.ContainerdNamespace]map[string]bool{}

		for _, c := range components {
			if c.controlPlaneOnly && !n.controlPlane {
				continue
			}

			if have[c.namespace] == nil {
				names, err := nodeImages(nctx, s.c, c.namespace)
				if err != nil {
					return fmt.Errorf("listing the images of %s: %w%s", n.name, err, hint(err))
				}

				have[c.namespace] = names
			}

			if have[c.namespace][c.image] {
				fmt.Fprintf(out, " > %s: %s is in the node's image store\n", n.name, c.image)

				continue
			}

			fmt.Fprintf(out, " > %s: pre-pulling %s\n", n.name, c.image)

			if err := s.c.ImagePull(nctx, c.namespace, c.image); err != nil {
				return fmt.Errorf("%s cannot get %s: %w", n.name, c.image, err)
			}
		}
	}

	return nil
}

func nodeImages(ctx context.Context, c *client.Client, ns common.ContainerdNamespace) (map[string]bool, error) {
	stream, err := c.MachineClient.ImageList(ctx, &machineapi.ImageListRequest{Namespace: ns})
	if err != nil {
		return nil, err
	}

	names := map[string]bool{}

	for {
		img, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return names, nil
		}

		if err != nil {
			return nil, err
		}

		if e := img.GetMetadata().GetError(); e != "" {
			return nil, errors.New(e)
		}

		names[img.Name] = true
	}
}

// upgradeComponent sets the component's image in the node's machine config (no reboot) and
// waits for the node to run it.
func upgradeComponent(ctx context.Context, out io.Writer, s *session, cs kubernetes.Interface, n k8sNode, c component, to string, dryRun bool) error {
	nctx := client.WithNode(ctx, n.address)

	mc, err := safe.StateGet[*config.MachineConfig](nctx, s.c.COSI,
		resource.NewMetadata(config.NamespaceName, config.MachineConfigType, config.ActiveID, resource.VersionUndefined))
	if err != nil {
		return fmt.Errorf("reading the machine config: %w", err)
	}

	current := configImage(mc, c.name)
	if current == c.image {
		fmt.Fprintf(out, " > %s: %s already runs %s\n", n.name, c.name, c.image)

		return nil
	}

	fmt.Fprintf(out, " > %s: updating %s: %s -> %s\n", n.name, c.name, current, c.image)

	if dryRun {
		return nil
	}

	patch, err := configpatcher.LoadPatch([]byte(imagePatch(c.configPath, c.image)))
	if err != nil {
		return err
	}

	patched, err := configpatch.Apply(configpatcher.WithConfig(mc.Provider()), []configpatcher.Patch{patch})
	if err != nil {
		return fmt.Errorf("patching %s: %w", c.configPath, err)
	}

	data, err := patched.Bytes()
	if err != nil {
		return err
	}

	if _, err = s.c.ApplyConfiguration(nctx, &machineapi.ApplyConfigurationRequest{Data: data, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT}); err != nil {
		return fmt.Errorf("applying the config: %w", err)
	}

	switch c.name {
	case "kube-proxy":
		return nil // the DaemonSet, once every control plane has the new config
	case "kubelet":
		return waitKubelet(ctx, out, cs, n.name, to)
	default:
		return waitStaticPod(ctx, out, cs, c.name+"-"+n.name, c.image)
	}
}

// configImage is the component's image in the node's machine config.
func configImage(mc *config.MachineConfig, name string) string {
	cl, m := mc.Config().Cluster(), mc.Config().Machine()

	switch name {
	case "kube-apiserver":
		return cl.APIServer().Image()
	case "kube-controller-manager":
		return cl.ControllerManager().Image()
	case "kube-scheduler":
		return cl.Scheduler().Image()
	case "kube-proxy":
		return cl.Proxy().Image()
	default:
		return m.Kubelet().Image()
	}
}

// imagePatch is the strategic merge patch that sets the dotted path to image.
func imagePatch(path, image string) string {
	parts := strings.Split(path, ".")
	patch := fmt.Sprintf("%q", image)

	for i := len(parts) - 1; i >= 0; i-- {
		patch = fmt.Sprintf("{%q: %s}", parts[i], patch)
	}

	return patch
}

const upgradeWait = 5 * time.Minute

// waitStaticPod waits for the mirror pod of a static pod to run image and be ready.
func waitStaticPod(ctx context.Context, out io.Writer, cs kubernetes.Interface, pod, image string) error {
	return waitK8sUpgraded(ctx, out, pod, func() error {
		p, err := cs.CoreV1().Pods("kube-system").Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return err
		}

		for _, c := range p.Status.ContainerStatuses {
			if c.Image != image && !strings.HasSuffix(c.Image, "/"+image) {
				return fmt.Errorf("runs %s", c.Image)
			}

			if !c.Ready {
				return errors.New("not ready")
			}
		}

		if len(p.Status.ContainerStatuses) == 0 {
			return errors.New("no container status yet")
		}

		return nil
	})
}

// waitKubelet waits for the node's kubelet to report the version and the node Ready.
func waitKubelet(ctx context.Context, out io.Writer, cs kubernetes.Interface, node, to string) error {
	return waitK8sUpgraded(ctx, out, "kubelet on "+node, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}

		if v := n.Status.NodeInfo.KubeletVersion; strings.TrimPrefix(v, "v") != to {
			return fmt.Errorf("reports version %s", v)
		}

		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}

		return errors.New("not Ready")
	})
}

// waitDaemonSetImage waits for the DaemonSet's rollout of image to finish.
func waitDaemonSetImage(ctx context.Context, out io.Writer, cs kubernetes.Interface, name, image string) error {
	return waitK8sUpgraded(ctx, out, "DaemonSet kube-system/"+name, func() error {
		ds, err := cs.AppsV1().DaemonSets("kube-system").Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil // kube-proxy disabled in the config
		}

		if err != nil {
			return err
		}

		return daemonSetRolledOut(ds, image)
	})
}

func daemonSetRolledOut(ds *appsv1.DaemonSet, image string) error {
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Image != image {
			return fmt.Errorf("container %s has image %s", c.Name, c.Image)
		}
	}

	st := ds.Status
	if ds.Generation != st.ObservedGeneration || st.UpdatedNumberScheduled != st.DesiredNumberScheduled || st.NumberAvailable != st.DesiredNumberScheduled {
		return fmt.Errorf("%d of %d pods updated, %d available", st.UpdatedNumberScheduled, st.DesiredNumberScheduled, st.NumberAvailable)
	}

	return nil
}

func waitK8sUpgraded(ctx context.Context, out io.Writer, what string, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, upgradeWait)
	defer cancel()

	fmt.Fprintf(out, " > waiting for %s\n", what)

	for {
		err := check()
		if err == nil {
			fmt.Fprintf(out, " < %s is up to date\n", what)

			return nil
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %w)", what, ctx.Err(), err)
		case <-time.After(2 * time.Second):
		}
	}
}
