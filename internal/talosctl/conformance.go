package talosctl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
)

// The conformance run's objects, as upstream's (hydrophone) names them: the upstream
// conformance image runs the e2e suite in a pod of its own namespace, with cluster-admin, and
// a second container keeps the results folder readable once the tests are done.
const (
	conformanceNamespace   = "conformance"
	conformancePod         = "e2e-conformance-test"
	conformanceAccount     = "conformance-serviceaccount"
	conformanceBinding     = "conformance-serviceaccount-role-binding"
	conformanceContainer   = "conformance-container"
	conformanceOutput      = "output-container"
	conformanceOutputImage = "registry.k8s.io/e2e-test-images/busybox:1.36.1-1"
	conformanceResultsDir  = "/tmp/results"
	conformanceImageRepo   = "registry.k8s.io/conformance"
	conformanceDeleteWait  = 5 * time.Minute
)

// conformanceRun is one pass of the e2e suite.
type conformanceRun struct {
	focus, skip string
	parallel    bool
	timeout     time.Duration
	results     string // folder for e2e.log and junit_01.xml; empty: not kept
}

// conformanceRuns are upstream's modes: fast runs the conformance tests in parallel, then the
// serial ones alone; certified runs them all serially and keeps the results in
// v<major>.<minor>/talos, the layout of the CNCF conformance submissions.
func conformanceRuns(mode string, v *version.Version) ([]conformanceRun, error) {
	switch mode {
	case "fast":
		return []conformanceRun{
			{focus: `\[Conformance\]`, skip: `\[Serial\]`, parallel: true, timeout: time.Hour},
			{focus: `\[Serial\].*\[Conformance\]`, timeout: time.Hour},
		}, nil
	case "certified":
		return []conformanceRun{
			{focus: `\[Conformance\]`, timeout: 2 * time.Hour, results: fmt.Sprintf("v%d.%d/talos", v.Major(), v.Minor())},
		}, nil
	default:
		return nil, fmt.Errorf("unsupported conformance mode %q: use --mode fast or --mode certified", mode)
	}
}

