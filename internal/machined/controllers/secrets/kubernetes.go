package secrets

import (
	"context"
	stdx509 "crypto/x509"
	"fmt"
	"net/url"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
)

// KubernetesController issues the control plane's kubeconfigs (secrets.Kubernetes) on control
// planes: kube-scheduler's and kube-controller-manager's and a localhost admin one, all through
// the local API server endpoint, and the admin kubeconfig `talosctl kubeconfig` hands out,
// through the cluster endpoint, with cluster.adminKubeconfig.certLifetime. Each is renewed
// after two thirds of its lifetime and reissued when the CA or the endpoints change.
type KubernetesController struct {
	Lifetime time.Duration // of the components' kubeconfigs; DefaultLifetime when zero
	Now      func() time.Time
	Check    time.Duration
}

// Name implements controller.Controller.
func (ctrl *KubernetesController) Name() string { return "secrets.KubernetesController" }

// Inputs implements controller.Controller.
func (ctrl *KubernetesController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: secrets.NamespaceName, Type: secrets.KubernetesRootType, ID: optional.Some(secrets.KubernetesRootID), Kind: controller.InputWeak},
		{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *KubernetesController) Outputs() []controller.Output {
	return []controller.Output{{Type: secrets.KubernetesType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *KubernetesController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	lifetime := Lifetime(ctrl.Lifetime)

	check := ctrl.Check
	if check <= 0 {
		check = checkInterval(lifetime)
	}

	clk := renewClock{Now: ctrl.Now}

	return renewLoop(ctx, r, log, check, "issuing Kubernetes kubeconfigs", func() error {
		return ctrl.reconcile(ctx, r, log, lifetime, clk.now())
	})
}

// kubeconfigSlot is one kubeconfig of secrets.Kubernetes.
type kubeconfigSlot struct {
	name     string
	want     want
	endpoint *url.URL
	lifetime time.Duration
	field    *string
}

func (ctrl *KubernetesController) reconcile(ctx context.Context, r controller.Runtime, log *zap.Logger, lifetime time.Duration, now time.Time) error {
	root, err := safe.ReaderGetByID[*secrets.KubernetesRoot](ctx, r, secrets.KubernetesRootID)
	if err != nil {
		if state.IsNotFoundError(err) {
			if err = r.Destroy(ctx, secrets.NewKubernetes().Metadata()); err != nil && !state.IsNotFoundError(err) {
				return err
			}

			return nil
		}

		return fmt.Errorf("reading kubernetes root: %w", err)
	}

	rs := root.TypedSpec()
	if rs.IssuingCA == nil || len(rs.IssuingCA.Key) == 0 || rs.Endpoint == nil || rs.LocalEndpoint == nil {
		return fmt.Errorf("the kubernetes root lacks the CA key or the endpoints")
	}

	adminLifetime := 365 * 24 * time.Hour

	if cfg, cfgErr := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID); cfgErr == nil && cfg.Config().Cluster() != nil {
		if l := cfg.Config().Cluster().AdminKubeconfig().CertLifetime(); l > 0 {
			adminLifetime = l
		}
	}

	cur, err := safe.ReaderGetByID[*secrets.Kubernetes](ctx, r, secrets.KubernetesID)
	if err != nil && !state.IsNotFoundError(err) {
		return fmt.Errorf("reading kubernetes secrets: %w", err)
	}

	next := secrets.KubernetesCertsSpec{}
	if cur != nil {
		next = *cur.TypedSpec()
	}

	client := func(cn, org string) want {
		return want{commonName: cn, orgs: []string{org}, usage: stdx509.ExtKeyUsageClientAuth}
	}

	admin := client(constants.KubernetesAdminCertCommonName, constants.KubernetesAdminCertOrganization)
	slots := []kubeconfigSlot{
		{constants.KubernetesSchedulerOrganization, client(constants.KubernetesSchedulerOrganization, constants.KubernetesSchedulerOrganization), rs.LocalEndpoint, lifetime, &next.SchedulerKubeconfig},
		{constants.KubernetesControllerManagerOrganization, client(constants.KubernetesControllerManagerOrganization, constants.KubernetesControllerManagerOrganization), rs.LocalEndpoint, lifetime, &next.ControllerManagerKubeconfig},
		{"admin", admin, rs.LocalEndpoint, lifetime, &next.LocalhostAdminKubeconfig},
		{"admin", admin, rs.Endpoint, adminLifetime, &next.AdminKubeconfig},
	}

	var renewed []string

	for _, s := range slots {
		reason := kubeconfigCurrent(*s.field, rs, s, now)
		if reason == "" {
			continue
		}

		if *s.field, err = ctrl.issue(rs, s, now); err != nil {
			return err
		}

		renewed = append(renewed, s.name+"@"+s.endpoint.Host+": "+reason)
	}

	if len(renewed) == 0 {
		return nil
	}

	if err = safe.WriterModify(ctx, r, secrets.NewKubernetes(), func(res *secrets.Kubernetes) error {
		*res.TypedSpec() = next

		return nil
	}); err != nil {
		return fmt.Errorf("writing kubernetes secrets: %w", err)
	}

	log.Info("issued Kubernetes kubeconfigs", zap.Strings("reasons", renewed))

	return nil
}

// kubeconfigCurrent reports why a kubeconfig no longer fits (empty: it fits).
func kubeconfigCurrent(data string, rs *secrets.KubernetesRootSpec, s kubeconfigSlot, now time.Time) string {
	if data == "" {
		return "missing"
	}

	server, ca, pair, err := parseKubeconfig(data)
	if err != nil {
		return "unparsable"
	}

	if server != s.endpoint.String() || string(ca) != string(caBundlePEM(rs)) {
		return "endpoint or CA changed"
	}

	return current(pair, rs.IssuingCA.Crt, s.want, now)
}

// issue makes one kubeconfig with a fresh client certificate.
func (ctrl *KubernetesController) issue(rs *secrets.KubernetesRootSpec, s kubeconfigSlot, now time.Time) (string, error) {
	pair, err := signLocal(rs.IssuingCA, s.want, s.lifetime, now)
	if err != nil {
		return "", fmt.Errorf("issuing %s: %w", s.name, err)
	}

	return Kubeconfig(rs.Name, s.want.commonName, s.endpoint.String(), caBundlePEM(rs), pair)
}

// caBundlePEM is the CAs a client trusts the API server by: cluster.ca, then the accepted ones.
func caBundlePEM(rs *secrets.KubernetesRootSpec) []byte {
	var out []byte

	out = append(out, rs.IssuingCA.Crt...)

	for _, ca := range rs.AcceptedCAs {
		if ca != nil && string(ca.Crt) != string(rs.IssuingCA.Crt) {
			out = append(out, ca.Crt...)
		}
	}

	return out
}
