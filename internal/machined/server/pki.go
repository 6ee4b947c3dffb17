package server

import (
	"context"
	"crypto/x509"
	"time"

	cx509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/pki"
)

// DefaultClientCertTTL is the lifetime of a generated client certificate when the request names
// none (talosctl's default for `config new`).
const DefaultClientCertTTL = 87600 * time.Hour

// GenerateClientConfiguration issues a client certificate for the requested roles from the OS CA
// and returns it with a talosconfig. Only nodes holding the CA key (control planes) can; apid
// lets only os:admin call it.
func (s *Machine) GenerateClientConfiguration(ctx context.Context, req *machine.GenerateClientConfigurationRequest) (*machine.GenerateClientConfigurationResponse, error) {
	cfg := s.R.Config()
	if cfg == nil || cfg.Machine() == nil || cfg.Machine().Security() == nil {
		return nil, status.Error(codes.FailedPrecondition, "the node has no config")
	}

	sec := cfg.Machine().Security()

	ca := sec.IssuingCA()
	if ca == nil || len(ca.Crt) == 0 || len(ca.Key) == 0 {
		return nil, status.Error(codes.FailedPrecondition, "this node does not hold the OS CA key: ask a control plane node")
	}

	roles, unknown := role.Parse(req.GetRoles())
	if len(unknown) > 0 {
		return nil, status.Errorf(codes.InvalidArgument, "unknown roles %q (known: %v)", unknown, role.All.Strings())
	}

	if len(roles.Strings()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no roles requested")
	}

	ttl := DefaultClientCertTTL
	if req.GetCrtTtl() != nil {
		if err := req.GetCrtTtl().CheckValid(); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "crt_ttl: %v", err)
		}

		ttl = req.GetCrtTtl().AsDuration()
	}

	if ttl <= 0 {
		return nil, status.Error(codes.InvalidArgument, "crt_ttl must be positive")
	}

	crt, key, err := issueClient(ca.Crt, ca.Key, "talosctl", roles.Strings(), ttl, time.Now())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "issuing client certificate from machine.ca: %v", err)
	}

	bundle := caBundle(ca.Crt, sec.AcceptedCAs())

	contextName := "talos"
	if cfg.Cluster() != nil && cfg.Cluster().Name() != "" {
		contextName = cfg.Cluster().Name()
	}

	var endpoints []string
	if s.R.Address != "" {
		endpoints = []string{s.R.Address}
	}

	talosconfig, err := clientconfig.NewConfig(contextName, endpoints, bundle, &cx509.PEMEncodedCertificateAndKey{Crt: crt, Key: key}).Bytes()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "encoding talosconfig: %v", err)
	}

	var md *common.Metadata
	if s.R.State != nil {
		md = s.metadata(ctx)
	}

	return &machine.GenerateClientConfigurationResponse{Messages: []*machine.GenerateClientConfiguration{{
		Metadata:    md,
		Ca:          bundle,
		Crt:         crt,
		Key:         key,
		Talosconfig: talosconfig,
	}}}, nil
}

// caBundle is the issuing CA followed by the accepted ones (without repeats), one PEM block
// after another, each ending in a newline.
func caBundle(issuing []byte, accepted []*cx509.PEMEncodedCertificate) []byte {
	pems := [][]byte{issuing}

	for _, acc := range accepted {
		if acc != nil {
			pems = append(pems, acc.Crt)
		}
	}

	return pki.Bundle(pems...)
}

// issueClient signs a client certificate for cn whose organizations are orgs (Talos roles, or
// Kubernetes groups), capped at the CA's own expiry.
func issueClient(caPEM, caKeyPEM []byte, cn string, orgs []string, ttl time.Duration, now time.Time) (crtPEM, keyPEM []byte, err error) {
	ca, err := pki.ParseCA(caPEM, caKeyPEM)
	if err != nil {
		return nil, nil, err
	}

	pair, err := ca.Issue(pki.Leaf{
		CommonName:    cn,
		Organizations: orgs,
		ExtKeyUsages:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		Lifetime:      ttl,
	}, now)
	if err != nil {
		return nil, nil, err
	}

	return pair.Crt, pair.Key, nil
}
