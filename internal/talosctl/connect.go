package talosctl

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync/atomic"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/unixsock"
)

// session is an open connection to apid plus the nodes a command targets.
type session struct {
	c     *client.Client
	nodes []string
	// local: talking straight to a machined socket, which takes no node metadata.
	local bool
}

// ctx returns ctx carrying the "nodes" metadata: apid fans the call out to every node.
func (s *session) ctx(ctx context.Context) context.Context {
	if s.local {
		return ctx
	}

	return client.WithNodes(ctx, s.nodes...)
}

// nodeCtx returns ctx addressed to one node (apid proxies it one-to-one).
func (s *session) nodeCtx(ctx context.Context, node string) context.Context {
	if s.local {
		return ctx
	}

	return client.WithNode(ctx, node)
}

// single returns ctx addressed to the only target node, for calls that cannot be merged.
func (s *session) single(ctx context.Context, what string) (context.Context, error) {
	if s.local {
		return ctx, nil
	}

	if len(s.nodes) != 1 {
		return nil, fmt.Errorf("%s works against one node at a time, got %d: pass a single node with -n", what, len(s.nodes))
	}

	return client.WithNode(ctx, s.nodes[0]), nil
}

// connect opens a client from the selected talosconfig context. Endpoints come from -e or the
// context; with several endpoints the machinery client resolves them with its round-robin
// resolver, so calls are balanced and a down endpoint is skipped. Nodes come from -n, the
// context, or default to the first endpoint.
func (g *Global) connect(ctx context.Context) (*session, error) {
	if g.MachinedSocket != "" {
		return connectSocket(ctx, g.MachinedSocket)
	}

	cfg, path, err := loadConfig(g.Talosconfig, false)
	if err != nil {
		return nil, err
	}

	_, cctx, err := currentContext(cfg, g.Context, path)
	if err != nil {
		return nil, err
	}

	endpoints := g.Endpoints
	if len(endpoints) == 0 {
		endpoints = cctx.Endpoints
	}

	if len(endpoints) == 0 {
		return nil, fmt.Errorf("no endpoints in the current context of %s: set them with `talosctl config endpoint <address>...` or pass -e", path)
	}

	nodes := g.Nodes
	if len(nodes) == 0 {
		nodes = cctx.Nodes
	}

	if len(nodes) == 0 {
		nodes = []string{endpointHost(endpoints[0])}
	}

	opts := []client.OptionFunc{
		client.WithConfig(cfg),
		client.WithEndpoints(endpoints...),
		client.WithDefaultGRPCDialOptions(),
	}

	if g.Context != "" {
		opts = append(opts, client.WithContextName(g.Context))
	}

	if g.Cluster != "" {
		opts = append(opts, client.WithCluster(g.Cluster))
	}

	c, err := client.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("connecting to %v: %w", endpoints, err)
	}

	return &session{c: c, nodes: nodes}, nil
}

// connectSocket talks to machined's machine API socket directly, without TLS: the hidden
// --machined-socket flag, for tests and for debugging on the node itself.
func connectSocket(ctx context.Context, path string) (*session, error) {
	c, err := client.New(ctx,
		client.WithUnixSocket(path),
		client.WithGRPCDialOptions(grpc.WithContextDialer(unixsock.GRPCDialer)), // state folders can be deep
		client.WithGRPCDialOptions(grpc.WithTransportCredentials(insecure.NewCredentials())),
	)
	if err != nil {
		return nil, fmt.Errorf("connecting to machined socket %s: %w", path, err)
	}

	return &session{c: c, nodes: []string{"local"}, local: true}, nil
}

// withMaintenanceClient connects to one node's maintenance API: TLS without client certificate
// or server verification, since a node without a config has no PKI yet.
func withMaintenanceClient(ctx context.Context, node string, fn func(context.Context, *client.Client) error) error {
	return withPinnedMaintenanceClient(ctx, node, nil, fn)
}

