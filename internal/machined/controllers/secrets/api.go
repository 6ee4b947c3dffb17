package secrets

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

	"github.com/talos-go/talos/internal/atomicfile"
	"github.com/talos-go/talos/internal/machined/resources"
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
	// Lifetime of the certificates; DefaultLifetime when zero.
	Lifetime time.Duration
	// Address is the node's address, the source of its calls to trustd (container mode).
	Address string
	// KeyFile keeps the node key of a join by approval (no machine.token): an admin approves
	// that key, so it must outlive renewals and reboots. Without it a key lives in memory.
	KeyFile string
	// Now and Check are for tests: the wall clock, and how often it is checked.
	Now   func() time.Time
	Check time.Duration

	client  *trustd.Client
	nodeKey []byte
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
	return []controller.Output{
		{Type: secrets.APIType, Kind: controller.OutputExclusive},
		{Type: resources.JoinStatusType, Kind: controller.OutputExclusive},
	}
}

// Run implements controller.Controller.
func (ctrl *APIController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	lifetime := Lifetime(ctrl.Lifetime)

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

// NodeKeyFile is the node key of a join by approval, in the STATE folder (reset wipes it, and
// the node then asks anew).
const NodeKeyFile = "join-node.key"

// joinStatus publishes the state of this node's join by approval.
func (ctrl *APIController) joinStatus(ctx context.Context, r controller.Runtime, log *zap.Logger, id, st, msg string) {
	if err := safe.WriterModify(ctx, r, resources.NewJoinStatus(), func(res *resources.JoinStatus) error {
		*res.TypedSpec() = resources.JoinStatusSpec{ID: id, State: st, Message: msg}

		return nil
	}); err != nil && ctx.Err() == nil {
		log.Warn("writing join status", zap.Error(err))
	}
}

// nodeKeyCSR makes a CSR with the node key of a join by approval, made once and kept.
func (ctrl *APIController) nodeKeyCSR(w want) (csr, key []byte, err error) {
	if ctrl.KeyFile != "" {
		key, err = os.ReadFile(ctrl.KeyFile)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, nil, fmt.Errorf("reading the node key: %w", err)
		}
	} else {
		key = ctrl.nodeKey
	}

	if len(key) == 0 {
		if key, err = pki.NewKey(); err != nil {
			return nil, nil, err
		}

		if ctrl.KeyFile != "" {
			if err = os.MkdirAll(filepath.Dir(ctrl.KeyFile), 0o700); err != nil {
				return nil, nil, err
			}

			if err = atomicfile.WriteFile(ctrl.KeyFile, key, 0o600); err != nil {
				return nil, nil, fmt.Errorf("writing the node key: %w", err)
			}
		}
	}

	ctrl.nodeKey = key

	csr, err = pki.CSRForKey(w.leaf(0), key)
	if err != nil {
		return nil, nil, fmt.Errorf("node key %s: %w", ctrl.KeyFile, err)
	}

	return csr, key, nil
}

// csrJoinID is the id trustd gives a join request with this CSR.
func csrJoinID(csrPEM []byte) (string, error) {
	csr, err := pki.ParseCSR(csrPEM)
	if err != nil {
		return "", err
	}

	return trustd.JoinID(csr), nil
}

// remote gets one certificate signed by trustd on a control plane.
func (ctrl *APIController) remote(ctx context.Context, r controller.Runtime, log *zap.Logger, root *secrets.OSRootSpec, w want) (*cx509.PEMEncodedCertificateAndKey, error) {
	var err error

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

	var csr, key []byte

	if root.Token == "" {
		csr, key, err = ctrl.nodeKeyCSR(w)
	} else {
		csr, key, err = pki.NewCSR(w.leaf(0))
	}

	if err != nil {
		return nil, err
	}

	// Without machine.token the worker joins by approval (docs/join-approval.md): it sends the
	// CSR alone and says, on its console and in its JoinStatus, that it waits for an admin.
	var joinID string

	ctrl.client.Waiting = nil

	if root.Token == "" {
		if joinID, err = csrJoinID(csr); err != nil {
			return nil, err
		}

		log.Warn("no machine.token: joining by approval; ask an admin to run: talosctl join approve "+joinID, zap.String("join_id", joinID))

		ctrl.client.Waiting = func(msg string) { ctrl.joinStatus(ctx, r, log, joinID, "waiting", msg) }
	}

	signed, err := ctrl.client.Sign(ctx, csr)
	if err != nil {
		if joinID != "" && trustd.Permanent(err) {
			log.Error("join request refused: this node gets no certificate; its apid stays stopped", zap.String("join_id", joinID), zap.Error(err))
			ctrl.joinStatus(ctx, r, log, joinID, "denied", err.Error())
		}

		return nil, err
	}

	if joinID != "" {
		ctrl.joinStatus(ctx, r, log, joinID, "signed", "signed by "+signed.Endpoint)
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
