package apid

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	mVersion     = "/machine.MachineService/Version"     // unary, replies merge
	mLogs        = "/machine.MachineService/Logs"        // server stream, messages merge
	mEtcdRecover = "/machine.MachineService/EtcdRecover" // client stream
	mReboot      = "/machine.MachineService/Reboot"      // needs os:operator
	mCOSIList    = "/cosi.resource.State/List"           // server stream, replies do not merge
)

// routeServer is a Server that knows only its own addresses and that it holds a client
// certificate (a control plane): enough for the routing policy.
func routeServer() *Server {
	return &Server{opts: Options{LocalAddresses: []string{"10.0.0.1", "node1"}}, canForward: func() bool { return true }}
}

// workerServer is routeServer without a client certificate: a worker.
func workerServer() *Server {
	s := routeServer()
	s.canForward = func() bool { return false }

	return s
}

// TestWorkerForwardsNowhere: a worker's apid serves calls for itself and refuses every other
// node, naming the fix, before anything is dialed.
func TestWorkerForwardsNowhere(t *testing.T) {
	admin := role.MakeSet(role.Admin)

	for _, m := range []metadata.MD{md("node", "10.0.0.2"), md("nodes", "10.0.0.1,10.0.0.2"), md("nodes", "node1", "nodes", "cp1:50000")} {
		_, err := workerServer().direct(mVersion, admin, m)
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "use a control plane as the endpoint") {
			t.Errorf("%v through a worker: got %v, want PermissionDenied naming the fix", m, err)
		}
	}

	for _, m := range []metadata.MD{nil, md("node", "10.0.0.1"), md("nodes", "10.0.0.1,node1"), md("node", "10.0.0.1:50000")} {
		if _, err := workerServer().direct(mVersion, admin, m); err != nil {
			t.Errorf("%v (this node) through a worker: %v", m, err)
		}
	}
}

// TestTargetsBounded: a node list is capped and deduplicated; a target is a node address or
// name on apid's port, nothing else.
func TestTargetsBounded(t *testing.T) {
	reader := role.MakeSet(role.Reader)

	many := make([]string, 0, 10000)
	for i := range 10000 {
		many = append(many, fmt.Sprintf("10.1.%d.%d", i/250, i%250+1))
	}

	dup := make([]string, 0, 5000)
	for i := range 5000 {
		dup = append(dup, fmt.Sprintf("10.2.0.%d", i%3+1))
	}

	for _, tc := range []struct {
		name    string
		md      metadata.MD
		code    codes.Code
		msg     string
		targets int
	}{
		{name: "10,000 nodes", md: md("nodes", strings.Join(many, ",")), code: codes.InvalidArgument, msg: "more than 256 nodes"},
		{name: "257 nodes over repeated keys", md: md(repeatNodes(many[:257])...), code: codes.InvalidArgument, msg: "more than 256 nodes"},
		{name: "256 nodes", md: md("nodes", strings.Join(many[:256], ",")), targets: 256},
		{name: "5,000 entries naming 3 nodes", md: md("nodes", strings.Join(dup, ",")), targets: 3},
		{name: "another port", md: md("node", "10.0.0.2:22"), code: codes.InvalidArgument, msg: "only to other nodes' apid port 50000"},
		{name: "another port in a list", md: md("nodes", "10.0.0.2,10.0.0.3:6443"), code: codes.InvalidArgument, msg: "apid port"},
		{name: "this node on another port", md: md("node", "10.0.0.1:2379"), code: codes.InvalidArgument, msg: "apid port"},
		{name: "a URL", md: md("node", "http://10.0.0.2/"), code: codes.InvalidArgument, msg: `node "http://10.0.0.2/"`},
		{name: "a URL without a port", md: md("node", "a/b?c"), code: codes.InvalidArgument, msg: "not an IP address or a hostname"},
		{name: "a path", md: md("nodes", "../../x"), code: codes.InvalidArgument, msg: "not an IP address or a hostname"},
		{name: "apid's port", md: md("node", "10.0.0.2:50000"), targets: 1},
		{name: "IPv6", md: md("nodes", "fd00::2,[fd00::3]:50000,[fd00::4]"), targets: 3},
		{name: "hostname", md: md("node", "worker-1.example"), targets: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := routeServer().direct(mVersion, reader, tc.md)
			if tc.code != codes.OK {
				if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.msg) {
					t.Fatalf("want %v %q, got %v", tc.code, tc.msg, err)
				}

				return
			}

			if err != nil || len(d.targets) != tc.targets {
				t.Fatalf("got %d targets, error %v; want %d", len(d.targets), err, tc.targets)
			}
		})
	}
}

