package apid

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/constants"
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

	list, many, err := targets(md)
	if err != nil {
		return d, err
	}

	if err = s.checkTargets(list); err != nil {
		return d, err
	}

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

// maxNodes caps the nodes one call may name: a fan-out to more is refused before any work.
const maxNodes = 256

// targets reads the routing metadata: nil for a local call; one target with many=false for
// "node"; the distinct nodes, in order, for "nodes" (repeatable and comma-separated), refused
// past maxNodes.
func targets(md metadata.MD) (list []string, many bool, err error) {
	if nodes := md.Get(mdNodes); len(nodes) > 0 {
		seen := map[string]bool{}

		for _, v := range nodes {
			for _, n := range splitComma(v) {
				if seen[n] {
					continue
				}

				if len(seen) == maxNodes {
					return nil, false, status.Errorf(codes.InvalidArgument, "more than %d nodes in one call: name at most %d (-n) and split the rest over more calls", maxNodes, maxNodes)
				}

				seen[n] = true
				list = append(list, n)
			}
		}

		return list, len(list) > 0, nil
	}

	if node := md.Get(mdNode); len(node) > 0 {
		if n := splitComma(node[0]); len(n) > 0 {
			return n[:1], false, nil
		}
	}

	return nil, false, nil
}

// checkTargets refuses targets apid must not dial: anything but a node's address or name, with
// no port or apid's own port (so no caller scans ports or reaches other services through apid),
// and any other node at all on a node without a client certificate (a worker).
func (s *Server) checkTargets(list []string) error {
	for _, t := range list {
		host, port, err := net.SplitHostPort(t)
		if err != nil {
			host, port = strings.TrimSuffix(strings.TrimPrefix(t, "["), "]"), ""
		}

		if port != "" && port != strconv.Itoa(s.remotePort()) {
			return status.Errorf(codes.InvalidArgument, "node %q: apid forwards only to other nodes' apid port %d; name the node by its address or hostname alone", t, s.remotePort())
		}

		if !validHost(host) {
			return status.Errorf(codes.InvalidArgument, "node %q is not an IP address or a hostname", t)
		}

		if !s.isLocal(t) && (s.canForward == nil || !s.canForward()) {
			return status.Errorf(codes.PermissionDenied, "node %q: this node is a worker and forwards calls to no other node; use a control plane as the endpoint (talosctl -e <control plane> -n %s)", t, host)
		}
	}

	return nil
}

func (s *Server) remotePort() int {
	if s.opts.RemotePort == 0 {
		return constants.ApidPort
	}

	return s.opts.RemotePort
}

func validHostByte(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

// validHost reports whether h is an IP address or a DNS name (letters, digits, '-', '_', '.').
func validHost(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}

	if h == "" || len(h) > 253 {
		return false
	}

	for _, c := range h {
		if !validHostByte(c) {
			return false
		}
	}

	return true
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
