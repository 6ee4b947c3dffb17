package secrets

import (
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	cx509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/gen/optional"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/pki"
	"github.com/talos-go/talos/internal/trustd"
)

// APIController issues the node's API certificates (secrets.API): apid's server certificate
// (CertSAN "api") and, on a node holding the OS CA key (a control plane), its client
// certificate (os:impersonator) for node-to-node calls. A node holding the key signs them
// itself; a worker sends a CSR with the token to trustd on the control planes for its server
// certificate only: it has no client certificate, so its files and its token carry no role and
// its apid forwards nowhere (as upstream after CVE-2022-36103). They are renewed after two thirds of their lifetime (checked against the
// wall clock, so a clock jump renews them too) and whenever the names or the CA change.
type APIController struct {
	// Lifetime of the certificates; Lifetime() when zero.
	Lifetime time.Duration
	// Address is the node's address, the source of its calls to trustd (container mode).
	Address string
	// Now and Check are for tests: the wall clock, and how often it is checked.
	Now   func() time.Time
	Check time.Duration

	client *trustd.Client
}

// Name implements controller.Controller.
func (ctrl *APIController) Name() string { return "secrets.APIController" }

// Inputs implements controller.Controller.
func (ctrl *APIController) Inputs() []controller.Input {
	return []controller.Input{
		{Namespace: secrets.NamespaceName, Type: secrets.OSRootType, ID: optional.Some(secrets.OSRootID), Kind: controller.InputWeak},
		{Namespace: secrets.NamespaceName, Type: secrets.CertSANType, ID: optional.Some(secrets.CertSANAPIID), Kind: controller.InputWeak},
		{Namespace: config.NamespaceName, Type: config.MachineConfigType, ID: optional.Some(config.ActiveID), Kind: controller.InputWeak},
		// Discovered control planes are more places to find trustd.
		{Namespace: cluster.NamespaceName, Type: cluster.MemberType, Kind: controller.InputWeak},
	}
}

// Outputs implements controller.Controller.
func (ctrl *APIController) Outputs() []controller.Output {
	return []controller.Output{{Type: secrets.APIType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *APIController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	lifetime := ctrl.Lifetime
	if lifetime <= 0 {
		lifetime = Lifetime()
	}

	check := ctrl.Check
	if check <= 0 {
		check = checkInterval(lifetime)
	}

	ticks, stop := newCheckTicker(check, log)
	defer stop()

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		case <-ticks:
		}

		if err := ctrl.reconcile(ctx, r, log, lifetime); err != nil {
			if ctx.Err() != nil {
				return nil
			}

			// Retried on the next change or check.
			log.Error("issuing API certificates", zap.Error(err))
		}
	}
}