func repeatNodes(nodes []string) []string {
	kv := make([]string, 0, 2*len(nodes))
	for _, n := range nodes {
		kv = append(kv, "nodes", n)
	}

	return kv
}

func TestDirect(t *testing.T) {
	reader, admin := role.MakeSet(role.Reader), role.MakeSet(role.Admin)

	for _, tc := range []struct {
		name    string
		method  string
		roles   role.Set
		md      metadata.MD
		mode    mode
		targets []string
		inspect bool
		code    codes.Code // not OK: the call is refused with this code
		msg     string     // and this in the message
	}{
		{name: "no routing metadata", method: mVersion, roles: reader, mode: toMachined},
		{name: "node is this node", method: mVersion, roles: reader, md: md("node", "10.0.0.1"), mode: toMachined},
		{name: "node is this node with a port", method: mVersion, roles: reader, md: md("node", "10.0.0.1:50000"), mode: toMachined},
		{name: "node is this node by name", method: mVersion, roles: reader, md: md("node", "node1"), mode: toMachined},
		{name: "node is another node", method: mVersion, roles: reader, md: md("node", "10.0.0.2"), mode: toNode, targets: []string{"10.0.0.2"}},
		{name: "node takes the first of a list", method: mVersion, roles: reader, md: md("node", " 10.0.0.2 , 10.0.0.3"), mode: toNode, targets: []string{"10.0.0.2"}},
		{name: "nodes naming only this node is still stamped", method: mVersion, roles: reader, md: md("nodes", "10.0.0.1"), mode: toNodes, targets: []string{"10.0.0.1"}},
		{name: "nodes fan out", method: mVersion, roles: reader, md: md("nodes", "10.0.0.1,10.0.0.2"), mode: toNodes, targets: []string{"10.0.0.1", "10.0.0.2"}},
		{name: "nodes repeated and duplicated", method: mVersion, roles: reader, md: md("nodes", "a,b", "nodes", "b", "nodes", "c"), mode: toNodes, targets: []string{"a", "b", "c"}},
		{name: "nodes wins over node", method: mVersion, roles: reader, md: md("node", "a", "nodes", "b"), mode: toNodes, targets: []string{"b"}},
		{name: "empty nodes is a local call", method: mVersion, roles: reader, md: md("nodes", " , "), mode: toMachined},
		{name: "server stream fans out", method: mLogs, roles: reader, md: md("nodes", "a,b"), mode: toNodes, targets: []string{"a", "b"}},
		{name: "client stream to one of nodes", method: mEtcdRecover, roles: admin, md: md("nodes", "10.0.0.2"), mode: toNode, targets: []string{"10.0.0.2"}},
		{name: "client stream to this node in nodes", method: mEtcdRecover, roles: admin, md: md("nodes", "node1"), mode: toMachined},
		{name: "client stream to many", method: mEtcdRecover, roles: admin, md: md("nodes", "a,b"), code: codes.InvalidArgument, msg: "one node only, got 2 nodes"},
		{name: "COSI read by a reader is inspected", method: mCOSIList, roles: reader, mode: toMachined, inspect: true},
		{name: "COSI read by an admin is not", method: mCOSIList, roles: admin, mode: toMachined},
		{name: "COSI read on one of nodes is not stamped", method: mCOSIList, roles: admin, md: md("nodes", "a"), mode: toNode, targets: []string{"a"}},
		{name: "COSI read across nodes", method: mCOSIList, roles: admin, md: md("nodes", "a,b"), code: codes.InvalidArgument, msg: "cannot be merged"},
		{name: "role too small", method: mReboot, roles: reader, md: md("nodes", "a,b"), code: codes.PermissionDenied, msg: "requires role os:operator (have os:reader)"},
		{name: "no roles", method: mVersion, code: codes.PermissionDenied, msg: "have none"},
		{name: "method not in the table", method: "/machine.MachineService/Nope", roles: admin, code: codes.PermissionDenied, msg: "not in the authorization table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := routeServer().direct(tc.method, tc.roles, tc.md)

			if tc.code != codes.OK {
				if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.msg) {
					t.Fatalf("want %v %q, got %v", tc.code, tc.msg, err)
				}

				return
			}

			if err != nil {
				t.Fatal(err)
			}

			if d.mode != tc.mode || !slices.Equal(d.targets, tc.targets) || d.inspect != tc.inspect {
				t.Errorf("got mode %d targets %q inspect %v, want %d %q %v", d.mode, d.targets, d.inspect, tc.mode, tc.targets, tc.inspect)
			}
		})
	}
}