// withPinnedMaintenanceClient is withMaintenanceClient that, given fingerprints, accepts only a
// server certificate whose SPKI fingerprint is among them (apply-config --cert-fingerprint).
func withPinnedMaintenanceClient(ctx context.Context, node string, fingerprints []x509.Fingerprint, fn func(context.Context, *client.Client) error) error {
	tlsConfig := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // maintenance mode has no PKI yet; pinning below when asked

	if len(fingerprints) > 0 {
		// VerifyConnection, unlike VerifyPeerCertificate, runs on resumed sessions too.
		tlsConfig.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("the node presented no certificate")
			}

			got, err := x509.SPKIFingerprintFromDER(cs.PeerCertificates[0].Raw)
			if err != nil {
				return fmt.Errorf("reading the node's certificate: %w", err)
			}

			for _, fp := range fingerprints {
				if fp.Equal(got) {
					return nil
				}
			}

			return fmt.Errorf("the node's certificate fingerprint %s is not one of --cert-fingerprint", got)
		}
	}

	var asked certificateAsked

	tlsConfig.GetClientCertificate = asked.getClientCertificate

	c, err := client.New(ctx,
		client.WithTLSConfig(tlsConfig),
		client.WithEndpoints(node),
		client.WithDefaultGRPCDialOptions(),
		client.WithGRPCDialOptions(grpc.WithChainUnaryInterceptor(asked.unary), grpc.WithChainStreamInterceptor(asked.stream)),
	)
	if err != nil {
		return fmt.Errorf("connecting to %s in maintenance mode: %w", node, err)
	}

	defer c.Close()

	return fn(ctx, c)
}

// certificateAsked records that the node asked a maintenance connection for a client
// certificate: only a node that has its config does, and it then refuses the connection (a
// reset or a broken pipe, which alone would not say why). Its failures say so.
type certificateAsked struct{ atomic.Bool }

func (a *certificateAsked) getClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	a.Store(true)

	return &tls.Certificate{}, nil // none: maintenance mode has no client certificate
}

func (a *certificateAsked) explain(err error) error {
	if s, ok := status.FromError(err); ok && s.Code() == codes.Unavailable && a.Load() {
		return status.Errorf(codes.FailedPrecondition, "%s: the node asked for a client certificate: it has its config and is out of maintenance mode, "+
			"so leave out --insecure (-i) and use its talosconfig", s.Message())
	}

	return err
}

func (a *certificateAsked) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return a.explain(invoker(ctx, method, req, reply, cc, opts...))
}

func (a *certificateAsked) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, a.explain(err)
	}

	return explainedStream{cs, a}, nil
}

type explainedStream struct {
	grpc.ClientStream
	asked *certificateAsked
}

func (s explainedStream) RecvMsg(m any) error { return s.asked.explain(s.ClientStream.RecvMsg(m)) }

// run connects, runs fn and closes the connection.
func (g *Global) run(cmd *cobra.Command, fn func(ctx context.Context, s *session) error) error {
	s, err := g.connect(cmd.Context())
	if err != nil {
		return err
	}

	defer s.c.Close()

	return fn(cmd.Context(), s)
}

// endpointHost strips a URL scheme and the default apid port from an endpoint, giving the
// node name apid understands.
func endpointHost(endpoint string) string {
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		endpoint = u.Host
	}

	host, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		return endpoint
	}

	if port == strconv.Itoa(constants.ApidPort) {
		return host
	}

	return endpoint
}

// peerNode is a grpc.Peer call option and a function giving the address of the answering
// endpoint, used as the NODE of replies that carry no metadata.
func peerNode() (grpc.CallOption, func() string) {
	var p peer.Peer

	return grpc.Peer(&p), func() string {
		if p.Addr == nil {
			return ""
		}

		return client.AddrFromPeer(&p)
	}
}

// nodeErrors reports the per-node errors of a multi-node reply on w, one line per node, and
// returns errSilent when there were any, so the command exits non-zero after rendering what
// the other nodes returned.
func nodeErrors(w io.Writer, err error) error {
	if err == nil {
		return nil
	}

	var errs []error

	if m, ok := err.(interface{ WrappedErrors() []error }); ok {
		errs = m.WrappedErrors()
	} else {
		errs = []error{err}
	}

	for _, e := range errs {
		fmt.Fprintf(w, "error: %v%s\n", e, hint(e))
	}

	return errSilent
}

// hint suggests what to do next for the common gRPC failures.
func hint(err error) string {
	switch status.Code(err) {
	case codes.Unavailable:
		return " (is the node up and the endpoint right? check `talosctl config info` and -e/-n)"
	case codes.PermissionDenied:
		return " (the role in your talosconfig does not allow this call: use a talosconfig with a stronger role, e.g. os:admin)"
	case codes.Unauthenticated:
		return " (the node rejected the client certificate: use the talosconfig generated for this cluster)"
	case codes.Unimplemented:
		return " (the node does not serve this API)"
	case codes.DeadlineExceeded:
		return " (the node did not answer in time: retry, or raise --timeout where the command has one)"
	default:
		return ""
	}
}
