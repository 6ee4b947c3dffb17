package secrets

import (
	"context"
	stdx509 "crypto/x509"
	"fmt"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"go.uber.org/zap"
)

// KubernetesDynamicCertsController issues the API server's certificates
// (secrets.KubernetesDynamicCerts) on control planes: its serving certificate for the names of
// CertSAN "k8s", its client certificate to kubelets (system:masters) and the front proxy's
// client certificate (signed by the aggregator CA). They are renewed after two thirds of their
// lifetime by the wall clock, and reissued when the names or the CAs change.
type KubernetesDynamicCertsController struct {
	Lifetime time.Duration // DefaultLifetime when zero
	Now      func() time.Time
	Check    time.Duration
}

// Name implements controller.Controller.
func (ctrl *KubernetesDynamicCertsController) Name() string {
	return "secrets.KubernetesDynamicCertsController"
}

// Inputs implements controller.Controller.
func (ctrl *KubernetesDynamicCertsController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: secrets.NamespaceName, Type: secrets.KubernetesRootType, ID: optional.Some(secrets.KubernetesRootID), Kind: controller.InputWeak},
		{Namespace: secrets.NamespaceName, Type: secrets.CertSANType, ID: optional.Some(secrets.CertSANKubernetesID), Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *KubernetesDynamicCertsController) Outputs() []controller.Output {
	return []controller.Output{{Type: secrets.KubernetesDynamicCertsType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *KubernetesDynamicCertsController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	lifetime := Lifetime(ctrl.Lifetime)

	check := ctrl.Check
	if check <= 0 {
		check = checkInterval(lifetime)
	}

	clk := renewClock{Now: ctrl.Now}

	return renewLoop(ctx, r, log, check, "issuing Kubernetes API server certificates", func() error {
		return ctrl.reconcile(ctx, r, log, lifetime, clk.now())
	})
}

func (ctrl *KubernetesDynamicCertsController) reconcile(ctx context.Context, r controller.Runtime, log *zap.Logger, lifetime time.Duration, now time.Time) error {
	root, err := safe.ReaderGetByID[*secrets.KubernetesRoot](ctx, r, secrets.KubernetesRootID)
	if err != nil {
		if state.IsNotFoundError(err) {
			return ctrl.clean(ctx, r)
		}

		return fmt.Errorf("reading kubernetes root: %w", err)
	}

	sans, err := safe.ReaderGetByID[*secrets.CertSAN](ctx, r, secrets.CertSANKubernetesID)
	if err != nil {
		if state.IsNotFoundError(err) {
			return nil
		}

		return fmt.Errorf("reading kubernetes cert SANs: %w", err)
	}

	rs := root.TypedSpec()
	if rs.IssuingCA == nil || len(rs.IssuingCA.Key) == 0 || rs.AggregatorCA == nil || len(rs.AggregatorCA.Key) == 0 {
		return fmt.Errorf("cluster.ca and cluster.aggregatorCA must carry their keys on a control plane")
	}

	ss := sans.TypedSpec()
	certs := []struct {
		ca   *x509.PEMEncodedCertificateAndKey
		want want
		slot func(*secrets.KubernetesDynamicCertsSpec) **x509.PEMEncodedCertificateAndKey
	}{
		{rs.IssuingCA, want{commonName: "kube-apiserver", ips: ss.IPs, dns: ss.DNSNames, usage: stdx509.ExtKeyUsageServerAuth},
			func(s *secrets.KubernetesDynamicCertsSpec) **x509.PEMEncodedCertificateAndKey { return &s.APIServer }},
		{rs.IssuingCA, want{commonName: "apiserver-kubelet-client", orgs: []string{constants.KubernetesAdminCertOrganization}, usage: stdx509.ExtKeyUsageClientAuth},
			func(s *secrets.KubernetesDynamicCertsSpec) **x509.PEMEncodedCertificateAndKey {
				return &s.APIServerKubeletClient
			}},
		{rs.AggregatorCA, want{commonName: "front-proxy-client", usage: stdx509.ExtKeyUsageClientAuth},
			func(s *secrets.KubernetesDynamicCertsSpec) **x509.PEMEncodedCertificateAndKey { return &s.FrontProxy }},
	}

	cur, err := safe.ReaderGetByID[*secrets.KubernetesDynamicCerts](ctx, r, secrets.KubernetesDynamicCertsID)
	if err != nil && !state.IsNotFoundError(err) {
		return fmt.Errorf("reading kubernetes dynamic certs: %w", err)
	}

	next := secrets.KubernetesDynamicCertsSpec{}
	if cur != nil {
		next = *cur.TypedSpec()
	}

	var renewed []string

	for _, c := range certs {
		slot := c.slot(&next)
		if reason := current(*slot, c.ca.Crt, c.want, now); reason != "" {
			if *slot, err = signLocal(c.ca, c.want, lifetime, now); err != nil {
				return fmt.Errorf("issuing %s: %w", c.want.commonName, err)
			}

			renewed = append(renewed, c.want.commonName+": "+reason)
		}
	}

	if len(renewed) == 0 {
		return nil
	}

	if err = safe.WriterModify(ctx, r, secrets.NewKubernetesDynamicCerts(), func(res *secrets.KubernetesDynamicCerts) error {
		*res.TypedSpec() = next

		return nil
	}); err != nil {
		return fmt.Errorf("writing kubernetes dynamic certs: %w", err)
	}

	log.Info("issued Kubernetes API server certificates", zap.Strings("reasons", renewed), zap.Duration("lifetime", lifetime))

	return nil
}

// clean removes the certificates of a node that is no longer a control plane.
func (ctrl *KubernetesDynamicCertsController) clean(ctx context.Context, r controller.Runtime) error {
	err := r.Destroy(ctx, secrets.NewKubernetesDynamicCerts().Metadata())
	if err != nil && !state.IsNotFoundError(err) {
		return err
	}

	return nil
}
