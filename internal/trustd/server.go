package trustd

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"net"
	"time"

	securityapi "github.com/siderolabs/talos/pkg/machinery/api/security"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/connlimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// TokenMetadataKey is the request metadata key carrying the cluster token (as Talos's clients
// send it).
const TokenMetadataKey = "token"

// Server implements SecurityService: it signs node certificates for callers holding the token
// and, when Joins is set, for callers without one whose key an admin approved
// (docs/join-approval.md).
type Server struct {
	securityapi.UnimplementedSecurityServiceServer

	Certs    *Store
	Joins    *Joins        // join requests; nil: a call without a token is refused
	Lifetime time.Duration // of signed certificates; DefaultLifetime when zero
	Limiter  *Limiter
	Log      *zap.Logger
	Now      func() time.Time // for tests
}

// maxMessage bounds trustd's messages: a CSR, a certificate and its CA bundle.
const maxMessage = 1 << 20

// maxConnAge closes a connection this old: trustd's calls are unary and quick, so only a
// client feeding its request a byte at a time holds one that long.
const maxConnAge = 5 * time.Minute

// NewGRPCServer serves s over TLS from its store, with the limits of an unauthenticated
// listener (package connlimit); serve it on Listen's listener.
func NewGRPCServer(s *Server) *grpc.Server {
	srv := grpc.NewServer(append(connlimit.ServerOptions(maxMessage, maxConnAge),
		grpc.Creds(credentials.NewTLS(s.Certs.ServerTLS())),
	)...)
	securityapi.RegisterSecurityServiceServer(srv, s)

	return srv
}

// authorize checks the caller's cluster token under the per-peer limit of failed attempts. A
// refusal is logged without the token and answered PermissionDenied (ResourceExhausted once the
// peer is over its limit).
func (s *Server) authorize(ctx context.Context, what string) error {
	host := peerHost(ctx)
	log := s.Log.With(zap.String("peer", host))

	if s.Limiter != nil && !s.Limiter.Allowed(host) {
		log.Warn(what + " refused: too many failed attempts")

		return status.Error(codes.ResourceExhausted, "too many failed attempts, try again later")
	}

	want := s.Certs.Current().Token
	if len(want) == 0 {
		// A control plane without machine.token accepts no token at all: a leaked one buys nothing.
		if s.Limiter != nil {
			s.Limiter.Failed(host)
		}

		log.Warn(what + " refused: token joins are disabled (no machine.token on this control plane)")

		return status.Error(codes.PermissionDenied, "token joins are disabled on this control plane: join by approval (send no token) instead")
	}

	if err := checkToken(ctx, want); err != nil {
		if s.Limiter != nil {
			s.Limiter.Failed(host)
		}

		log.Warn(what+" refused", zap.String("reason", err.Error()))

		return status.Error(codes.PermissionDenied, "invalid token")
	}

	return nil
}

// Listen listens on addr, at most connlimit.MaxPerSource connections from one address.
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}

	return connlimit.PerSource(l, connlimit.MaxPerSource), nil
}

func peerHost(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "unknown"
	}

	if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
		return host
	}

	return p.Addr.String()
}

// hasToken reports whether the call carries a token at all.
func hasToken(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	got := md.Get(TokenMetadataKey)

	return len(got) > 0 && got[0] != ""
}

// checkToken compares the request's token with ours in constant time.
func checkToken(ctx context.Context, want []byte) error {
	md, _ := metadata.FromIncomingContext(ctx)

	got := md.Get(TokenMetadataKey)
	if len(got) != 1 || got[0] == "" {
		return errors.New("no token")
	}

	// Hash both sides first so the comparison does not depend on the lengths either.
	g, w := sha256.Sum256([]byte(got[0])), sha256.Sum256(want)
	if subtle.ConstantTimeCompare(g[:], w[:]) != 1 {
		return errors.New("wrong token")
	}

	return nil
}

