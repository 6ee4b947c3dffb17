package apid

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/apid/h2relay"
)

// mode is how a call is carried to its destination.
type mode int

const (
	// toMachined: this node's machined, one to one, replies unchanged.
	toMachined mode = iota
	// toNode: one other node's apid, one to one, replies unchanged.
	toNode
	// toNodes: every target in parallel; replies merged, each message stamped with its node.
	toNodes
)

// destination is where a call goes, as decided by direct.
type destination struct {
	mode    mode
	targets []string // toNode: the one node; toNodes: every node, this one included if named
	method  methodInfo
	// inspect: a COSI read by a caller without os:admin. The resource type it names is only in
	// the request, so the router reads it before anything is forwarded (AuthorizeResource).
	inspect bool
}

// direct is apid's routing policy, all of it: from a call's method, the roles it acts with and
// its routing metadata ("node", "nodes"), where it goes, or the error that answers it. Both
// the relay (route) and the router (handle) ask it; nothing else decides routing.
func (s *Server) direct(method string, roles role.Set, md metadata.MD) (destination, error) {
	if err := Authorize(method, roles); err != nil {
		return destination{}, err
	}

	d := destination{method: lookupMethod(method), inspect: cosiReads[method] && !roles.Includes(role.Admin)}
	if !d.method.known {
		return d, status.Errorf(codes.Unimplemented, "method %s is not served by this node", method)
	}

	list, many := targets(md)

	switch {
	case list == nil:
		d.mode = toMachined
	case !many || (len(list) == 1 && (!d.method.fanOut || d.method.clientStreams)):
		// One node: "node", or "nodes" with one entry for a method whose replies need no
		// stamping or cannot be merged anyway. Its replies pass unchanged.
		d.mode, d.targets = toNode, list[:1]
		if s.isLocal(list[0]) {
			d.mode, d.targets = toMachined, nil
		}
	case d.method.clientStreams:
		return d, status.Errorf(codes.InvalidArgument, "method %s takes a client stream and is proxied to one node only, got %d nodes", method, len(list))
	case !d.method.fanOut:
		return d, status.Errorf(codes.InvalidArgument, "method %s replies cannot be merged across nodes: call one node at a time", method)
	default:
		d.mode, d.targets = toNodes, list
	}

	return d, nil
}

// The relay's backends: a call for this node goes frame by frame to machined; everything else
// (other nodes, fan-out, reads that need the request inspected) goes to the in-process router,
// a gRPC server that trusts the roles the relay puts in the metadata.
const (
	backendMachined = iota
	backendRouter
)

// route is the relay's side of a new call: it decides the caller's roles from the client
// certificate (the only place they are decided: the metadata it sends on carries them), asks
// direct where the call goes, and picks the relay's backend from that.
func (s *Server) route(state *tls.ConnectionState, header []hpack.HeaderField) h2relay.Decision {
	var (
		method   string
		asserted []string
		md       metadata.MD // routing keys only; nil for most calls
	)

	for _, f := range header {
		// HTTP/2 header names are lowercase (RFC 9113, 8.2.1): a request with another name is
		// malformed, and gRPC on the other side would read "Node" as node, past the checks here.
		if strings.ToLower(f.Name) != f.Name {
			return h2relay.Decision{Code: int(codes.InvalidArgument),
				Message: fmt.Sprintf("malformed request: header name %q is not lowercase, as HTTP/2 requires", f.Name)}
		}

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

	var d destination
	if err == nil {
		d, err = s.direct(method, roles, md)
	}

	if err != nil {
		st := status.Convert(err)

		return h2relay.Decision{Code: int(st.Code()), Message: st.Message()}
	}

	backend := backendRouter
	if d.mode == toMachined && !d.inspect {
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

// targets reads the routing metadata: nil for a local call; one target with many=false for
// "node"; the list for "nodes" (repeatable and comma-separated).
func targets(md metadata.MD) (list []string, many bool) {
	if nodes := md.Get(mdNodes); len(nodes) > 0 {
		for _, v := range nodes {
			for _, n := range splitComma(v) {
				if !slices.Contains(list, n) {
					list = append(list, n)
				}
			}
		}

		return list, len(list) > 0
	}

	if node := md.Get(mdNode); len(node) > 0 {
		if n := splitComma(node[0]); len(n) > 0 {
			return n[:1], false
		}
	}

	return nil, false
}

func splitComma(s string) []string {
	var res []string

	start := 0

	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if v := trimSpace(s[start:i]); v != "" {
				res = append(res, v)
			}

			start = i + 1
		}
	}

	return res
}

func trimSpace(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}

	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}

	return s
}

// isLocal reports whether target names this node.
func (s *Server) isLocal(target string) bool {
	host := target
	if h, _, err := net.SplitHostPort(target); err == nil {
		host = h
	}

	return slices.Contains(s.opts.LocalAddresses, host) || slices.Contains(s.opts.LocalAddresses, target)
}