// TestRoute is the relay's side: roles from the certificate, the backend, the header sent on.
func TestRoute(t *testing.T) {
	for _, tc := range []struct {
		name     string
		certOrg  []string // nil: no verified client certificate
		method   string
		extra    []string // header name, value pairs after the pseudo-headers
		backend  int
		roles    []string // talos-role values sent on
		keepNode bool     // node/nodes headers sent on
		code     codes.Code
	}{
		{name: "local call", certOrg: []string{"os:reader"}, method: mVersion, backend: backendMachined, roles: []string{"os:reader"}},
		{name: "this node named", certOrg: []string{"os:reader"}, method: mVersion, extra: []string{"node", "10.0.0.1"}, backend: backendMachined, roles: []string{"os:reader"}},
		{name: "another node", certOrg: []string{"os:reader"}, method: mVersion, extra: []string{"node", "10.0.0.2"}, backend: backendRouter, roles: []string{"os:reader"}, keepNode: true},
		{name: "fan-out", certOrg: []string{"os:operator"}, method: mVersion, extra: []string{"nodes", "10.0.0.1,10.0.0.2"}, backend: backendRouter, roles: []string{"os:operator"}, keepNode: true},
		{name: "COSI read by a reader goes to the router", certOrg: []string{"os:reader"}, method: mCOSIList, backend: backendRouter, roles: []string{"os:reader"}},
		{name: "COSI read by an admin goes to machined", certOrg: []string{"os:admin"}, method: mCOSIList, backend: backendMachined, roles: []string{"os:admin"}},
		{name: "impersonator asserting roles", certOrg: []string{"os:impersonator"}, method: mVersion, extra: []string{mdRole, "os:reader", mdRole, "os:etcd:backup"}, backend: backendMachined, roles: []string{"os:etcd:backup", "os:reader"}},
		{name: "reader asserting a role", certOrg: []string{"os:reader"}, method: mVersion, extra: []string{mdRole, "os:admin"}, code: codes.PermissionDenied},
		{name: "impersonator alone", certOrg: []string{"os:impersonator"}, method: mVersion, code: codes.PermissionDenied},
		{name: "no client certificate", method: mVersion, code: codes.Unauthenticated},
		{name: "too many nodes for a client stream", certOrg: []string{"os:admin"}, method: mEtcdRecover, extra: []string{"nodes", "a,b"}, code: codes.InvalidArgument},
		// Found by FuzzRoute: gRPC reads "Node" as node, past the relay's node checks.
		{name: "uppercase header name", certOrg: []string{"os:admin"}, method: mEtcdRecover, extra: []string{"Node", "0"}, code: codes.InvalidArgument},
		{name: "uppercase role header", certOrg: []string{"os:reader"}, method: mVersion, extra: []string{"Talos-Role", "os:admin"}, code: codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			header := []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":path", Value: tc.method}}
			for i := 0; i+1 < len(tc.extra); i += 2 {
				header = append(header, hpack.HeaderField{Name: tc.extra[i], Value: tc.extra[i+1]})
			}

			var state *tls.ConnectionState
			if tc.certOrg != nil {
				state = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Subject: pkix.Name{Organization: tc.certOrg}}}}}
			}

			d := routeServer().route(state, header)

			if codes.Code(d.Code) != tc.code {
				t.Fatalf("code %v (%s), want %v", codes.Code(d.Code), d.Message, tc.code)
			}

			if tc.code != codes.OK {
				if d.Message == "" || d.Header != nil {
					t.Errorf("a refusal needs a message and forwards nothing: %q %v", d.Message, d.Header)
				}

				return
			}

			var roles []string

			node := false

			for _, f := range d.Header {
				switch f.Name {
				case mdRole:
					roles = append(roles, f.Value)
				case mdNode, mdNodes:
					node = true
				}
			}

			if d.Backend != tc.backend || !slices.Equal(roles, tc.roles) || node != tc.keepNode {
				t.Errorf("backend %d roles %v node kept %v, want %d %v %v", d.Backend, roles, node, tc.backend, tc.roles, tc.keepNode)
			}

			if d.Header[0].Name != ":method" || d.Header[1] != (hpack.HeaderField{Name: ":path", Value: tc.method}) {
				t.Errorf("pseudo-headers not first and unchanged: %v", d.Header)
			}
		})
	}
}

func md(kv ...string) metadata.MD { return metadata.Pairs(kv...) }