// Certificate implements SecurityService.Certificate.
func (s *Server) Certificate(ctx context.Context, req *securityapi.CertificateRequest) (*securityapi.CertificateResponse, error) {
	if s.Joins != nil && !hasToken(ctx) {
		return s.approvalJoin(ctx, req)
	}

	if err := s.authorize(ctx, "certificate request"); err != nil {
		return nil, err
	}

	csr, err := s.checkCSR(ctx, req)
	if err != nil {
		return nil, err
	}

	return s.sign(ctx, csr)
}

// approvalJoin answers a CSR without a token by the decision on its key: signed once approved,
// refused once denied, recorded and answered FailedPrecondition until then.
func (s *Server) approvalJoin(ctx context.Context, req *securityapi.CertificateRequest) (*securityapi.CertificateResponse, error) {
	host := peerHost(ctx)
	log := s.Log.With(zap.String("peer", host))

	if s.Limiter != nil && !s.Limiter.Allowed(host) {
		log.Warn("join request refused: too many failed attempts")

		return nil, status.Error(codes.ResourceExhausted, "too many failed attempts, try again later")
	}

	csr, err := s.checkCSR(ctx, req)
	if err != nil {
		return nil, err
	}

	id := JoinID(csr)
	log = log.With(zap.String("join_id", id))

	state, isNew, err := s.Joins.Seen(id, host, CSRNames(csr), s.now())

	switch {
	case errors.Is(err, ErrTooManyJoins):
		if s.Limiter != nil {
			s.Limiter.Failed(host)
		}

		log.Warn("join request refused: the request folder is full")

		return nil, status.Error(codes.ResourceExhausted, err.Error())
	case err != nil:
		log.Error("recording join request", zap.Error(err))

		return nil, status.Error(codes.Internal, "recording the join request failed")
	}

	switch state {
	case JoinApproved:
		return s.sign(ctx, csr)
	case JoinDenied:
		log.Warn("join request refused: denied by an admin")

		return nil, status.Errorf(codes.PermissionDenied, "join request %s denied by an admin", id)
	}

	// A new key costs one of the peer's failed attempts, so one address cannot fill the folder
	// quickly.
	if isNew {
		if s.Limiter != nil {
			s.Limiter.Failed(host)
		}

		log.Info("new join request waiting for approval", zap.Strings("names", CSRNames(csr)))
	}

	return nil, status.Errorf(codes.FailedPrecondition, "%s %s: ask an admin to run talosctl join approve %s", WaitingForApproval, id, id)
}

// WaitingForApproval starts the message of a join request that waits for an admin.
const WaitingForApproval = "waiting for approval of join request"

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}

	return time.Now()
}

// checkCSR checks the CSR against the signing policy; a refused one counts as a failed attempt.
func (s *Server) checkCSR(ctx context.Context, req *securityapi.CertificateRequest) (*x509.CertificateRequest, error) {
	csr, err := CheckCSR(req.GetCsr())
	if err != nil {
		host := peerHost(ctx)
		if s.Limiter != nil {
			s.Limiter.Failed(host)
		}

		s.Log.Warn("certificate request refused", zap.String("peer", host), zap.Error(err))

		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	return csr, nil
}

// sign signs a checked CSR: a server certificate only, as for every caller.
func (s *Server) sign(ctx context.Context, csr *x509.CertificateRequest) (*securityapi.CertificateResponse, error) {
	log := s.Log.With(zap.String("peer", peerHost(ctx)))
	b := s.Certs.Current()

	lifetime := s.Lifetime
	if lifetime <= 0 {
		lifetime = DefaultLifetime
	}

	crt, err := Sign(b.CA, csr, lifetime, s.now())
	if err != nil {
		log.Error("signing failed", zap.Error(err))

		return nil, status.Error(codes.Internal, "signing failed")
	}

	pub := sha256.Sum256(csr.RawSubjectPublicKeyInfo)
	log.Info("signed certificate",
		zap.String("cn", csr.Subject.CommonName),
		zap.Int("ips", len(csr.IPAddresses)), zap.Int("dns", len(csr.DNSNames)),
		zap.String("key_sha256", hex.EncodeToString(pub[:8])), zap.Duration("lifetime", lifetime))

	return &securityapi.CertificateResponse{Ca: b.CABundle, Crt: crt}, nil
}
