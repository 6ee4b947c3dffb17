package trustd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	securityapi "github.com/siderolabs/talos/pkg/machinery/api/security"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// Client asks trustd on control planes to sign a CSR: it tries the endpoints in turn (starting
// from the last one that answered), and retries rounds with exponential backoff until one signs,
// a control plane refuses the request for good (wrong token, refused CSR), or ctx ends.
type Client struct {
	Endpoints   func() []string // host or host:port; the port defaults to 50001
	Token       string          // empty: join by approval (docs/join-approval.md)
	Roots       *x509.CertPool  // the OS CA: trustd's certificate is verified against it
	CallTimeout time.Duration   // one attempt at one endpoint; 10s when zero
	MinBackoff  time.Duration   // 250ms when zero
	MaxBackoff  time.Duration   // 15s when zero
	Log         *zap.Logger
	// Waiting, when set, is called while the control planes answer that the request waits for
	// an admin's approval, with their message (it names the request's id).
	Waiting func(msg string)
	// LocalAddress, when set, is the source address of the calls: the node's own address, so
	// trustd sees (and rate-limits) each node as itself.
	LocalAddress string

	last string // endpoint that answered last
}

// Signed is trustd's answer.
type Signed struct {
	Crt      []byte // PEM certificate
	CA       []byte // PEM CA bundle
	Endpoint string // who signed it
}

// IsWaiting reports whether err says the request waits for an admin's approval.
func IsWaiting(err error) bool {
	return status.Code(err) == codes.FailedPrecondition
}

// Permanent reports whether err is a refusal that retrying will not change.
func Permanent(err error) bool {
	switch status.Code(err) {
	case codes.PermissionDenied, codes.InvalidArgument, codes.Unauthenticated:
		return true
	}

	return false
}

type tokenCreds string

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	if t == "" {
		return nil, nil // join by approval: the CSR alone
	}

	return map[string]string{TokenMetadataKey: string(t)}, nil
}

func (tokenCreds) RequireTransportSecurity() bool { return true }

// withPort adds trustd's port to an endpoint without one.
func withPort(ep string) string {
	if _, _, err := net.SplitHostPort(ep); err == nil {
		return ep
	}

	return net.JoinHostPort(ep, strconv.Itoa(Port))
}

// Sign sends the CSR until it is signed.
func (c *Client) Sign(ctx context.Context, csrPEM []byte) (*Signed, error) {
	backoff := c.MinBackoff
	if backoff <= 0 {
		backoff = 250 * time.Millisecond
	}

	maxBackoff := c.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = 15 * time.Second
	}

	log := c.Log
	if log == nil {
		log = zap.NewNop()
	}

	for attempt := 1; ; attempt++ {
		var lastErr error

		eps := c.Endpoints()
		if len(eps) == 0 {
			lastErr = errors.New("no trustd endpoints known")
		}

		for _, ep := range c.order(eps) {
			signed, err := c.signAt(ctx, ep, csrPEM)
			if err == nil {
				c.last = ep

				return signed, nil
			}

			if Permanent(err) {
				return nil, fmt.Errorf("trustd %s refused the request: %w", ep, err)
			}

			lastErr = fmt.Errorf("trustd %s: %w", ep, err)

			if IsWaiting(err) {
				log.Warn("join request waiting for approval", zap.String("endpoint", ep), zap.String("status", status.Convert(err).Message()))

				if c.Waiting != nil {
					c.Waiting(status.Convert(err).Message())
				}

				continue
			}

			log.Info("trustd endpoint failed, trying the next", zap.String("endpoint", ep), zap.Error(err))
		}

		log.Info("no trustd endpoint signed the request, retrying", zap.Int("attempt", attempt), zap.Duration("backoff", backoff), zap.Error(lastErr))

		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()

			return nil, fmt.Errorf("joining: %w (last error: %w)", ctx.Err(), lastErr)
		case <-t.C:
		}

		backoff = min(backoff*2, maxBackoff)
	}
}

// order lists the endpoints with ports, starting from the one that answered last.
func (c *Client) order(eps []string) []string {
	out := make([]string, 0, len(eps))
	for _, ep := range eps {
		out = append(out, withPort(ep))
	}

	for i, ep := range out {
		if ep == c.last {
			return append(out[i:], out[:i]...)
		}
	}

	return out
}

func (c *Client) signAt(ctx context.Context, endpoint string, csrPEM []byte) (*Signed, error) {
	timeout := c.CallTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return nil, err
	}

	dialer := &net.Dialer{}
	if c.LocalAddress != "" {
		if ip := net.ParseIP(c.LocalAddress); ip != nil {
			dialer.LocalAddr = &net.TCPAddr{IP: ip}
		}
	}

	conn, err := grpc.NewClient(endpoint,
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dialer.DialContext(ctx, "tcp", addr)
		}),
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			MinVersion: tls.VersionTLS13,
			RootCAs:    c.Roots,
			ServerName: host,
		})),
		grpc.WithPerRPCCredentials(tokenCreds(c.Token)),
	)
	if err != nil {
		return nil, err
	}
	defer conn.Close()

	resp, err := securityapi.NewSecurityServiceClient(conn).Certificate(ctx, &securityapi.CertificateRequest{Csr: csrPEM}, grpc.WaitForReady(false))
	if err != nil {
		return nil, err
	}

	if len(resp.GetCrt()) == 0 {
		return nil, errors.New("empty certificate in reply")
	}

	return &Signed{Crt: resp.GetCrt(), CA: resp.GetCa(), Endpoint: endpoint}, nil
}
