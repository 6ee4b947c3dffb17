// Package k8s holds the controllers of the k8s namespace: the control plane's static pods, the
// kubelet's config and spec, the node's name and IPs in Kubernetes.
package k8s

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
	"gopkg.in/yaml.v3"

	secretsctrl "github.com/talos-go/talos/internal/machined/controllers/secrets"
	"github.com/talos-go/talos/internal/pki"
)

// Where the components find their config files in their containers, as upstream; the
// controller writes them under ConfigDir on the host.
const (
	ContainerConfigDir = constants.KubebernetesStaticConfigDir
	ContainerAuditDir  = constants.KubernetesAuditLogDir

	FileAdmissionConfig     = "admission-control-config.yaml"
	FileAuditPolicy         = "auditpolicy.yaml"
	FileAuthorizationConfig = "authorization-config.yaml"
	FileSchedulerConfig     = "scheduler-config.yaml"

	// SecretsVersionAnnotation changes when the certificates are reissued, so kubelet restarts
	// the pods onto the new files.
	SecretsVersionAnnotation = "talos.dev/secrets-version" //nolint:gosec // an annotation name, not a credential
)

// StaticPodController renders the control plane's static pods (k8s.StaticPod): kube-apiserver,
// kube-controller-manager and kube-scheduler with upstream's arguments, the extra arguments,
// volumes and variables of the config, the secrets folders and the config files it writes
// (admission, audit, authorization, scheduler) mounted read-only. Workers have no component
// configs and so no static pods.
type StaticPodController struct {
	SecretsDir  string // host folder of the Kubernetes secrets (/system/secrets/kubernetes)
	ConfigDir   string // host folder of the components' config files (/system/config/kubernetes)
	AuditLogDir string // host folder of the API server's audit log (/var/log/audit/kube)

	// AfterAPIReady holds kube-controller-manager and kube-scheduler back until the bootstrap
	// manifests have been applied once (ManifestStatus), that is until the local API server was
	// ready: started before its RBAC roles exist, kube-controller-manager exits ("forbidden"),
	// and kubelet's restart backoff then kept it down 10-20 s, and with it every node's
	// certificate signing.
	AfterAPIReady bool
}

// Name implements controller.Controller.
func (ctrl *StaticPodController) Name() string { return "k8s.StaticPodController" }

// Inputs implements controller.Controller.
func (ctrl *StaticPodController) Inputs() []controller.Input {
	in := func(ns resource.Namespace, typ resource.Type, id resource.ID) controller.Input {
		return controller.Input{Namespace: ns, Type: typ, ID: optional.Some(id), Kind: controller.InputWeak}
	}

	return []controller.Input{
		in(k8s.ControlPlaneNamespaceName, k8s.APIServerConfigType, k8s.APIServerConfigID),
		in(k8s.ControlPlaneNamespaceName, k8s.ControllerManagerConfigType, k8s.ControllerManagerConfigID),
		in(k8s.ControlPlaneNamespaceName, k8s.SchedulerConfigType, k8s.SchedulerConfigID),
		in(k8s.ControlPlaneNamespaceName, k8s.AdmissionControlConfigType, k8s.AdmissionControlConfigID),
		in(k8s.ControlPlaneNamespaceName, k8s.AuditPolicyConfigType, k8s.AuditPolicyConfigID),
		in(k8s.ControlPlaneNamespaceName, k8s.AuthorizationConfigType, k8s.AuthorizationConfigID),
		in(secrets.NamespaceName, secrets.KubernetesDynamicCertsType, secrets.KubernetesDynamicCertsID),
		in(secrets.NamespaceName, secrets.KubernetesType, secrets.KubernetesID),
		in(k8s.ControlPlaneNamespaceName, k8s.ManifestStatusType, k8s.ManifestStatusID),
	}
}

// Outputs implements controller.Controller.
func (ctrl *StaticPodController) Outputs() []controller.Output {
	// Shared with StaticPodConfigController (machine.pods): each cleans up only its own.
	return []controller.Output{{Type: k8s.StaticPodType, Kind: controller.OutputShared}}
}

// Run implements controller.Controller.
func (ctrl *StaticPodController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		if err := ctrl.reconcile(ctx, r); err != nil {
			log.Error("rendering the control plane's static pods", zap.Error(err))
		}
	}
}

// inputs are the control plane's configs; nil ones are missing.
type inputs struct {
	api        *k8s.APIServerConfigSpec
	cm         *k8s.ControllerManagerConfigSpec
	sched      *k8s.SchedulerConfigSpec
	admission  *k8s.AdmissionControlConfigSpec
	audit      *k8s.AuditPolicyConfigSpec
	authz      *k8s.AuthorizationConfigSpec
	secretsVer string
}

func get[R interface {
	meta.ResourceWithRD
	TypedSpec() *S
}, S any](ctx context.Context, r controller.Reader, id resource.ID) (*S, string, error) {
	res, err := safe.ReaderGetByID[R](ctx, r, id)
	if err != nil {
		if state.IsNotFoundError(err) {
			return nil, "", nil
		}

		return nil, "", err
	}

	return res.TypedSpec(), res.Metadata().Version().String(), nil
}