func conformanceCmd(g *Global) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "conformance",
		Short: "Run conformance tests",
	}

	var mode string

	k8s := &cobra.Command{
		Use:     "kubernetes",
		Aliases: []string{"k8s"},
		Short:   "Run Kubernetes conformance tests",
		Long: `Runs the Kubernetes conformance tests in the cluster, as upstream's talosctl does: the
upstream conformance image for the API server's version (registry.k8s.io/conformance:vX.Y.Z)
runs the e2e suite in a pod of the "conformance" namespace, its log is followed here, and the
namespace is deleted at the end. The nodes pull that image and the tests' images from the
internet (or a registry mirror in machine.registries). -n names one control plane node.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.run(cmd, func(ctx context.Context, s *session) error {
				return runConformance(ctx, cmd.OutOrStdout(), s, mode)
			})
		},
	}

	k8s.Flags().StringVar(&mode, "mode", "fast", "conformance test mode: [fast, certified]")
	cmd.AddCommand(k8s)

	return cmd
}

// kubeClient connects to the cluster's API server with the admin kubeconfig of the node.
func kubeClient(ctx context.Context, s *session, what string) (*rest.Config, kubernetes.Interface, error) {
	cpCtx, err := s.single(ctx, what)
	if err != nil {
		return nil, nil, err
	}

	kc, err := s.c.Kubeconfig(cpCtx)
	if err != nil {
		return nil, nil, fmt.Errorf("downloading the kubeconfig: %w%s (-n must name a control plane node)", err, hint(err))
	}

	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		return nil, nil, fmt.Errorf("the node's kubeconfig: %w", err)
	}

	cs, err := kubernetes.NewForConfig(cfg)

	return cfg, cs, err
}

func runConformance(ctx context.Context, out io.Writer, s *session, mode string) error {
	cfg, cs, err := kubeClient(ctx, s, "conformance")
	if err != nil {
		return err
	}

	image, v, err := conformanceImage(cs)
	if err != nil {
		return err
	}

	runs, err := conformanceRuns(mode, v)
	if err != nil {
		return err
	}

	for i, run := range runs {
		fmt.Fprintf(out, "conformance pass %d of %d: focus %s, skip %q, parallel %v, image %s\n", i+1, len(runs), run.focus, run.skip, run.parallel, image)

		if err = conformancePass(ctx, out, cfg, cs, image, run); err != nil {
			return err
		}
	}

	fmt.Fprintln(out, "conformance tests passed")

	return nil
}

// conformanceImage is the upstream conformance image of the API server's version.
func conformanceImage(cs kubernetes.Interface) (string, *version.Version, error) {
	info, err := cs.Discovery().ServerVersion()
	if err != nil {
		return "", nil, fmt.Errorf("the API server's version: %w", err)
	}

	v, err := version.ParseGeneric(info.GitVersion)
	if err != nil {
		return "", nil, fmt.Errorf("the API server's version %q: %w", info.GitVersion, err)
	}

	return fmt.Sprintf("%s:v%d.%d.%d", conformanceImageRepo, v.Major(), v.Minor(), v.Patch()), v, nil
}

// quickE2ETests are the e2e tests of `health --run-e2e`, as upstream's: basic pod and service
// operations.
var quickE2ETests = []string{
	"Pods should be submitted and removed",
	"Services should serve a basic endpoint from pods",
	"Services should be able to change the type from ExternalName to ClusterIP",
}

// quickE2E runs the quick e2e tests after a successful health check (health --run-e2e).
func quickE2E(ctx context.Context, out io.Writer, s *session) error {
	cfg, cs, err := kubeClient(ctx, s, "health --run-e2e")
	if err != nil {
		return err
	}

	image, _, err := conformanceImage(cs)
	if err != nil {
		return err
	}

	fmt.Fprintf(out, "running the e2e tests %q with %s\n", quickE2ETests, image)

	return conformancePass(ctx, out, cfg, cs, image, conformanceRun{focus: strings.Join(quickE2ETests, "|"), timeout: 10 * time.Minute})
}

// conformancePass runs one pass and deletes what it created, whatever the outcome.
func conformancePass(ctx context.Context, out io.Writer, cfg *rest.Config, cs kubernetes.Interface, image string, run conformanceRun) (err error) {
	if _, err = cs.CoreV1().Namespaces().Get(ctx, conformanceNamespace, metav1.GetOptions{}); err == nil {
		return fmt.Errorf("namespace %q exists: another conformance run is in progress or was left behind; wait for it, or delete it with `kubectl delete namespace %s`", conformanceNamespace, conformanceNamespace)
	}

	defer func() {
		if cleanupErr := conformanceCleanup(context.WithoutCancel(ctx), out, cs); cleanupErr != nil && err == nil {
			err = cleanupErr
		}
	}()

	if err = conformanceCreate(ctx, cs, image, run); err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(ctx, run.timeout)
	defer cancel()

	var log bytes.Buffer

	if err = conformanceWait(ctx, io.MultiWriter(out, &log), cs); err != nil {
		return err
	}

	if run.results == "" {
		return nil
	}

	return conformanceResults(ctx, out, cfg, cs, run.results, log.Bytes())
}

func conformanceCreate(ctx context.Context, cs kubernetes.Interface, image string, run conformanceRun) error {
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: conformanceNamespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", conformanceNamespace, err)
	}

	if _, err := cs.CoreV1().ServiceAccounts(conformanceNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: conformanceAccount}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the conformance service account: %w", err)
	}

	// The e2e suite creates and deletes namespaces, nodes' objects and cluster-wide resources.
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: conformanceBinding},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: conformanceAccount, Namespace: conformanceNamespace}},
	}

	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("binding the conformance service account to cluster-admin: %w", err)
	}

	results := []corev1.VolumeMount{{Name: "results", MountPath: conformanceResultsDir}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: conformancePod, Namespace: conformanceNamespace},
		Spec: corev1.PodSpec{
			ServiceAccountName: conformanceAccount,
			RestartPolicy:      corev1.RestartPolicyNever,
			Tolerations:        []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Volumes:            []corev1.Volume{{Name: "results", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Containers: []corev1.Container{
				{
					Name:  conformanceContainer,
					Image: image,
					Env: []corev1.EnvVar{
						{Name: "E2E_FOCUS", Value: run.focus},
						{Name: "E2E_SKIP", Value: run.skip},
						{Name: "E2E_PARALLEL", Value: fmt.Sprint(run.parallel)},
						{Name: "E2E_VERBOSITY", Value: "4"},
						{Name: "RESULTS_DIR", Value: conformanceResultsDir},
					},
					VolumeMounts: results,
				},
				{
					Name:         conformanceOutput,
					Image:        conformanceOutputImage,
					Command:      []string{"/bin/sh", "-c", "sleep infinity"},
					VolumeMounts: results,
				},
			},
		},
	}

	if _, err := cs.CoreV1().Pods(conformanceNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the conformance pod: %w", err)
	}

	return nil
}

// pullFailures are the container states that mean an image will not come.
var pullFailures = map[string]bool{"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true}

// conformanceWait follows the pod: its progress until the tests start, their log while they
// run, and their exit code.
func conformanceWait(ctx context.Context, out io.Writer, cs kubernetes.Interface) error {
	var (
		last      string
		following chan error
	)

	for {
		pod, err := cs.CoreV1().Pods(conformanceNamespace).Get(ctx, conformancePod, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("the conformance pod: %w", err)
		}

		for _, c := range pod.Status.ContainerStatuses {
			if w := c.State.Waiting; w != nil && pullFailures[w.Reason] {
				return fmt.Errorf("node %s cannot pull %s (%s: %s): the conformance tests need registry.k8s.io's images, so the nodes need access to it or a registry mirror for it in machine.registries",
					pod.Spec.NodeName, c.Image, w.Reason, w.Message)
			}

			if c.Name != conformanceContainer {
				continue
			}

			if c.State.Running != nil && following == nil {
				following = make(chan error, 1)

				go func() { following <- followLog(ctx, out, cs) }()
			}

			if t := c.State.Terminated; t != nil {
				if following != nil {
					if err = <-following; err != nil {
						fmt.Fprintf(out, "following the conformance log: %v\n", err)
					}
				}

				if t.ExitCode != 0 {
					return fmt.Errorf("conformance tests failed: exit code %d (%s); the log is above", t.ExitCode, t.Reason)
				}

				return nil
			}
		}

		if now := podProgress(pod); now != last && following == nil {
			fmt.Fprintf(out, "conformance pod: %s\n", now)
			last = now
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("conformance tests did not finish in time: %w", ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

// podProgress says where the pod is: its phase and why its containers wait.
func podProgress(pod *corev1.Pod) string {
	parts := []string{string(pod.Status.Phase)}
	if pod.Spec.NodeName != "" {
		parts = append(parts, "on "+pod.Spec.NodeName)
	}

	for _, c := range pod.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil {
			parts = append(parts, c.Name+" "+w.Reason)
		}
	}

	return strings.Join(parts, ", ")
}

func followLog(ctx context.Context, out io.Writer, cs kubernetes.Interface) error {
	stream, err := cs.CoreV1().Pods(conformanceNamespace).GetLogs(conformancePod, &corev1.PodLogOptions{Container: conformanceContainer, Follow: true}).Stream(ctx)
	if err != nil {
		return err
	}
	defer stream.Close()

	_, err = io.Copy(out, stream)

	return err
}

// conformanceResults keeps the pass's log and JUnit report in dir, as upstream's certified mode.
func conformanceResults(ctx context.Context, out io.Writer, cfg *rest.Config, cs kubernetes.Interface, dir string, log []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}

	var junit bytes.Buffer

	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(conformanceNamespace).Name(conformancePod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: conformanceOutput, Command: []string{"cat", conformanceResultsDir + "/junit_01.xml"}, Stdout: true, Stderr: true}, scheme.ParameterCodec)

	ex, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return err
	}

	var stderr bytes.Buffer
	if err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &junit, Stderr: &stderr}); err != nil {
		return fmt.Errorf("reading the JUnit report: %w: %s", err, stderr.String())
	}

	for name, data := range map[string][]byte{"e2e.log": log, "junit_01.xml": junit.Bytes()} {
		if err = os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}

	fmt.Fprintf(out, "results written to %s (e2e.log, junit_01.xml)\n", dir)

	return nil
}

// conformanceCleanup deletes the binding and the namespace and waits until the namespace is
// gone, so the next run can start.
func conformanceCleanup(ctx context.Context, out io.Writer, cs kubernetes.Interface) error {
	fmt.Fprintf(out, "deleting namespace %s\n", conformanceNamespace)

	if err := cs.RbacV1().ClusterRoleBindings().Delete(ctx, conformanceBinding, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s: %w", conformanceBinding, err)
	}

	if err := cs.CoreV1().Namespaces().Delete(ctx, conformanceNamespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting namespace %s: %w", conformanceNamespace, err)
	}

	ctx, cancel := context.WithTimeout(ctx, conformanceDeleteWait)
	defer cancel()

	for {
		_, err := cs.CoreV1().Namespaces().Get(ctx, conformanceNamespace, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}

		select {
		case <-ctx.Done():
			return errors.New("namespace " + conformanceNamespace + " is still being deleted: check it with `kubectl get namespace " + conformanceNamespace + "`")
		case <-time.After(time.Second):
		}
	}
}
