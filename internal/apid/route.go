package apid

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"sync"
	"syscall"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/apid/h2relay"
)

// The relay's backends: a call for this node goes frame by frame to machined; everything else
// (other nodes, fan-out, reads that need the request inspected) goes to the in-process router,
// a gRPC server that trusts the roles the relay puts in the metadata.
const (
	backendMachined = iota
	backendRouter
)

// route authorizes a new call by the client certificate's roles and picks its backend. It is
// the only place a caller's roles are decided: the metadata it sends on carries them.
func (s *Server) route(state *tls.ConnectionState, header []hpack.HeaderField) h2relay.Decision {
	var (
		method   string
		asserted []string
		md       metadata.MD // routing keys only; nil for most calls
	)

	for _, f := range header {
		switch f.Name {
		case ":path":
			method = f.Value
		case mdRole:
			asserted = append(asserted, f.Value)
		case mdNode, mdNodes:
			if md == nil {
				md = metadata.MD{}
			}

			md[f.Name] = append(md[f.Name], f.Value)
		}
	}

	roles, err := effectiveRoles(state, asserted)
	if err == nil {
		err = Authorize(method, roles)
	}

	info := lookupMethod(method)
	if err == nil && !info.known {
		err = status.Errorf(codes.Unimplemented, "method %s is not served by this node", method)
	}

	if err != nil {
		st := status.Convert(err)

		return h2relay.Decision{Code: int(st.Code()), Message: st.Message()}
	}

	list, many := targets(md)
	local := list == nil || (len(list) == 1 && s.isLocal(list[0]) && (!many || !info.fanOut || info.clientStreams))

	backend := backendRouter
	if local && (!cosiReads[method] || roles.Includes(role.Admin)) {
		backend = backendMachined
	}

	out := make([]hpack.HeaderField, 0, len(header)+4)

	for _, f := range header {
		switch f.Name {
		case mdRole:
			continue
		case mdNode, mdNodes:
			if backend == backendMachined {
				continue
			}
		}

		out = append(out, f)
	}

	for _, r := range roles.Strings() {
		out = append(out, hpack.HeaderField{Name: mdRole, Value: r})
	}

	return h2relay.Decision{Backend: backend, Header: out}
}

// effectiveRoles are the roles a call acts with: those of the client certificate, or, for a
// peer holding os:impersonator that asserts roles in metadata, the asserted roles. Asserting
// roles without os:impersonator is refused.
func effectiveRoles(state *tls.ConnectionState, asserted []string) (role.Set, error) {
	if state == nil || len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return role.Zero, status.Error(codes.Unauthenticated, "no verified client certificate")
	}

	certRoles, _ := role.Parse(state.VerifiedChains[0][0].Subject.Organization)

	if len(asserted) == 0 {
		return certRoles, nil
	}

	if !certRoles.Includes(role.Impersonator) {
		return role.Zero, status.Errorf(codes.PermissionDenied, "asserting roles in %q metadata requires role %s", mdRole, role.Impersonator)
	}

	roles, _ := role.Parse(asserted)

	return roles, nil
}

// routerRoles are the roles the relay decided for a call that reached the router.
func routerRoles(ctx context.Context) role.Set {
	md, _ := metadata.FromIncomingContext(ctx)
	roles, _ := role.Parse(md.Get(mdRole))

	return roles
}

// pipeListener hands the router connections made in process (socket pairs): nothing outside
// apid can reach it, which is why the router may trust the roles in the metadata.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })

	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.UnixAddr{Name: "apid-router", Net: "unix"} }

// Dial makes a socket pair and hands one end to Accept.
func (l *pipeListener) Dial(ctx context.Context) (net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}

	ends := make([]net.Conn, 2)

	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "apid-router")
		ends[i], err = net.FileConn(f)
		f.Close()

		if err != nil {
			for _, c := range ends[:i] {
				c.Close()
			}

			if i == 0 {
				syscall.Close(fds[1])
			}

			return nil, err
		}
	}

	select {
	case l.conns <- ends[1]:
		return ends[0], nil
	case <-l.done:
	case <-ctx.Done():
	}

	ends[0].Close()
	ends[1].Close()

	return nil, net.ErrClosed
}