func (ctrl *StaticPodController) reconcile(ctx context.Context, r controller.Runtime) error {
	r.StartTrackingOutputs()

	var (
		in            inputs
		err           error
		certsVer, kcV string
	)

	if in.api, _, err = get[*k8s.APIServerConfig](ctx, r, k8s.APIServerConfigID); err != nil {
		return err
	}

	if in.cm, _, err = get[*k8s.ControllerManagerConfig](ctx, r, k8s.ControllerManagerConfigID); err != nil {
		return err
	}

	if in.sched, _, err = get[*k8s.SchedulerConfig](ctx, r, k8s.SchedulerConfigID); err != nil {
		return err
	}

	if in.admission, _, err = get[*k8s.AdmissionControlConfig](ctx, r, k8s.AdmissionControlConfigID); err != nil {
		return err
	}

	if in.audit, _, err = get[*k8s.AuditPolicyConfig](ctx, r, k8s.AuditPolicyConfigID); err != nil {
		return err
	}

	if in.authz, _, err = get[*k8s.AuthorizationConfig](ctx, r, k8s.AuthorizationConfigID); err != nil {
		return err
	}

	if _, certsVer, err = get[*secrets.KubernetesDynamicCerts](ctx, r, secrets.KubernetesDynamicCertsID); err != nil {
		return err
	}

	if _, kcV, err = get[*secrets.Kubernetes](ctx, r, secrets.KubernetesID); err != nil {
		return err
	}

	// Without their certificates the components cannot start: no pods until they exist.
	ready := certsVer != "" && kcV != "" && in.admission != nil && in.audit != nil && in.authz != nil
	in.secretsVer = certsVer + "-" + kcV

	apiReady := !ctrl.AfterAPIReady

	if !apiReady {
		if _, statusVer, err := get[*k8s.ManifestStatus](ctx, r, k8s.ManifestStatusID); err != nil {
			return err
		} else if statusVer != "" {
			apiReady = true
		}
	}

	if ready {
		if err = ctrl.writeConfigs(in); err != nil {
			return err
		}

		pods := map[string]map[string]any{}

		if in.api != nil {
			pods[k8s.APIServerID] = ctrl.apiServerPod(in)
		}

		if in.cm != nil && in.cm.Enabled && apiReady {
			pods[k8s.ControllerManagerID] = ctrl.controllerManagerPod(in)
		}

		if in.sched != nil && in.sched.Enabled && apiReady {
			pods[k8s.SchedulerID] = ctrl.schedulerPod(in)
		}

		for id, pod := range pods {
			if err = safe.WriterModify(ctx, r, k8s.NewStaticPod(k8s.NamespaceName, id), func(res *k8s.StaticPod) error {
				res.TypedSpec().Pod = mustPlain(pod)

				return nil
			}); err != nil {
				return fmt.Errorf("writing static pod %s: %w", id, err)
			}
		}
	}

	return safe.CleanupOutputs[*k8s.StaticPod](ctx, r)
}

// writeConfigs writes the config files the components read.
func (ctrl *StaticPodController) writeConfigs(in inputs) error {
	admission := map[string]any{"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration", "plugins": admissionPlugins(in.admission)}
	authz := map[string]any{"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AuthorizationConfiguration", "authorizers": authorizers(in.authz)}

	files := map[string]map[string]any{
		FileAdmissionConfig:     admission,
		FileAuditPolicy:         in.audit.Config,
		FileAuthorizationConfig: authz,
	}

	if err := writeYAML(filepath.Join(ctrl.ConfigDir, k8s.APIServerID), files); err != nil {
		return err
	}

	if in.sched == nil {
		return nil
	}

	sched := map[string]any{}
	maps.Copy(sched, in.sched.Config)
	sched["apiVersion"] = "kubescheduler.config.k8s.io/v1"
	sched["kind"] = "KubeSchedulerConfiguration"
	sched["clientConnection"] = map[string]any{"kubeconfig": filepath.Join(secretsctrl.ContainerSecretsDir, secretsctrl.SchedulerDir, secretsctrl.FileKubeconfig)}

	return writeYAML(filepath.Join(ctrl.ConfigDir, k8s.SchedulerID), map[string]map[string]any{FileSchedulerConfig: sched})
}

func writeYAML(dir string, docs map[string]map[string]any) error {
	files := map[string][]byte{}

	for name, doc := range docs {
		out, err := yaml.Marshal(doc)
		if err != nil {
			return fmt.Errorf("encoding %s: %w", name, err)
		}

		files[name] = out
	}

	return pki.WriteFiles(dir, slices.Sorted(maps.Keys(files)), files)
}

func admissionPlugins(spec *k8s.AdmissionControlConfigSpec) []map[string]any {
	out := []map[string]any{}

	for _, p := range spec.Config {
		out = append(out, map[string]any{"name": p.Name, "configuration": p.Configuration})
	}

	return out
}

func authorizers(spec *k8s.AuthorizationConfigSpec) []map[string]any {
	out := []map[string]any{}

	for _, a := range spec.Config {
		entry := map[string]any{"type": a.Type, "name": a.Name}
		if len(a.Webhook) > 0 {
			entry["webhook"] = a.Webhook
		}

		out = append(out, entry)
	}

	return out
}

// argList merges extra arguments over the defaults and renders them sorted, as --key=value.
func argList(binary string, defaults, extra map[string]string) []any {
	args := maps.Clone(defaults)
	maps.Copy(args, extra)

	out := []any{binary}
	for _, k := range slices.Sorted(maps.Keys(args)) {
		out = append(out, "--"+k+"="+args[k])
	}

	return out
}

func join(s []string) string { return strings.Join(s, ",") }