func (ctrl *APIController) reconcile(ctx context.Context, r controller.Runtime, log *zap.Logger, lifetime time.Duration) error {
	root, err := safe.ReaderGetByID[*secrets.OSRoot](ctx, r, secrets.OSRootID)
	if err != nil {
		if state.IsNotFoundError(err) {
			return nil
		}

		return fmt.Errorf("reading os root: %w", err)
	}

	sans, err := safe.ReaderGetByID[*secrets.CertSAN](ctx, r, secrets.CertSANAPIID)
	if err != nil {
		if state.IsNotFoundError(err) {
			return nil
		}

		return fmt.Errorf("reading api cert SANs: %w", err)
	}

	rootSpec := root.TypedSpec()
	if rootSpec.IssuingCA == nil || len(rootSpec.IssuingCA.Crt) == 0 {
		return nil
	}

	sanSpec := sans.TypedSpec()
	server := want{commonName: sanSpec.FQDN, ips: sanSpec.IPs, dns: sanSpec.DNSNames, usage: x509.ExtKeyUsageServerAuth}
	client := want{commonName: sanSpec.FQDN, orgs: []string{string(role.Impersonator)}, usage: x509.ExtKeyUsageClientAuth}
	bundle := caBundle(rootSpec)

	cur, err := safe.ReaderGetByID[*secrets.API](ctx, r, secrets.APIID)
	if err != nil && !state.IsNotFoundError(err) {
		return fmt.Errorf("reading api certificates: %w", err)
	}

	now := time.Now()
	if ctrl.Now != nil {
		now = ctrl.Now()
	}

	reason := "missing"

	if cur != nil {
		spec := cur.TypedSpec()
		reason = current(spec.Server, rootSpec.IssuingCA.Crt, server, now)

		switch {
		case reason != "":
		case hasKey(rootSpec):
			reason = current(spec.Client, rootSpec.IssuingCA.Crt, client, now)
		case spec.Client != nil:
			reason = "a worker holds no client certificate"
		}

		if reason == "" && !sameBundle(spec.AcceptedCAs, bundle) {
			reason = "accepted CAs changed"
		}
	}

	if reason == "" {
		return nil
	}

	var serverPair, clientPair *cx509.PEMEncodedCertificateAndKey

	if hasKey(rootSpec) {
		if serverPair, err = signLocal(rootSpec.IssuingCA, server, lifetime, now); err != nil {
			return err
		}

		if clientPair, err = signLocal(rootSpec.IssuingCA, client, lifetime, now); err != nil {
			return err
		}
	} else if serverPair, err = ctrl.remote(ctx, r, log, rootSpec, server); err != nil {
		return err
	}

	if err = safe.WriterModify(ctx, r, secrets.NewAPI(), func(res *secrets.API) error {
		spec := res.TypedSpec()
		spec.AcceptedCAs = bundle
		spec.Server = serverPair
		spec.Client = clientPair

		return nil
	}); err != nil {
		return fmt.Errorf("writing api certificates: %w", err)
	}

	log.Info("issued API certificates", zap.String("reason", reason), zap.Bool("local", hasKey(rootSpec)), zap.Duration("lifetime", lifetime))

	return nil
}

// remote gets one certificate signed by trustd on a control plane.
func (ctrl *APIController) remote(ctx context.Context, r controller.Runtime, log *zap.Logger, root *secrets.OSRootSpec, w want) (*cx509.PEMEncodedCertificateAndKey, error) {
	if root.Token == "" {
		return nil, fmt.Errorf("no machine.token: cannot ask trustd for certificates")
	}

	roots := x509.NewCertPool()
	for _, ca := range caBundle(root) {
		roots.AppendCertsFromPEM(ca.Crt)
	}

	if ctrl.client == nil {
		ctrl.client = &trustd.Client{Log: log, LocalAddress: ctrl.Address}
	}

	ctrl.client.Token = root.Token
	ctrl.client.Roots = roots
	ctrl.client.Endpoints = func() []string {
		cfg, err := safe.ReaderGetByID[*config.MachineConfig](ctx, r, config.ActiveID)
		if err != nil {
			return nil
		}

		endpoints := TrustdEndpoints(cfg.Config())

		members, err := safe.ReaderListAll[*cluster.Member](ctx, r)
		if err != nil {
			return endpoints
		}

		for m := range members.All() {
			if !m.TypedSpec().MachineType.IsControlPlane() {
				continue
			}

			for _, addr := range m.TypedSpec().Addresses {
				if !slices.Contains(endpoints, addr.String()) {
					endpoints = append(endpoints, addr.String())
				}
			}
		}

		return endpoints
	}

	csr, key, err := pki.NewCSR(w.leaf(0))
	if err != nil {
		return nil, err
	}

	signed, err := ctrl.client.Sign(ctx, csr)
	if err != nil {
		return nil, err
	}

	crt, err := parseCert(signed.Crt)
	if err != nil {
		return nil, fmt.Errorf("parsing certificate from %s: %w", signed.Endpoint, err)
	}

	// The signed certificate must chain to the CA in our config, whoever answered.
	if _, err = crt.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{w.usage}}); err != nil {
		return nil, fmt.Errorf("certificate from %s does not verify against machine.ca: %w", signed.Endpoint, err)
	}

	log.Info("certificate signed by trustd", zap.String("endpoint", signed.Endpoint), zap.String("cn", w.commonName))

	return &cx509.PEMEncodedCertificateAndKey{Crt: signed.Crt, Key: key}, nil
}
