package apid

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"slices"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// FuzzRoute drives apid's routing policy (route, and direct behind it) with any client
// certificate roles and any request header block. Properties:
//   - a refusal has a message and forwards nothing;
//   - a call that goes on acts with exactly the certificate's roles (or, only for an
//     os:impersonator certificate, the roles it asserted), and those roles may call the
//     method: no header a client sends can add, remove or change a role;
//   - the only role headers sent on are the ones route decided; every other header is sent
//     on unchanged and in order, except node/nodes, which never reach machined;
//   - a call for machined names no other node, and the router, reading the headers the relay
//     sends on, decides the same destination the relay did.
//
// The input is the certificate's organizations (comma-separated) and the header block as
// lines "name=value" (pseudo-headers included, e.g. ":path=/machine.MachineService/Version").
func FuzzRoute(f *testing.F) {
	for _, seed := range [][2]string{
		{"os:reader", ":method=POST\n:path=" + mVersion},
		{"os:reader", ":path=" + mVersion + "\nnode=10.0.0.2"},
		{"os:operator", ":path=" + mVersion + "\nnodes=10.0.0.1, 10.0.0.2,,node1"},
		{"os:reader", ":path=" + mVersion + "\n" + mdRole + "=os:admin"},
		{"os:impersonator", ":path=" + mVersion + "\n" + mdRole + "=os:reader\n" + mdRole + "=os:admin"},
		{"os:admin", ":path=" + mEtcdRecover + "\nnodes=a\nnode=b"},
		{"os:reader", ":path=" + mCOSIList + "\nnode=node1"},
		{"os:admin,os:reader", ":path=/machine.MachineService/Reset\nnodes=\nnode=,x"},
	} {
		f.Add(seed[0], seed[1])
	}

	s := routeServer()

	f.Fuzz(func(t *testing.T, orgs, headerText string) {
		var header []hpack.HeaderField

		for line := range strings.SplitSeq(headerText, "\n") {
			name, value, _ := strings.Cut(line[min(1, len(line)):], "=") // a leading ':' is part of the name
			header = append(header, hpack.HeaderField{Name: line[:min(1, len(line))] + name, Value: value})
		}

		certRoles, _ := role.Parse(strings.Split(orgs, ","))
		state := &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Subject: pkix.Name{Organization: strings.Split(orgs, ",")}}}}}

		d := s.route(state, header)
		if d.Code != 0 {
			if d.Message == "" || d.Header != nil {
				t.Fatalf("refusal %v without a message or with headers sent on: %q %v", codes.Code(d.Code), d.Message, d.Header)
			}

			return
		}

		var method string

		var asserted, sentRoles []string

		for _, h := range header {
			switch h.Name {
			case ":path":
				method = h.Value
			case mdRole:
				asserted = append(asserted, h.Value)
			}
		}

		want := certRoles
		if len(asserted) > 0 {
			if !certRoles.Includes(role.Impersonator) {
				t.Fatalf("roles asserted by a certificate without %s were not refused", role.Impersonator)
			}

			want, _ = role.Parse(asserted)
		}

		// The headers sent on: the client's, minus its role headers (and node headers for
		// machined), in order, then the decided roles.
		var rest []hpack.HeaderField

		for _, h := range d.Header {
			if h.Name == mdRole {
				sentRoles = append(sentRoles, h.Value)
			} else {
				if len(sentRoles) > 0 {
					t.Fatalf("header %q after the role headers: %v", h.Name, d.Header)
				}

				rest = append(rest, h)
			}
		}

		if !slices.Equal(sentRoles, want.Strings()) {
			t.Fatalf("roles sent on %v, want %v (certificate %q)", sentRoles, want.Strings(), orgs)
		}

		if err := Authorize(method, want); err != nil {
			t.Fatalf("a call was sent on for roles that may not make it: %v", err)
		}

		expect := slices.DeleteFunc(slices.Clone(header), func(h hpack.HeaderField) bool {
			return h.Name == mdRole || (d.Backend == backendMachined && (h.Name == mdNode || h.Name == mdNodes))
		})
		if !slices.Equal(rest, expect) {
			t.Fatalf("headers changed on the way:\nsent %v\nwant %v", rest, expect)
		}

		// The router sees the headers as gRPC metadata and decides again.
		md := metadata.MD{}
		for _, h := range d.Header {
			if !strings.HasPrefix(h.Name, ":") {
				md.Append(h.Name, h.Value)
			}
		}

		if d.Backend == backendMachined {
			if list, _, _ := targets(md); list != nil {
				t.Fatalf("a call for machined still names nodes %v", list)
			}

			return
		}

		again, err := s.direct(method, routerRoles(metadata.NewIncomingContext(t.Context(), md)), md)
		if err != nil {
			t.Fatalf("the router refuses what the relay let through: %v", err)
		}

		relay, _ := s.direct(method, want, md)
		if again.mode != relay.mode || !slices.Equal(again.targets, relay.targets) {
			t.Fatalf("router and relay disagree: %v %v vs %v %v", again.mode, again.targets, relay.mode, relay.targets)
		}

		for _, n := range again.targets {
			if n == "" || strings.Contains(n, ",") || trimSpace(n) != n {
				t.Fatalf("target %q is not one node name", n)
			}
		}
	})
}
